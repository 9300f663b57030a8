// Training trajectories of the speedrun model for the loss-scale test and the agreement probe: the device
// model and the speedrun optimizer through train_step(), and the same optimizer on a stand-in model fed the
// double-precision reference's gradients of the record's loss (the SUM over each micro-batch, averaged
// over the micro-steps), both through the same lr and window schedules.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/dist/comm.h"
#include "llmc/dist/trace.h"
#include "llmc/model/modded44/speedrun_model.h"
#include "llmc/optim/speedrun_optimizer.h"
#include "llmc/schedule/speedrun_schedule.h"
#include "llmc/train/train_step.h"
#include "llmc/train/window_schedule.h"
#include "test/reference/reference_speedrun.h"
#include "test/support/speedrun_test_inputs.h"
#include "test/support/stand_in_speedrun_model.h"

namespace llmc::test {

// The training batches of a trajectory: the given micro-batches in order.
class FixedBatches : public TrainBatches {
 public:
  explicit FixedBatches(std::vector<SpeedrunBatch> batches) : batches_(std::move(batches)) {}
  TrainLoaderKind kind() const override { return TrainLoaderKind::kBos; }
  void next_batch(int32_t* inputs, int32_t* targets) override {
    const SpeedrunBatch& batch = batches_.at(next_++);
    std::copy(batch.inputs.begin(), batch.inputs.end(), inputs);
    std::copy(batch.targets.begin(), batch.targets.end(), targets);
  }
  void set_step_shape(int64_t, int64_t) override {
    throw std::logic_error("FixedBatches: the trajectory's batches have one length");
  }
  void save_position(TrainStateHeader&) const override {}
  void resume(const TrainStateHeader&, const std::string&) override {}
  std::string describe() const override { return "fixed batches"; }

 private:
  std::vector<SpeedrunBatch> batches_;
  size_t next_ = 0;
};

struct TrajectorySetup {
  SpeedrunConfig config;
  std::vector<float> start;            // the layout's buffer
  std::vector<SpeedrunBatch> batches;  // steps x micro_steps, of config.max_seq_len tokens
  int steps = 0;
  int micro_steps = 1;
  SpeedrunOptimizerSettings optimizer;
  std::function<float(int step)> lr = [](int) { return 1.0f; };  // 1-based step -> the loop's lr
  std::optional<SpeedrunSchedule> windows;                       // the trainer's window schedule; none: fixed
};

struct Trajectory {
  std::vector<float> params;   // after the last step
  std::vector<double> losses;  // per step: the mean loss per token over its micro-steps
};

// A model whose windows follow setup.windows as the trainer's WindowSchedule drives them.
inline std::unique_ptr<WindowSchedule> follow_windows(const TrajectorySetup& setup, SpeedrunModel& model) {
  if (!setup.windows) return nullptr;
  return std::make_unique<WindowSchedule>(WindowPlan::of(*setup.windows),
                                          [&model](const AttentionWindows& w, bool yarn) {
                                            return model.set_attention_windows(w.short_blocks, w.long_blocks, yarn);
                                          });
}

// The device model trained through train_step(), each token's loss gradient scaled by `dloss`.
inline Trajectory device_trajectory(const TrajectorySetup& setup, CommContext& comm, float dloss) {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  Trajectory out;
  {
    const int T = setup.config.max_seq_len;
    SpeedrunModel model(setup.config, 1, T, setup.micro_steps, stream, kSpeedrunTestBos);
    model.upload_params(setup.start);
    SpeedrunOptimizer optimizer(model, comm, setup.optimizer);
    optimizer.init_master(setup.start);
    const std::unique_ptr<WindowSchedule> windows = follow_windows(setup, model);
    FixedBatches batches(setup.batches);
    Tracer tracer(false, 0);
    StepParts parts{model, optimizer, batches, tracer, comm, setup.micro_steps, dloss};
    Batch host(static_cast<size_t>(T));
    for (int step = 1; step <= setup.steps; step++) {
      if (windows) windows->before_step(step - 1);
      out.losses.push_back(train_step(parts, step, setup.lr(step), host).loss);
    }
    optimizer.wait_for_all_params();
    out.params = model.download_params();
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
  return out;
}

inline ref::SpeedrunParams from_layout(const SpeedrunLayout& layout, const std::vector<float>& buffer) {
  ref::SpeedrunParams params = ref::zero_speedrun_params(layout.config);
  for (const ref::NamedTensor& tensor : ref::named_tensors(params, layout.config)) {
    const TensorView& view = layout.find(tensor.name);
    for (size_t i = 0; i < view.numel; i++) (*tensor.values)[i] = buffer[view.offset + i];
  }
  return params;
}

// The record's: the same optimizer on the stand-in model, fed at each step the reference's gradient of the
// SUM loss of each micro-batch, averaged over the micro-steps (in double, one rounding to floatX), at the
// parameters this trajectory has reached; the windows, RoPE tables and attention scale those of a device
// model driven through the same window schedule.
inline Trajectory reference_trajectory(const TrajectorySetup& setup, CommContext& comm) {
  StandInModel stand_in(setup.config, 1);
  stand_in.upload_params(setup.start);
  SpeedrunOptimizer optimizer(stand_in, comm, setup.optimizer);
  optimizer.init_master(setup.start);
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  const int T = setup.config.max_seq_len;
  auto probe = std::make_unique<SpeedrunModel>(setup.config, 1, T, 1, stream, kSpeedrunTestBos);
  const std::unique_ptr<WindowSchedule> windows = follow_windows(setup, *probe);
  ref::ReferenceSpeedrun reference(setup.config);
  Trajectory out;
  for (int step = 1; step <= setup.steps; step++) {
    if (windows) windows->before_step(step - 1);
    use_model_rope(reference, *probe);
    reference.params = from_layout(probe->layout(), stand_in.download_params());
    reference.grads = ref::zero_speedrun_params(setup.config);
    double loss = 0.0;
    for (int micro = 0; micro < setup.micro_steps; micro++) {
      loss += reference_forward(reference, *probe,
                                setup.batches.at(static_cast<size_t>((step - 1) * setup.micro_steps + micro)));
      reference.backward(1.0 / setup.micro_steps);
    }
    out.losses.push_back(loss / (static_cast<double>(T) * setup.micro_steps));
    stand_in.set_grads(to_layout(probe->layout(), reference.grads));
    enqueue_stand_in_step(stand_in, optimizer, step, setup.lr(step));
    optimizer.wait_for_all_params();
  }
  probe.reset();
  CUDA_CHECK(cudaStreamDestroy(stream));
  out.params = stand_in.download_params();
  return out;
}

// Each tensor's update error: RMS(got - want) over RMS(want - start) (RMS(got - want) if want did not
// move), in the layout's tensor order.
inline std::vector<std::pair<std::string, double>> update_errors(const ParamLayout& layout,
                                                                 const std::vector<float>& start,
                                                                 const std::vector<float>& got,
                                                                 const std::vector<float>& want) {
  std::vector<std::pair<std::string, double>> out;
  for (const TensorView& view : layout.tensors) {
    double error = 0.0, update = 0.0;
    for (size_t i = view.offset; i < view.offset + view.numel; i++) {
      const double miss = static_cast<double>(got[i]) - want[i], moved = static_cast<double>(want[i]) - start[i];
      error += miss * miss;
      update += moved * moved;
    }
    out.emplace_back(view.name, update > 0.0 ? std::sqrt(error / update) : std::sqrt(error));
  }
  return out;
}

}  // namespace llmc::test
