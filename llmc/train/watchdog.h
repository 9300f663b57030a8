// A watchdog thread per rank: when a step, a validation, samples or a checkpoint has not finished within
// its limit (a rank hung in a collective, a stalled peer, a stuck file system), it prints which step and
// activity the host is in and which collective (and bucket) the device waits for, and ends every rank
// of the job -- NCCL communicator aborted, MPI_Abort -- instead of letting all of them wait forever.
//
// The limit (--timeout SECONDS, 0 = automatic): an explicit value applies to every step, validation,
// sampling and checkpoint. Automatic: 10 minutes (kColdLimitSeconds) until the step time is known; from
// the 7th step of the process on, steps get max(60 s, 20 x the slowest of steps 2..6) (step 1 carries the
// start-up), while validation, samples and checkpoints keep 10 minutes.
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace llmc {

constexpr int kExitWatchdog = 124;  // as timeout(1)

// The limits, as a pure function of the measured step times (kept apart from the thread for its tests).
class TimeoutPolicy {
 public:
  static constexpr double kColdLimitSeconds = 600.0;
  static constexpr double kFloorSeconds = 60.0;
  static constexpr double kStepTimeFactor = 20.0;
  static constexpr int kFirstMeasuredStep = 2, kLastMeasuredStep = 6;  // counted from this process's start

  explicit TimeoutPolicy(double timeout_seconds);  // 0 = automatic
  // Feeds the duration of the n-th step this process ran (1-based).
  void step_finished(int nth_step, double seconds);
  double step_limit() const;
  double other_limit() const;  // validation, samples and checkpoints
  // "--timeout 3s", "automatic: 60s = max(60s, 20 x 0.012s)", "automatic: 600s until step 7".
  std::string describe_step_limit() const;

 private:
  double explicit_seconds_;
  double slowest_measured_ = 0.0;
  bool measured_ = false;
};

class Watchdog {
 public:
  enum class Activity { kStep, kValidation, kSamples, kCheckpoint };
  using DescribeDevice = std::function<std::string()>;     // what the device waits for ("" if nothing)
  using Abort = std::function<void(const std::string&)>;   // ends the job with this message; never returns

  // Starts the thread; nothing is watched until the first begin().
  Watchdog(double timeout_seconds, DescribeDevice describe_device, Abort abort,
           std::chrono::milliseconds poll = std::chrono::milliseconds(100));
  ~Watchdog();  // stops and joins the thread
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // The loop enters an activity of optimizer step `step`; its clock starts now.
  void begin(Activity activity, int step);
  // The step just begun took `seconds` (feeds the automatic limit); the clock keeps running.
  void step_finished(double seconds);
  // Nothing is watched until the next begin() (after the loop).
  void idle();
  const TimeoutPolicy& policy() const { return policy_; }

 private:
  void watch();
  std::string with_device_wait(std::string message) const;  // + what the device waits for

  TimeoutPolicy policy_;
  DescribeDevice describe_device_;
  Abort abort_;
  std::chrono::milliseconds poll_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool stop_ = false;
  bool active_ = false;
  Activity activity_ = Activity::kStep;
  int step_ = 0;
  int steps_finished_ = 0;
  std::chrono::steady_clock::time_point since_;
  std::thread thread_;
};

}  // namespace llmc
