// How closely this build trains the speedrun model like the record's arithmetic: prints, step by step, the
// device trajectory's loss (train_step(), the trainer's loss scale, lr and window schedules) beside the
// reference trajectory's (the double-precision model's SUM-loss gradients into the same optimizer), and the
// parameters' distance at the end. Emulated, speedrun-tiny; built for fp32 and bf16 (docs/speedrun_model.md).
// --dump DIR writes the first step's inputs for test/train/speedrun_bf16_replay.py (the record's arithmetic).
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "llmc/base/atomic_file.h"
#include "llmc/base/bf16_bits.h"
#include "llmc/base/command_line.h"
#include "llmc/base/file_io.h"
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
  int heads = 2, head_dim = 16;  // speedrun-tiny's; head size 128 runs the bf16 build's window attention kernel
  uint32_t batch_seed = 500;     // micro-batch i draws from batch_seed + i
  std::string dump_dir;          // empty: no dump
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
  setup.config.num_heads = o.heads;
  setup.config.head_dim = o.head_dim;
  validate_speedrun_config(setup.config);
  setup.start = bf16_start(setup.config, o.seed);
  setup.steps = o.steps;
  setup.micro_steps = o.micro_steps;
  for (int i = 0; i < o.steps * o.micro_steps; i++)
    setup.batches.push_back(
        random_batch(setup.config.max_seq_len, setup.config.vocab_size, o.batch_seed + static_cast<uint32_t>(i)));
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

void write_tensors(const std::string& path, ref::SpeedrunParams tensors, const SpeedrunConfig& config) {
  AtomicFileWriter out(path);
  for (const ref::NamedTensor& tensor : ref::named_tensors(tensors, config))
    out.write(tensor.values->data(), tensor.values->size() * sizeof(double));
  out.commit();
}

// The first micro-batch of step 1 as the replay reads it, in `dir`: meta.json (config, batch, windows in
// tokens, the device's RoPE tables and attention scale, tensor names and shapes, both step-1 losses), and,
// float64 in the reference's tensor order, params.bin (the start), device_grads.bin and reference_grads.bin
// (this build's and the double-precision model's gradients of the SUM loss of that batch at the start).
void dump_first_step(const std::string& dir, const TrajectorySetup& setup, double device_loss, double reference_loss) {
  const SpeedrunConfig& c = setup.config;
  const SpeedrunBatch& batch = setup.batches.front();
  ref::SpeedrunParams params = from_layout(make_speedrun_layout(c, 1), setup.start);
  make_directories(dir, "dump directory");
  nlohmann::json meta;
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  {
    SpeedrunModel model(c, 1, c.max_seq_len, 1, stream, kSpeedrunTestBos);
    model.upload_params(setup.start);
    const std::unique_ptr<WindowSchedule> windows = follow_windows(setup, model);
    if (windows) windows->before_step(0);
    model.forward(batch.inputs.data(), batch.targets.data(), 0, true, 1.0f);
    model.backward(true);
    write_tensors(dir + "/device_grads.bin", from_layout(model.layout(), model.download_grads()), c);
    ref::ReferenceSpeedrun reference(c);
    use_model_rope(reference, model);
    reference.params = params;
    reference.grads = ref::zero_speedrun_params(c);
    reference_forward(reference, model, batch);
    reference.backward(1.0);
    write_tensors(dir + "/reference_grads.bin", reference.grads, c);
    std::vector<float> cos_table, sin_table;
    model.download_rope_tables(cos_table, sin_table);
    meta["rope_cos"] = cos_table;
    meta["rope_sin"] = sin_table;
    meta["attn_scale"] = model.attn_scale();
    meta["window_short"] = model.short_window_tokens();
    meta["window_long"] = model.long_window_tokens();
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
  meta["config"] = {{"V", c.vocab_size}, {"L", c.num_blocks}, {"H", c.num_heads}, {"D", c.head_dim}};
  meta["T"] = c.max_seq_len;
  meta["tokens"] = batch.inputs;
  meta["targets"] = batch.targets;
  meta["cu_seqlens"] = batch.cu_seqlens;
  meta["precision"] = kPrecisionName;
  meta["device_loss"] = device_loss;
  meta["reference_loss"] = reference_loss;
  nlohmann::json tensors = nlohmann::json::array();
  for (const ref::NamedTensor& tensor : ref::named_tensors(params, c))
    tensors.push_back({{"name", tensor.name}, {"shape", tensor.shape}});
  meta["tensors"] = tensors;
  write_tensors(dir + "/params.bin", params, c);
  AtomicFileWriter meta_file(dir + "/meta.json");
  meta_file.write(meta.dump(1));
  meta_file.commit();
}

}  // namespace

int main(int argc, char** argv) {
  ProbeOptions o;
  llmc::CommandLine app{"The speedrun model's training in this build against the double-precision model's gradients"};
  app.in_range("--steps", o.steps, 4, 1000, "optimizer steps");
  app.in_range("--micro-steps", o.micro_steps, 1, 64, "micro-steps of 64 tokens per step");
  app.option("--seed", o.seed, "seed of the perturbed init");
  app.option("--dump", o.dump_dir, "write step 1's first micro-batch and start here (for speedrun_bf16_replay.py)");
  app.in_range("--heads", o.heads, 1, 16, "attention heads (speedrun-tiny: 2)");
  app.in_range("--head-dim", o.head_dim, 4, 128, "head size (speedrun-tiny: 16)");
  app.option("--batch-seed", o.batch_seed, "seed of the first micro-batch (the i-th: seed + i)");
  if (const int exit_status = app.parse(argc, argv); exit_status >= 0) return exit_status;
  if (!o.dump_dir.empty() && o.micro_steps != 1) {
    std::fprintf(stderr, "speedrun_agreement_probe: --dump needs --micro-steps 1 (the step-1 losses of one batch)\n");
    return 2;
  }
  CommContext comm;
  const TrajectorySetup setup = make_setup(o);
  const Trajectory reference = reference_trajectory(setup, comm);
  const float dloss = loss_gradient_scale(LossReduction::kSum, setup.config.max_seq_len, o.micro_steps);
  const Trajectory device = device_trajectory(setup, comm, dloss);
  std::printf(
      "# %s build, speedrun-tiny (H=%d, D=%d), %d steps x %d micro-steps of %d tokens, perturbed init (seed %llu)\n",
      kPrecisionName, o.heads, o.head_dim, o.steps, o.micro_steps, setup.config.max_seq_len,
      static_cast<unsigned long long>(o.seed));
  print_losses(setup, device, reference);
  print_update_errors(setup, device, reference);
  if (!o.dump_dir.empty()) dump_first_step(o.dump_dir, setup, device.losses.front(), reference.losses.front());
  return 0;
}
