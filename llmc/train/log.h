// The trainer's log: a header (configuration, git commit, device) and one line per step in the
// format modded-nanogpt's analysis regexes read, written to stdout and to the run's log file.
#pragma once
#include <string>
#include <vector>

#include "llmc/base/file_io.h"
#include "llmc/train/run_info.h"

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

// Everything the log header records, so that the run can be reproduced.
struct LogHeader {
  RunInfo run;                  // commit, device, driver, runtime
  std::string precision;        // "bf16" | "fp32"
  int world_size = 1;
  std::string model;            // describe_config(): "L=12 NH=12 C=768 ..."
  size_t num_parameters = 0;
  std::string model_source;     // "init seed 1337" | "from FILE"
  std::string options_text;     // one "name=value" per line (CLI11's config output)
  int batch_size = 0, seq_len = 0, grad_accum = 1;
  size_t activation_bytes = 0, optimizer_state_bytes = 0;
  std::string overlap;
  std::vector<std::string> notes;  // each becomes a line "# <note>" after the rest
};
// The header's lines, each starting with "# ":
//   # train_gpt2 COMMIT precision:bf16 ranks:8
//   # device: NAME driver:13.0 runtime:12.8
//   # model: L=12 ... parameters:124475904 init seed 1337
//   # option lr=0.0006            (one line per option)
//   # batch: B=16 T=1024 grad_accum=4 tokens/step=524288 activations:...MiB optimizer_state/rank:...B overlap:full
std::vector<std::string> format_log_header(const LogHeader& header);

// Only the writer (rank 0) prints or writes. The file is opened for appending so that a resumed run
// continues the same log; every line is flushed so a crash loses nothing already reported, and a line
// that cannot be written (disk full) throws FileError naming the file and the cause.
class TrainLog {
 public:
  TrainLog(const std::string& path, bool is_writer);  // throws FileError when the file cannot be opened
  TrainLog(const TrainLog&) = delete;
  TrainLog& operator=(const TrainLog&) = delete;

  void line(const std::string& text);
  // The last line of a run stopped by an error, "# stopped by an error: <why>", in the file only (the
  // error itself goes to stderr); best effort, never throws (it runs while an error is handled).
  void record_failure(const std::string& why);

 private:
  bool is_writer_;
  std::string path_;
  FileHandle file_;
};

}  // namespace llmc
