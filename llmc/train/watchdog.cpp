// The watchdog thread and its limits (see watchdog.h).
#include "llmc/train/watchdog.h"

#include <algorithm>
#include <cstdio>

namespace llmc {

namespace {
std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, seconds < 10 ? "%.3gs" : "%.0fs", seconds);
  return text;
}

const char* activity_name(Watchdog::Activity activity) {
  switch (activity) {
    case Watchdog::Activity::kStep: return "step";
    case Watchdog::Activity::kValidation: return "validation after step";
    case Watchdog::Activity::kSamples: return "samples after step";
    case Watchdog::Activity::kCheckpoint: return "checkpoint after step";
  }
  return "?";
}
}  // namespace

TimeoutPolicy::TimeoutPolicy(double timeout_seconds) : explicit_seconds_(timeout_seconds) {}

void TimeoutPolicy::step_finished(int nth_step, double seconds) {
  if (nth_step < kFirstMeasuredStep || nth_step > kLastMeasuredStep) return;
  slowest_measured_ = std::max(slowest_measured_, seconds);
  measured_ = nth_step == kLastMeasuredStep;
}

double TimeoutPolicy::step_limit() const {
  if (explicit_seconds_ > 0) return explicit_seconds_;
  if (!measured_) return kColdLimitSeconds;
  return std::max(kFloorSeconds, kStepTimeFactor * slowest_measured_);
}

double TimeoutPolicy::other_limit() const { return explicit_seconds_ > 0 ? explicit_seconds_ : kColdLimitSeconds; }

std::string TimeoutPolicy::describe_step_limit() const {
  if (explicit_seconds_ > 0) return "--timeout " + seconds_text(explicit_seconds_);
  if (!measured_)
    return "automatic: " + seconds_text(kColdLimitSeconds) + " until step " + std::to_string(kLastMeasuredStep + 1);
  return "automatic: " + seconds_text(step_limit()) + " = max(" + seconds_text(kFloorSeconds) + ", " +
         seconds_text(kStepTimeFactor) + " x " + seconds_text(slowest_measured_) + ")";
}

Watchdog::Watchdog(double timeout_seconds, DescribeDevice describe_device, Abort abort, std::chrono::milliseconds poll)
    : policy_(timeout_seconds),
      describe_device_(std::move(describe_device)),
      abort_(std::move(abort)),
      poll_(poll),
      thread_(&Watchdog::watch, this) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void Watchdog::begin(Activity activity, int step) {
  std::lock_guard<std::mutex> lock(mutex_);
  active_ = true;
  activity_ = activity;
  step_ = step;
  since_ = std::chrono::steady_clock::now();
}

void Watchdog::step_finished(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  policy_.step_finished(++steps_finished_, seconds);
}

void Watchdog::idle() {
  std::lock_guard<std::mutex> lock(mutex_);
  active_ = false;
}

// Wakes every poll interval; past the limit it reports and aborts (the abort never returns).
void Watchdog::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    changed_.wait_for(lock, poll_);
    if (stop_ || !active_) continue;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
    const double limit = activity_ == Activity::kStep ? policy_.step_limit() : policy_.other_limit();
    if (waited <= limit) continue;
    std::string message = "watchdog: " + std::string(activity_name(activity_)) + " " + std::to_string(step_) +
                          " has not finished after " + seconds_text(waited) + " (limit " + seconds_text(limit) +
                          (activity_ == Activity::kStep ? ", " + policy_.describe_step_limit() : std::string()) + ")";
    lock.unlock();  // the device query may take a moment; the loop's calls must not wait for it
    abort_(with_device_wait(message));
    return;  // only reached when a test's abort returns
  }
}

std::string Watchdog::with_device_wait(std::string message) const {
  const std::string device = describe_device_ ? describe_device_() : "";
  message += device.empty() ? "; no collective is unfinished on this rank's device (the host waits)" : "; waiting for " + device;
  return message + "; ending all ranks";
}

}  // namespace llmc
