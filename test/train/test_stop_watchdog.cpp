// Tests of what stops a run from outside: the stop signals (the flag, the first signal kept, a second
// SIGINT ending the process at once with status 130, in a forked child) and the watchdog (its automatic
// limit from the measured step times; firing past the limit with the step, the activity and the device's
// pending collective in its message; silent while the loop keeps beating or is idle).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "llmc/train/stop_signals.h"
#include "llmc/train/watchdog.h"

using namespace llmc;
using namespace std::chrono_literals;

TEST(StopSignals, ParsesNamesAndRefusesUnknownOnes) {
  EXPECT_EQ(parse_stop_signals("TERM,INT,USR1"), (std::vector<int>{SIGTERM, SIGINT, SIGUSR1}));
  EXPECT_EQ(parse_stop_signals("SIGHUP,USR2"), (std::vector<int>{SIGHUP, SIGUSR2}));
  EXPECT_TRUE(parse_stop_signals("none").empty());
  EXPECT_TRUE(parse_stop_signals("").empty());
  for (const auto& [text, needle] : {std::pair<std::string, std::string>{"TERM,KILL", "--stop-signals: unknown signal 'KILL'"},
                                     {"TERM,", "unknown signal ''"}}) {
    try {
      parse_stop_signals(text);
      ADD_FAILURE() << "no error for '" << text << "'";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
    }
  }
  EXPECT_EQ(signal_name(SIGUSR1), "SIGUSR1");
}

TEST(StopSignals, TheFirstSignalIsKept) {
  const StopSignals signals({SIGUSR1, SIGUSR2});
  EXPECT_EQ(signals.received(), 0);
  ASSERT_EQ(::raise(SIGUSR2), 0);
  EXPECT_EQ(signals.received(), SIGUSR2);
  ASSERT_EQ(::raise(SIGUSR1), 0);  // handled, and the process lives on
  EXPECT_EQ(signals.received(), SIGUSR2);
}

TEST(StopSignals, ASecondSigintEndsTheProcessAtOnce) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const StopSignals signals({SIGINT});
    ::raise(SIGINT);
    if (signals.received() != SIGINT) ::_exit(2);
    ::raise(SIGINT);
    ::_exit(0);  // not reached: the second SIGINT exits
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), kExitInterrupted);
}

TEST(TimeoutPolicy, ExplicitOrDerivedFromTheMeasuredSteps) {
  const TimeoutPolicy fixed(3.0);
  EXPECT_EQ(fixed.step_limit(), 3.0);
  EXPECT_EQ(fixed.other_limit(), 3.0);
  TimeoutPolicy automatic(0.0);
  EXPECT_EQ(automatic.step_limit(), TimeoutPolicy::kColdLimitSeconds);
  automatic.step_finished(1, 500.0);  // the first step (start-up) does not count
  for (int step = 2; step <= 5; step++) automatic.step_finished(step, 4.0);
  EXPECT_EQ(automatic.step_limit(), TimeoutPolicy::kColdLimitSeconds);  // not measured yet
  automatic.step_finished(6, 5.0);
  EXPECT_EQ(automatic.step_limit(), 20.0 * 5.0);  // 20 x the slowest of steps 2..6
  automatic.step_finished(7, 50.0);               // later steps do not move it
  EXPECT_EQ(automatic.step_limit(), 100.0);
  EXPECT_EQ(automatic.other_limit(), TimeoutPolicy::kColdLimitSeconds);
  TimeoutPolicy fast(0.0);
  for (int step = 1; step <= 6; step++) fast.step_finished(step, 0.01);
  EXPECT_EQ(fast.step_limit(), TimeoutPolicy::kFloorSeconds);
  EXPECT_NE(fast.describe_step_limit().find("automatic: 60s"), std::string::npos) << fast.describe_step_limit();
}

namespace {
// Records what the watchdog would end the job with.
struct AbortRecorder {
  std::mutex mutex;
  std::string message;
  std::atomic<int> calls{0};
  Watchdog::Abort callback() {
    return [this](const std::string& why) {
      std::lock_guard<std::mutex> lock(mutex);
      message = why;
      calls++;
    };
  }
};
}  // namespace

TEST(Watchdog, FiresPastTheLimitNamingTheStepAndTheCollective) {
  AbortRecorder recorder;
  Watchdog watchdog(
      0.3, [] { return std::string("reduce_scatter of bucket 2 (layer 1) in step 7"); }, recorder.callback(), 20ms);
  watchdog.begin(Watchdog::Activity::kStep, 7);
  const auto start = std::chrono::steady_clock::now();
  while (recorder.calls == 0 && std::chrono::steady_clock::now() - start < 10s) std::this_thread::sleep_for(10ms);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(recorder.calls, 1);
  EXPECT_GE(waited, 0.3);
  std::lock_guard<std::mutex> lock(recorder.mutex);
  for (const char* part : {"watchdog: step 7 has not finished after", "--timeout 0.3s",
                           "waiting for reduce_scatter of bucket 2 (layer 1) in step 7", "ending all ranks"})
    EXPECT_NE(recorder.message.find(part), std::string::npos) << recorder.message;
}

TEST(Watchdog, SilentWhileTheLoopBeatsOrIdles) {
  AbortRecorder recorder;
  {
    Watchdog watchdog(0.2, nullptr, recorder.callback(), 10ms);
    for (int step = 1; step <= 10; step++) {  // 10 steps of 50 ms: each well inside the limit
      watchdog.begin(Watchdog::Activity::kStep, step);
      std::this_thread::sleep_for(50ms);
      watchdog.step_finished(0.05);
    }
    watchdog.idle();
    std::this_thread::sleep_for(400ms);  // idle: nothing is watched
  }
  EXPECT_EQ(recorder.calls, 0) << recorder.message;
  Watchdog checkpoint_watch(0.1, nullptr, recorder.callback(), 10ms);
  checkpoint_watch.begin(Watchdog::Activity::kCheckpoint, 4);
  std::this_thread::sleep_for(500ms);
  ASSERT_EQ(recorder.calls, 1);
  std::lock_guard<std::mutex> lock(recorder.mutex);
  EXPECT_NE(recorder.message.find("checkpoint after step 4"), std::string::npos) << recorder.message;
  EXPECT_NE(recorder.message.find("no collective is unfinished"), std::string::npos) << recorder.message;
}
