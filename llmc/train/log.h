// The trainer's log: a header (configuration, git commit, device) and one line per step in the
// format modded-nanogpt's analysis regexes read, written to stdout and to the run's log file.
#pragma once
#include <cstdio>
#include <string>

namespace llmc {

struct TrainStepRecord {
  int step = 0;              // 1-based step just completed
  int total_steps = 0;
  double loss = 0.0;         // mean over ranks and micro-steps
  double train_time_ms = 0;  // cumulative training time (validation excluded)
  double step_avg_ms = 0;
  double tokens_per_second = 0;
  std::string mfu = "n/a";
  double lr = 0;
  double grad_norm = 0;
  double eta_seconds = 0;    // remaining steps * step_avg
};

// step:12/100 train_loss:4.1234 train_time:1523ms step_avg:126.95ms tok/s:41234 mfu:41.2% lr:6.0000e-04
// norm:1.2345 eta:1m52s
std::string format_train_line(const TrainStepRecord& record);
// "45s", "3m07s", "2h05m"
std::string format_duration(double seconds);
// step:100/100 val_loss:3.2790 train_time:12695ms step_avg:126.95ms
std::string format_val_line(int step, int total_steps, double val_loss, double train_time_ms, double step_avg_ms);

// Only the writer (rank 0) prints or writes. The file is opened for appending so that a resumed run
// continues the same log; every line is flushed so a crash loses nothing already reported.
class TrainLog {
 public:
  TrainLog(const std::string& path, bool is_writer);
  ~TrainLog();
  TrainLog(const TrainLog&) = delete;
  TrainLog& operator=(const TrainLog&) = delete;

  void line(const std::string& text);
  bool is_writer() const { return is_writer_; }

 private:
  bool is_writer_;
  std::FILE* file_ = nullptr;
};

}  // namespace llmc
