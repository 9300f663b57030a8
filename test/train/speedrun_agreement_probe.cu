// How closely this build trains the speedrun model like the record's arithmetic: prints, step by step, the
// device trajectory's loss (train_step(), the trainer's loss scale, lr and window schedules) beside the
// reference trajectory's (the double-precision model's SUM-loss gradients into the same optimizer), and the
// parameters' distance at the end. Emulated, speedrun-tiny; built for fp32 and bf16 (docs/speedrun_model.md).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "llmc/base/bf16_bits.h"
#include "llmc/dist/comm.h"
#include "llmc/model/modded44/speedrun_config.h"
#include "llmc/model/modded44/speedrun_layout.h"
#include "llmc/schedule/lr_schedule.h"
#include "llmc/train/loss_reduction.h"
#include "test/support/speedrun_test_inputs.h"
#include "test/support/speedrun_trajectory.h"

namespace {

using namespace llmc;
using namespace llmc::test;  // the speedrun test inputs and trajectories

struct ProbeOptions {
  int steps = 10;
  int micro_steps = 2;
  uint64_t seed = 11;
};

// The perturbed init of the model tests, every value in bf16 so that both builds start from the same point.
std::vector<float> bf16_start(const SpeedrunConfig& config, uint64_t seed) {
  ref::SpeedrunParams params = test_params(config, seed);
  std::vector<float> start = to_layout(make_speedrun_layout(config, 1), params);
  for (float& value : start) value = bf16_bits_to_float(float_to_bf16_bits(value));
  return start;
}

TrajectorySetup make_setup(const ProbeOptions& o) {
  TrajectorySetup setup;
  setup.config = speedrun_config_from_name("speedrun-tiny");
  setup.start = bf16_start(setup.config, o.seed);
  setup.steps = o.steps;
  setup.micro_steps = o.micro_steps;
  for (int i = 0; i < o.steps * o.micro_steps; i++)
    setup.batches.push_back(random_batch(setup.config.max_seq_len, setup.config.vocab_size, 500 + i));
  // As the trainer wires --recipe modded-2025-10-31 --steps N: --lr 1.0 times the speedrun multiplier, the
  // record's windows and momentum stretched to N steps.
  const LrSchedule lr{1.0, 0, o.steps, 0.0, LrDecay::kSpeedrun};
  setup.lr = [lr](int step) { return static_cast<float>(lr.at(step - 1)); };
  setup.optimizer.schedule = SpeedrunSchedule::for_total_steps(std::max(4, o.steps));
  setup.windows = SpeedrunSchedule::for_total_steps(o.steps);
  return setup;
}

void print_losses(const TrajectorySetup& setup, const Trajectory& device, const Trajectory& reference) {
  std::printf("| step | lr | windows (short, long) | device loss | reference loss | device - reference |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (int step = 1; step <= setup.steps; step++) {
    const AttentionWindows w = setup.windows->windows(step - 1);
    const double d = device.losses[static_cast<size_t>(step - 1)], r = reference.losses[static_cast<size_t>(step - 1)];
    std::printf("| %d | %.4f | %d, %d | %.6f | %.6f | %+.2e |\n", step, setup.lr(step), w.short_blocks, w.long_blocks,
                d, r, d - r);
  }
}

// The update error (speedrun_trajectory.h) by kind of tensor: the largest and the median.
void print_update_errors(const TrajectorySetup& setup, const Trajectory& device, const Trajectory& reference) {
  const auto errors =
      update_errors(make_speedrun_layout(setup.config, 1), setup.start, device.params, reference.params);
  const char* kinds[] = {"embed", "ve", "smear_gate", "qkvo", "attn_gate", "fc", "proj", "head", "scalars"};
  std::printf("\n| tensors | count | largest update error | median |\n|---|---|---|---|\n");
  for (const char* kind : kinds) {
    std::vector<double> values;
    for (const auto& [name, error] : errors)
      if (name.find(kind) != std::string::npos && !(std::string(kind) == "embed" && name != "embed"))
        values.push_back(error);
    if (values.empty()) continue;
    std::sort(values.begin(), values.end());
    std::printf("| %s | %zu | %.2e | %.2e |\n", kind, values.size(), values.back(), values[values.size() / 2]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  ProbeOptions o;
  CLI::App app{"The speedrun model's training in this build against the double-precision model's gradients"};
  app.add_option("--steps", o.steps, "optimizer steps")->check(CLI::Range(4, 1000));
  app.add_option("--micro-steps", o.micro_steps, "micro-steps of 64 tokens per step")->check(CLI::Range(1, 64));
  app.add_option("--seed", o.seed, "seed of the perturbed init");
  CLI11_PARSE(app, argc, argv);
  CommContext comm;
  const TrajectorySetup setup = make_setup(o);
  const Trajectory reference = reference_trajectory(setup, comm);
  const float dloss = loss_gradient_scale(LossReduction::kSum, setup.config.max_seq_len, o.micro_steps);
  const Trajectory device = device_trajectory(setup, comm, dloss);
  std::printf("# %s build, speedrun-tiny, %d steps x %d micro-steps of %d tokens, perturbed init (seed %llu)\n",
              kPrecisionName, o.steps, o.micro_steps, setup.config.max_seq_len,
              static_cast<unsigned long long>(o.seed));
  print_losses(setup, device, reference);
  print_update_errors(setup, device, reference);
  return 0;
}
