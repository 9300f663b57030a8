// Step-log formatting and the rank-0 log writer (see log.h).
#include "llmc/train/log.h"

#include <cstdarg>
#include <cstdint>
#include <cstdio>

namespace llmc {

namespace {
std::string printf_string(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string printf_string(const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  return buffer;
}
}  // namespace

std::string format_duration(double seconds) {
  const long long total = seconds > 0 ? static_cast<long long>(seconds + 0.5) : 0;
  if (total >= 3600) return printf_string("%lldh%02lldm", total / 3600, total / 60 % 60);
  if (total >= 60) return printf_string("%lldm%02llds", total / 60, total % 60);
  return printf_string("%llds", total);
}

std::string format_train_line(const TrainStepRecord& r) {
  return printf_string(
      "step:%d/%d train_loss:%.4f train_time:%.0fms step_avg:%.2fms tok/s:%.0f mfu:%s lr:%.4e norm:%.4f eta:%s",
      r.step, r.total_steps, r.loss, r.train_time_ms, r.step_avg_ms, r.tokens_per_second, r.mfu.c_str(), r.lr,
      r.grad_norm, format_duration(r.eta_seconds).c_str());
}

std::string format_val_line(int step, int total_steps, double val_loss, double train_time_ms, double step_avg_ms) {
  return printf_string("step:%d/%d val_loss:%.4f train_time:%.0fms step_avg:%.2fms", step, total_steps, val_loss,
                       train_time_ms, step_avg_ms);
}

std::vector<std::string> format_log_header(const LogHeader& h) {
  std::vector<std::string> lines;
  lines.push_back("# train_gpt2 " + h.run.git_commit + " precision:" + h.precision + " ranks:" +
                  std::to_string(h.world_size));
  lines.push_back("# device: " + h.run.device_name + " driver:" + h.run.driver_version + " runtime:" +
                  h.run.runtime_version);
  lines.push_back("# model: " + h.model + " parameters:" + std::to_string(h.num_parameters) + " " + h.model_source);
  for (size_t begin = 0, end; begin < h.options_text.size(); begin = end + 1) {
    end = h.options_text.find('\n', begin);
    if (end == std::string::npos) end = h.options_text.size();
    if (end > begin) lines.push_back("# option " + h.options_text.substr(begin, end - begin));
  }
  const int64_t tokens_per_step = int64_t{h.batch_size} * h.seq_len * h.grad_accum * h.world_size;
  lines.push_back("# batch: B=" + std::to_string(h.batch_size) + " T=" + std::to_string(h.seq_len) +
                  " grad_accum=" + std::to_string(h.grad_accum) + " tokens/step=" + std::to_string(tokens_per_step) +
                  " activations:" + std::to_string(h.activation_bytes >> 20) + "MiB optimizer_state/rank:" +
                  std::to_string(h.optimizer_state_bytes) + "B overlap:" + h.overlap);
  for (const std::string& note : h.notes) lines.push_back("# " + note);
  return lines;
}

TrainLog::TrainLog(const std::string& path, bool is_writer) : is_writer_(is_writer), path_(path) {
  if (!is_writer_ || path.empty()) return;
  file_ = open_file(path, "a", "log file");
}

void TrainLog::record_failure(const std::string& why) {
  if (!file_) return;
  std::fprintf(file_.get(), "# stopped by an error: %s\n", why.c_str());
  std::fflush(file_.get());
}

void TrainLog::line(const std::string& text) {
  if (!is_writer_) return;
  std::fprintf(stdout, "%s\n", text.c_str());
  std::fflush(stdout);
  if (file_ && (std::fprintf(file_.get(), "%s\n", text.c_str()) < 0 || std::fflush(file_.get()) != 0))
    throw_errno_file_error(path_, "write failed");
}

}  // namespace llmc
