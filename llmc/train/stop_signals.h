// Stopping a run cleanly when the cluster asks it to: the stop signals (SIGTERM, SIGINT and SIGUSR1 --
// Slurm's warning before preemption -- by default; --stop-signals) only set a flag; the training loop
// reads it at each step boundary, the ranks agree on it (agreed_stop_signal in train_gpt2.cu, before the
// next step is enqueued), and every rank stops after the same step with a complete checkpoint. The first
// stop signal is acknowledged on stderr ("train_gpt2: SIGTERM received: ..."). A second SIGINT (Ctrl-C
// twice) stops the process at once, without a checkpoint. Exit codes: below.
#pragma once
#include <string>
#include <vector>

namespace llmc {

constexpr int kExitStoppedBySignal = 75;  // EX_TEMPFAIL: stopped by a signal after a checkpoint; resume it
constexpr int kExitInterrupted = 130;     // 128 + SIGINT: a second SIGINT, no checkpoint

// "TERM,INT,USR1" -> {SIGTERM, SIGINT, SIGUSR1}; "" or "none" -> {}. Names: TERM, INT, HUP, USR1, USR2
// (with or without "SIG"). Throws std::invalid_argument naming an unknown one.
std::vector<int> parse_stop_signals(const std::string& text);
// "SIGTERM".
std::string signal_name(int signal);

// Installs the handlers while it lives (one instance at a time; the default dispositions come back on
// destruction). Signal handlers can reach only static storage, so the flag is the one global of its .cpp.
class StopSignals {
 public:
  explicit StopSignals(const std::vector<int>& signals);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first stop signal received so far by this process, 0 if none.
  int received() const;

 private:
  std::vector<int> signals_;
};

}  // namespace llmc
