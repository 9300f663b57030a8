// Step-log formatting and the rank-0 log writer (see train_log.h).
#include "llmc/train/log.h"

#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <stdexcept>

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
  const long long total = seconds > 0 ? (long long)(seconds + 0.5) : 0;
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

TrainLog::TrainLog(const std::string& path, bool is_writer) : is_writer_(is_writer) {
  if (!is_writer_ || path.empty()) return;
  file_ = std::fopen(path.c_str(), "a");
  if (!file_) throw std::runtime_error(path + ": cannot open log file for appending: " + std::strerror(errno));
}

TrainLog::~TrainLog() {
  if (file_) std::fclose(file_);
}

void TrainLog::line(const std::string& text) {
  if (!is_writer_) return;
  std::fprintf(stdout, "%s\n", text.c_str());
  std::fflush(stdout);
  if (file_) {
    std::fprintf(file_, "%s\n", text.c_str());
    std::fflush(file_);
  }
}

}  // namespace llmc
