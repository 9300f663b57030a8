// A stand-in for the speedrun models in optimizer tests: a layout's buffers without layers (the 2025-10-31
// model's, or any layout with its fp32 span), whose backward delivers gradients the test sets, bucket by
// bucket from the last, calling the hooks as the real model does.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/family/trainable_model.h"
#include "llmc/model/modded44/speedrun_layout.h"
#include "llmc/optim/bucket_optimizer.h"
#include "test/support/device_buffer.h"

namespace llmc::test {

// A TrainableModel without layers: the buffers of a layout; backward() copies the gradients set by
// set_grads() into the gradient buffer bucket by bucket, from the last, calling the hook after each;
// forward() calls before_bucket_use for every bucket in order. Elements [fp32_offset, + fp32_count) are the
// model's fp32 tensors (take_fp32_params).
class StandInModel : public TrainableModel {
 public:
  StandInModel(ParamLayout layout, size_t fp32_offset, size_t fp32_count)
      : layout_(std::move(layout)),
        fp32_offset_(fp32_offset),
        fp32_count_(fp32_count),
        params_(layout_.total_size),
        grads_(layout_.total_size),
        pending_(layout_.total_size),
        scalars_(fp32_count) {
    CUDA_CHECK(cudaStreamCreate(&stream_));
    grads_.fill_zero();
  }
  // The 2025-10-31 model: its scalar vector is fp32.
  StandInModel(const SpeedrunConfig& config, int world_size)
      : StandInModel(make_speedrun_layout(config, world_size), config, world_size) {}
  ~StandInModel() override { CUDA_REPORT(cudaStreamDestroy(stream_)); }

  const ParamLayout& layout() const override { return layout_; }
  floatX* params() override { return params_.get(); }
  floatX* grads() override { return grads_.get(); }
  cudaStream_t stream() const override { return stream_; }
  std::string bucket_name(int bucket) const override { return "bucket " + std::to_string(bucket); }
  size_t activation_bytes() const override { return 0; }
  void set_gemm_algo_selection(GemmAlgoSelection) override {}
  void upload_batch(const int*, const int*, bool) override {}
  void forward_uploaded(int, bool, float, const BucketHook& before_bucket_use) override {
    for (int b = 0; b < layout_.num_buckets(); b++)
      if (before_bucket_use) before_bucket_use(b);
  }
  void backward(bool first_micro_step, const BucketHook& on_bucket_ready) override {
    if (!first_micro_step) throw std::logic_error("the stand-in model has no gradient accumulation");
    for (int b = layout_.num_buckets() - 1; b >= 0; b--) {
      const ParamBucket& bucket = layout_.buckets[b];
      CUDA_CHECK(cudaMemcpyAsync(grads_.get() + bucket.offset, pending_.get() + bucket.offset,
                                 bucket.padded_size * sizeof(floatX), cudaMemcpyDeviceToDevice, stream_));
      if (on_bucket_ready) on_bucket_ready(b);
    }
  }
  void enqueue_mean_loss(int, int) override {}
  double read_mean_loss(int) override { return 0.0; }
  // The scalars also in fp32, as the speedrun model keeps them (TrainableModel::take_fp32_params).
  void upload_params(const std::vector<float>& host) override {
    params_.upload_raw(to_x(host));
    scalars_.upload_raw(std::vector<float>(host.begin() + fp32_offset_, host.begin() + fp32_offset_ + fp32_count_));
  }
  std::vector<float> download_params() const override {
    std::vector<float> params = to_f(params_.download_raw());
    if (fp32_scalars_taken_) {
      const std::vector<float> scalars = scalars_.download_raw();
      std::copy(scalars.begin(), scalars.end(), params.begin() + fp32_offset_);
    }
    return params;
  }
  Fp32Params take_fp32_params() override {
    fp32_scalars_taken_ = true;
    return Fp32Params{scalars_.get(), fp32_offset_, fp32_count_};
  }
  std::vector<float> download_grads() const override { return to_f(grads_.download_raw()); }
  // The gradients the next backward delivers (synchronous).
  void set_grads(const std::vector<float>& host) { pending_.upload_raw(to_x(host)); }
  // Row-sparse tensors and the next backward's rows (TrainableModel::row_sparse_grads; the test keeps the other
  // rows of those gradients zero). Set the tensors before the optimizer is built. The stand-in's backward
  // overwrites every row; it only records what the optimizer says it wrote (written_rows).
  void set_row_sparse(std::vector<RowSparseGrad> rows) { row_sparse_ = std::move(rows); }
  const std::vector<RowSparseGrad>& row_sparse_grads() const override { return row_sparse_; }
  void grad_rows_written(int tensor, const std::vector<int>& rows) override {
    written_.push_back(RowSparseGrad{tensor, rows});
  }
  void all_grad_rows_written(int tensor) override { written_.push_back(RowSparseGrad{tensor, {-1}}); }
  // The calls since the last take: rows {-1} for every row.
  std::vector<RowSparseGrad> take_written_rows() { return std::exchange(written_, {}); }
  floatX* pending() { return pending_.get(); }

  static std::vector<floatX> to_x(const std::vector<float>& host) {
    std::vector<floatX> out(host.size());
    for (size_t i = 0; i < host.size(); i++) out[i] = from_float<floatX>(host[i]);
    return out;
  }
  static std::vector<float> to_f(const std::vector<floatX>& host) {
    std::vector<float> out(host.size());
    for (size_t i = 0; i < host.size(); i++) out[i] = to_float(host[i]);
    return out;
  }

 private:
  StandInModel(const SpeedrunLayout& layout, const SpeedrunConfig&, int)
      : StandInModel(layout, layout.tensor(SpeedrunTensor::kScalars).offset,
                     layout.tensor(SpeedrunTensor::kScalars).numel) {}

  ParamLayout layout_;
  size_t fp32_offset_, fp32_count_;
  DeviceBuffer<floatX> params_, grads_, pending_;
  DeviceBuffer<float> scalars_;
  std::vector<RowSparseGrad> row_sparse_, written_;
  bool fp32_scalars_taken_ = false;
  cudaStream_t stream_ = nullptr;
};

// One step as train_step() enqueues it (one micro-step), without waiting for the device.
inline void enqueue_stand_in_step(StandInModel& model, BucketOptimizer& optimizer, int step, float lr) {
  model.forward(nullptr, nullptr, 0, true, 1.0f, optimizer.before_bucket_use());
  optimizer.before_first_backward();
  optimizer.begin_step(step, lr);
  model.backward(true, optimizer.on_bucket_ready());
  optimizer.finish_step();
}

}  // namespace llmc::test
