// NorMuon's kernels around Polar Express, for a batch of `count` matrices of one shape [rows, cols]:
//   1. momentum: buf = lerp(buf, g, 1-mu); u = lerp(g, buf, mu) (Nesterov-style), u in floatX;
//   2. variance: per column (or per row) mean of X^2, buf2 = lerp(buf2, mean, 1-beta2), step =
//      rsqrt(max(buf2, 1e-10)) and the factor that restores X's Frobenius norm after the scaling;
//   3. apply: X' = X * step * ratio; cautious weight decay X'' = X' + lr*wd * p where X' p >= 0;
//      p -= lr_eff X''.
// P is the parameter type: fp32 for the block matrices, floatX (bf16) for the gates, whose momentum and
// variance buffers and effective rates are then bf16 too. All reductions are in a fixed order (no atomics).
// The 2026-07-17 record's banks (SPEEDRUN89.md section 5) take 1 with fp32 buffers over bf16 gradients, 2
// as it is, and their own 3 (normuon_apply_mantissa): the scale rounded to bf16 before it multiplies X, and
// the bf16 parameter updated through its fp32 master, whose lower half is a 16-bit mantissa state.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/step_scalar.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

// PyTorch's lerp (start + w (end - start), or end - (1 - w)(end - start) for w >= 0.5), so that the
// buffers follow the reference's arithmetic.
__host__ __device__ __forceinline__ float torch_lerp(float start, float end, float weight) {
  const float difference = end - start;
  return weight < 0.5f ? start + weight * difference : end - difference * (1.0f - weight);
}

// v rounded to T and back: how the reference's rates and buffers of a bf16 parameter lose precision.
template <typename T>
__host__ __device__ __forceinline__ float round_to(float v) {
  return to_float(from_float<T>(v));
}

constexpr float kNorMuonVarianceFloor = 1e-10f;  // buf2 is clamped to this before the rsqrt
constexpr float kNorMuonNormFloor = 1e-10f;      // the scaled norm is clamped to this before dividing

// ---- 1. momentum ----------------------------------------------------------------------------------------
// grads: device array of `count` pointers; momentum [count, elements]; u [count, elements]. Grid (blocks, count).
// S is the buffer's type (the arithmetic is rounded to it), G the gradient's (S, or bf16 under fp32 buffers).
template <typename S, typename G>
__global__ void normuon_momentum_kernel(const G* const* grads, S* momentum, floatX* u, size_t elements,
                                        StepScalar mu_arg, StepScalar one_minus_mu_arg) {
  const float mu = mu_arg.get(), one_minus_mu = one_minus_mu_arg.get();
  const G* grad = grads[blockIdx.y];
  const size_t offset = static_cast<size_t>(blockIdx.y) * elements;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < elements; i += stride) {
    const float g = to_float(grad[i]);
    const float buffer = round_to<S>(torch_lerp(to_float(momentum[offset + i]), g, one_minus_mu));
    momentum[offset + i] = from_float<S>(buffer);
    u[offset + i] = from_float<floatX>(round_to<S>(torch_lerp(g, buffer, mu)));
  }
}

// mu and 1 - mu: fp32 roundings of the double momentum and of 1 - it (as the host computes them).
template <typename S, typename G = S>
void normuon_momentum(const G* const* grads, S* momentum, floatX* u, int count, size_t elements, StepScalar mu,
                      StepScalar one_minus_mu, cudaStream_t stream) {
  constexpr int kBlock = 256;
  const unsigned blocks = elementwise_grid(elements, kBlock) < 1024 ? elementwise_grid(elements, kBlock) : 1024;
  const double n = static_cast<double>(elements) * count;  // g read, the buffer read and written, u written
  LLMC_LAUNCH_COSTED((KernelCost{n * (sizeof(G) + 2.0 * sizeof(S) + sizeof(floatX)), 6.0 * n}),
                     (normuon_momentum_kernel<S, G>), dim3(blocks, static_cast<unsigned>(count)), dim3(kBlock), 0,
                     stream, grads, momentum, u, elements, mu, one_minus_mu);
}

template <typename S, typename G = S>
void normuon_momentum(const G* const* grads, S* momentum, floatX* u, int count, size_t elements, double mu,
                      cudaStream_t stream) {
  normuon_momentum<S, G>(grads, momentum, u, count, elements, StepScalar::fixed(static_cast<float>(mu)),
                         StepScalar::fixed(static_cast<float>(1.0 - mu)), stream);
}

// ---- 2. variance ----------------------------------------------------------------------------------------
// Statistics are per column (mean over the rows) or per row (mean over the columns): stat_len values per
// matrix. Column sums go through fixed row chunks (partials [count, chunks, cols]); a row's sum is one
// block's reduction (partials [count, 1, rows]).
struct NorMuonStatistics {
  int stat_len;    // values per matrix
  int reduce_len;  // terms per value (the mean's divisor)
  int chunks;      // partials per value
  int rows_per_chunk;
};

inline NorMuonStatistics normuon_statistics(int rows, int cols, bool per_column) {
  if (!per_column) return NorMuonStatistics{rows, cols, 1, rows};
  const ColumnChunking chunking = column_chunking(rows);
  return NorMuonStatistics{cols, rows, chunking.num_chunks, chunking.rows_per_chunk};
}

inline size_t normuon_partial_floats(int count, int rows, int cols, bool per_column) {
  const NorMuonStatistics stats = normuon_statistics(rows, cols, per_column);
  return static_cast<size_t>(count) * stats.chunks * stats.stat_len;
}

// Grid (ceil(cols / block), chunks, count): one thread per column and row chunk.
template <typename Tx>
__global__ void normuon_column_partials_kernel(const Tx* x, int rows, int cols, int rows_per_chunk, int chunks,
                                               float* partials) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const Tx* matrix = x + static_cast<size_t>(blockIdx.z) * rows * cols;
  const int begin = blockIdx.y * rows_per_chunk;
  const int end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;
  float sum = 0.0f;
  for (int r = begin; r < end; r++) {
    const float value = to_float(matrix[static_cast<size_t>(r) * cols + c]);
    sum += value * value;
  }
  partials[(static_cast<size_t>(blockIdx.z) * chunks + blockIdx.y) * cols + c] = sum;
}

// Grid (rows, count): one block per row.
template <typename Tx>
__global__ void normuon_row_sums_kernel(const Tx* x, int rows, int cols, float* partials) {
  __shared__ float warp_totals[kWarpSize];
  const Tx* row = x + (static_cast<size_t>(blockIdx.y) * rows + blockIdx.x) * cols;
  float sum = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float value = to_float(row[c]);
    sum += value * value;
  }
  sum = block_reduce_sum(sum, warp_totals);
  if (threadIdx.x == 0) partials[static_cast<size_t>(blockIdx.y) * rows + blockIdx.x] = sum;
}

// One block per matrix: updates the variance buffer, writes step[count, stat_len] = rsqrt(max(buf2, 1e-10))
// and ratio[count] = ||X|| / max(||X * step||, 1e-10), where ||X * step||^2 = sum of sums * step^2 (the
// norm of the scaled X before it is rounded).
template <typename P>
__global__ void normuon_variance_kernel(const float* partials, NorMuonStatistics stats, P* variance, float beta2_weight,
                                        float* steps, float* ratios) {
  __shared__ float warp_totals[kWarpSize];
  const int b = blockIdx.x;
  float norm_before = 0.0f, norm_after = 0.0f;
  for (int s = threadIdx.x; s < stats.stat_len; s += blockDim.x) {
    float total = 0.0f;
    for (int g = 0; g < stats.chunks; g++)
      total += partials[(static_cast<size_t>(b) * stats.chunks + g) * stats.stat_len + s];
    const size_t index = static_cast<size_t>(b) * stats.stat_len + s;
    const float buffer =
        round_to<P>(torch_lerp(to_float(variance[index]), total / static_cast<float>(stats.reduce_len), beta2_weight));
    variance[index] = from_float<P>(buffer);
    const float step = 1.0f / sqrtf(fmaxf(buffer, kNorMuonVarianceFloor));
    steps[index] = step;
    norm_before += total;
    norm_after += total * step * step;
  }
  norm_before = block_reduce_sum(norm_before, warp_totals);
  norm_after = block_reduce_sum(norm_after, warp_totals);
  if (threadIdx.x == 0) ratios[b] = sqrtf(norm_before) / fmaxf(sqrtf(norm_after), kNorMuonNormFloor);
}

// x: [count, rows, cols] (Polar Express output); variance [count, stat_len]; steps [count, stat_len];
// ratios [count]; partials: normuon_partial_floats.
template <typename P>
void normuon_variance(const floatX* x, P* variance, int count, int rows, int cols, bool per_column, double beta2,
                      float* partials, size_t partial_floats, float* steps, float* ratios, cudaStream_t stream) {
  require_scratch("normuon_variance", partial_floats, normuon_partial_floats(count, rows, cols, per_column));
  const NorMuonStatistics stats = normuon_statistics(rows, cols, per_column);
  constexpr int kBlock = 256;
  const double n = static_cast<double>(count) * rows * cols, partial_values = static_cast<double>(partial_floats);
  const KernelCost sums{n * sizeof(floatX) + partial_values * sizeof(float), 2.0 * n};
  if (per_column) {
    LLMC_LAUNCH_COSTED(sums, normuon_column_partials_kernel<floatX>,
                       dim3(static_cast<unsigned>(ceil_div(cols, kBlock)), static_cast<unsigned>(stats.chunks),
                            static_cast<unsigned>(count)),
                       dim3(kBlock), 0, stream, x, rows, cols, stats.rows_per_chunk, stats.chunks, partials);
  } else {
    LLMC_LAUNCH_COSTED(sums, normuon_row_sums_kernel<floatX>,
                       dim3(static_cast<unsigned>(rows), static_cast<unsigned>(count)),
                       dim3(row_block(cols, kBlock)), 0, stream, x, rows, cols, partials);
  }
  const double stat = static_cast<double>(count) * stats.stat_len;  // partials read; buffer r/w; steps written
  LLMC_LAUNCH_COSTED((KernelCost{partial_values * sizeof(float) + stat * (2.0 * sizeof(P) + sizeof(float)),
                                 stat * (stats.chunks + 8.0)}),
                     normuon_variance_kernel<P>, dim3(static_cast<unsigned>(count)), dim3(kBlock), 0, stream,
                     static_cast<const float*>(partials), stats, variance, static_cast<float>(1.0 - beta2), steps,
                     ratios);
}

// ---- 3. apply: scaling, cautious weight decay, update ------------------------------------------------------
// Grid (blocks, count). The effective rates are rounded to P as the reference's are (bf16 for the gates:
// lr 0.03 acts as 0.030029...): lr_eff = P(lr * P(shape_scale * lr_multiplier)), wd_eff = P(lr * wd). With
// copies, each updated value is also written rounded to floatX there (an fp32 master's model parameter).
template <typename P>
__global__ void normuon_apply_kernel(const floatX* x, const float* steps, const float* ratios, P* const* params,
                                     floatX* const* copies, const float* lr_multipliers, int rows, int cols,
                                     bool per_column, StepScalar lr_arg, StepScalar lr_times_wd_arg,
                                     float shape_scale) {
  const float lr = lr_arg.get(), lr_times_wd = lr_times_wd_arg.get();
  const int b = blockIdx.y;
  P* param = params[b];
  floatX* copy = copies != nullptr ? copies[b] : nullptr;
  const float ratio = ratios[b];
  const float lr_eff = round_to<P>(lr * round_to<P>(shape_scale * lr_multipliers[b]));
  const float wd_eff = round_to<P>(lr_times_wd);
  const int stat_len = per_column ? cols : rows;
  const size_t elements = static_cast<size_t>(rows) * cols;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < elements; i += stride) {
    const size_t stat = per_column ? i % cols : i / cols;
    const float scaled = round_to<floatX>(to_float(x[static_cast<size_t>(b) * elements + i]) *
                                          steps[static_cast<size_t>(b) * stat_len + stat] * ratio);
    const float p = to_float(param[i]);
    const float decayed = scaled * p >= 0.0f ? round_to<floatX>(scaled + p * wd_eff) : scaled;
    const P updated = from_float<P>(p - lr_eff * decayed);
    param[i] = updated;
    if (copy != nullptr) copy[i] = from_float<floatX>(to_float(updated));
  }
}

// lr and lr_times_wd: fp32 roundings of the double lr and of lr x weight decay.
template <typename P>
void normuon_apply(const floatX* x, const float* steps, const float* ratios, P* const* params, floatX* const* copies,
                   const float* lr_multipliers, int count, int rows, int cols, bool per_column, StepScalar lr,
                   StepScalar lr_times_wd, double shape_scale, cudaStream_t stream) {
  constexpr int kBlock = 256;
  const size_t elements = static_cast<size_t>(rows) * cols;
  const unsigned blocks = elementwise_grid(elements, kBlock) < 1024 ? elementwise_grid(elements, kBlock) : 1024;
  // X read, the parameter read and written, the copy written
  const double n = static_cast<double>(elements) * count, copy_bytes = copies != nullptr ? sizeof(floatX) : 0.0;
  LLMC_LAUNCH_COSTED((KernelCost{n * (sizeof(floatX) + 2.0 * sizeof(P) + copy_bytes), 6.0 * n}),
                     normuon_apply_kernel<P>, dim3(blocks, static_cast<unsigned>(count)), dim3(kBlock), 0, stream, x,
                     steps, ratios, params, copies, lr_multipliers, rows, cols, per_column, lr, lr_times_wd,
                     static_cast<float>(shape_scale));
}

template <typename P>
void normuon_apply(const floatX* x, const float* steps, const float* ratios, P* const* params, floatX* const* copies,
                   const float* lr_multipliers, int count, int rows, int cols, bool per_column, double lr,
                   double weight_decay, double shape_scale, cudaStream_t stream) {
  normuon_apply<P>(x, steps, ratios, params, copies, lr_multipliers, count, rows, cols, per_column,
                   StepScalar::fixed(static_cast<float>(lr)), StepScalar::fixed(static_cast<float>(lr * weight_decay)),
                   shape_scale, stream);
}

// ---- 3'. the banks' apply (the 2026-07-17 record) ------------------------------------------------------------
// The parameter's fp32 master: a bf16 parameter's bits are its upper half and `mantissa` its lower half; an
// fp32 parameter (the fp32 build) is its own master and has no mantissa.
__device__ __forceinline__ float load_master(float param, uint16_t) { return param; }
__device__ __forceinline__ void store_master(float master, float& param, uint16_t&) { param = master; }
#if !defined(LLMC_FP32)
__device__ __forceinline__ float load_master(floatX param, uint16_t mantissa) {
  return __uint_as_float((static_cast<uint32_t>(__bfloat16_as_ushort(param)) << 16) | mantissa);
}
// The record truncates: the parameter keeps the upper 16 bits, not the rounded value.
__device__ __forceinline__ void store_master(float master, floatX& param, uint16_t& mantissa) {
  const uint32_t bits = __float_as_uint(master);
  param = __ushort_as_bfloat16(static_cast<unsigned short>(bits >> 16));
  mantissa = static_cast<uint16_t>(bits & 0xFFFFu);
}
#endif

// X *= bf16(step * ratio) (the scale rounded before it multiplies, X rounded after); then with M the master,
// mask = (X M >= 0), M = M - M mask wd_lr lr_eff - X lr_eff in separately rounded fp32 operations, lr_eff =
// lr_times_shape x the matrix's multiplier (both powers of two in the record, so the product is exact) and
// wd_lr = fp32(lr x weight decay). Grid (blocks, count).
template <typename P>
__global__ void normuon_apply_mantissa_kernel(const floatX* x, const float* steps, const float* ratios,
                                              P* const* params, uint16_t* mantissas, const float* lr_multipliers,
                                              int rows, int cols, bool per_column, StepScalar lr_times_shape_arg,
                                              StepScalar wd_lr_arg) {
  const float lr_times_shape = lr_times_shape_arg.get(), wd_lr = wd_lr_arg.get();
  const int b = blockIdx.y;
  P* param = params[b];
  const float ratio = ratios[b];
  const float lr_eff = __fmul_rn(lr_times_shape, lr_multipliers[b]);
  const int stat_len = per_column ? cols : rows;
  const size_t elements = static_cast<size_t>(rows) * cols;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  uint16_t unused_mantissa = 0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < elements; i += stride) {
    const size_t stat = per_column ? i % cols : i / cols;
    const float scale = round_to<floatX>(__fmul_rn(steps[static_cast<size_t>(b) * stat_len + stat], ratio));
    const float update = round_to<floatX>(__fmul_rn(to_float(x[static_cast<size_t>(b) * elements + i]), scale));
    uint16_t& mantissa = mantissas != nullptr ? mantissas[static_cast<size_t>(b) * elements + i] : unused_mantissa;
    const float master = load_master(param[i], mantissa);
    const float mask = __fmul_rn(update, master) >= 0.0f ? 1.0f : 0.0f;
    const float decay = __fmul_rn(__fmul_rn(__fmul_rn(master, mask), wd_lr), lr_eff);
    store_master(__fsub_rn(__fsub_rn(master, decay), __fmul_rn(update, lr_eff)), param[i], mantissa);
  }
}

// x: [count, rows, cols] (Polar Express output); steps, ratios: normuon_variance's; mantissas [count, rows,
// cols] (null for fp32 parameters); lr: the step's NorMuon rate (0.023 x the schedule).
// lr_times_shape and wd_lr: fp32 roundings of the double lr x shape scale and lr x weight decay.
template <typename P>
void normuon_apply_mantissa(const floatX* x, const float* steps, const float* ratios, P* const* params,
                            uint16_t* mantissas, const float* lr_multipliers, int count, int rows, int cols,
                            bool per_column, StepScalar lr_times_shape, StepScalar wd_lr, cudaStream_t stream) {
  constexpr int kBlock = 256;
  const size_t elements = static_cast<size_t>(rows) * cols;
  const unsigned blocks = elementwise_grid(elements, kBlock) < 1024 ? elementwise_grid(elements, kBlock) : 1024;
  // X read; the parameter and its mantissa read and written.
  const double n = static_cast<double>(elements) * count;
  const double mantissa_bytes = mantissas != nullptr ? 2.0 * sizeof(uint16_t) : 0.0;
  LLMC_LAUNCH_COSTED((KernelCost{n * (sizeof(floatX) + 2.0 * sizeof(P) + mantissa_bytes), 9.0 * n}),
                     normuon_apply_mantissa_kernel<P>, dim3(blocks, static_cast<unsigned>(count)), dim3(kBlock), 0,
                     stream, x, steps, ratios, params, mantissas, lr_multipliers, rows, cols, per_column,
                     lr_times_shape, wd_lr);
}

template <typename P>
void normuon_apply_mantissa(const floatX* x, const float* steps, const float* ratios, P* const* params,
                            uint16_t* mantissas, const float* lr_multipliers, int count, int rows, int cols,
                            bool per_column, double lr, double weight_decay, double shape_scale,
                            cudaStream_t stream) {
  normuon_apply_mantissa<P>(x, steps, ratios, params, mantissas, lr_multipliers, count, rows, cols, per_column,
                            StepScalar::fixed(static_cast<float>(lr * shape_scale)),
                            StepScalar::fixed(static_cast<float>(lr * weight_decay)), stream);
}

}  // namespace llmc
