// The stop-signal handlers (see stop_signals.h). A handler may only touch lock-free atomics and call
// async-signal-safe functions (write, _exit), so it records the signal and nothing else.
#include "llmc/train/stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace llmc {

namespace {

// The process-wide state the handlers share with StopSignals (static storage: see stop_signals.h).
std::atomic<int> first_signal{0};
std::atomic<int> interrupts{0};
static_assert(std::atomic<int>::is_always_lock_free, "signal handlers need lock-free atomics");

struct NamedSignal {
  const char* name;
  int number;
  const char* acknowledgement;  // printed when it is the first stop signal (a handler cannot format text)
};
constexpr NamedSignal kSignals[] = {
    {"TERM", SIGTERM, "train_gpt2: SIGTERM received: stopping after this step with a checkpoint\n"},
    {"INT", SIGINT,
     "train_gpt2: SIGINT received: stopping after this step with a checkpoint (a second SIGINT stops at once)\n"},
    {"HUP", SIGHUP, "train_gpt2: SIGHUP received: stopping after this step with a checkpoint\n"},
    {"USR1", SIGUSR1, "train_gpt2: SIGUSR1 received: stopping after this step with a checkpoint\n"},
    {"USR2", SIGUSR2, "train_gpt2: SIGUSR2 received: stopping after this step with a checkpoint\n"}};

void write_to_stderr(const char* text) { (void)!::write(STDERR_FILENO, text, std::strlen(text)); }

void on_stop_signal(int signal) {
  if (signal == SIGINT && interrupts.fetch_add(1) >= 1) {
    write_to_stderr("train_gpt2: second SIGINT: stopping at once, without a checkpoint\n");
    ::_exit(kExitInterrupted);
  }
  int none = 0;
  if (!first_signal.compare_exchange_strong(none, signal)) return;
  for (const NamedSignal& known : kSignals)
    if (known.number == signal) write_to_stderr(known.acknowledgement);
}

}  // namespace

std::vector<int> parse_stop_signals(const std::string& text) {
  std::vector<int> signals;
  if (text.empty() || text == "none") return signals;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    std::string name = text.substr(begin, end - begin);
    if (name.compare(0, 3, "SIG") == 0) name = name.substr(3);
    int number = 0;
    for (const NamedSignal& known : kSignals)
      if (name == known.name) number = known.number;
    if (number == 0)
      throw std::invalid_argument("--stop-signals: unknown signal '" + text.substr(begin, end - begin) +
                                  "' (expected a comma-separated list of TERM, INT, HUP, USR1, USR2, or none)");
    signals.push_back(number);
    begin = end + 1;
  }
  return signals;
}

std::string signal_name(int signal) {
  for (const NamedSignal& known : kSignals)
    if (known.number == signal) return std::string("SIG") + known.name;
  return "signal " + std::to_string(signal);
}

StopSignals::StopSignals(const std::vector<int>& signals) : signals_(signals) {
  first_signal = 0;
  interrupts = 0;
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // system calls in flight continue; the loop notices at the step boundary
  for (int signal : signals_)
    if (::sigaction(signal, &action, nullptr) != 0)
      throw std::runtime_error("cannot install the handler of " + signal_name(signal) + ": " + std::strerror(errno));
}

StopSignals::~StopSignals() {
  for (int signal : signals_) ::signal(signal, SIG_DFL);
}

int StopSignals::received() const { return first_signal.load(); }

}  // namespace llmc
