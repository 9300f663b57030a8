// Benchmark of the CUDA-on-CPU emulation, to budget test sizes: the cost of a __syncthreads barrier
// and of a warp shuffle (per thread), of a kernel launch, and the time of a representative kernel
// (LayerNorm forward on 256 x 768 floats, one warp per row and one block per row).
// Built as bench_emu_emu; run through scripts/bench_emu.sh. Prints a Markdown table.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "llmc/cuda/cuda_common.h"

namespace {

__global__ void barrier_loop_kernel(int repetitions, int* sink) {
  int local = 0;
  for (int r = 0; r < repetitions; ++r) {
    local += r;
    __syncthreads();
  }
  if (local == -1) *sink = local;  // keeps the loop
}

__global__ void shuffle_loop_kernel(int repetitions, float* sink) {
  float value = threadIdx.x;
  for (int r = 0; r < repetitions; ++r) value += __shfl_xor_sync(0xffffffffu, value, 1);
  if (value == -1.0f) *sink = value;
}

__global__ void empty_kernel() {}

// LayerNorm forward, one warp per row: out = (x - mean) / sqrt(var + eps) * weight + bias.
__global__ void layernorm_warp_per_row_kernel(float* out, const float* in, const float* weight,
                                              const float* bias, int rows, int channels) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const float* x = in + static_cast<size_t>(row) * channels;
  float sum = 0.0f;
  for (int c = lane; c < channels; c += 32) sum += x[c];
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const float mean = sum / channels;
  float squares = 0.0f;
  for (int c = lane; c < channels; c += 32) squares += (x[c] - mean) * (x[c] - mean);
  for (int offset = 16; offset > 0; offset /= 2) squares += __shfl_xor_sync(0xffffffffu, squares, offset);
  const float inverse_std = rsqrtf(squares / channels + 1e-5f);
  float* y = out + static_cast<size_t>(row) * channels;
  for (int c = lane; c < channels; c += 32) y[c] = (x[c] - mean) * inverse_std * weight[c] + bias[c];
}

// LayerNorm forward, one block per row: block reduction through shared memory.
__global__ void layernorm_block_per_row_kernel(float* out, const float* in, const float* weight,
                                               const float* bias, int channels) {
  __shared__ float warp_partials[32];
  __shared__ float row_statistic;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const float* x = in + static_cast<size_t>(blockIdx.x) * channels;
  float sum = 0.0f;
  for (int c = threadIdx.x; c < channels; c += blockDim.x) sum += x[c];
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) warp_partials[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += warp_partials[w];
    row_statistic = total / channels;
  }
  __syncthreads();
  const float mean = row_statistic;
  float squares = 0.0f;
  for (int c = threadIdx.x; c < channels; c += blockDim.x) squares += (x[c] - mean) * (x[c] - mean);
  for (int offset = 16; offset > 0; offset /= 2) squares += __shfl_xor_sync(0xffffffffu, squares, offset);
  __syncthreads();  // everyone has read row_statistic before it is overwritten
  if (lane == 0) warp_partials[warp] = squares;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += warp_partials[w];
    row_statistic = rsqrtf(total / channels + 1e-5f);
  }
  __syncthreads();
  const float inverse_std = row_statistic;
  float* y = out + static_cast<size_t>(blockIdx.x) * channels;
  for (int c = threadIdx.x; c < channels; c += blockDim.x) y[c] = (x[c] - mean) * inverse_std * weight[c] + bias[c];
}

// Best of `trials` wall-clock seconds of `work` followed by a device synchronisation.
double best_seconds(int trials, const std::function<void()>& work) {
  double best = 1e30;
  for (int t = 0; t < trials; ++t) {
    const auto start = std::chrono::steady_clock::now();
    work();
    CUDA_CHECK(cudaDeviceSynchronize());
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace

int main() {
  int* int_sink = nullptr;
  float* float_sink = nullptr;
  CUDA_CHECK(cudaMalloc(&int_sink, sizeof(int)));
  CUDA_CHECK(cudaMalloc(&float_sink, sizeof(float)));
  std::printf("| what | configuration | cost |\n|---|---|---|\n");

  for (int threads : {256, 1024}) {
    const int repetitions = 200;
    const double seconds = best_seconds(3, [&] {
      LLMC_LAUNCH(barrier_loop_kernel, 1, threads, 0, nullptr, repetitions, int_sink);
    });
    std::printf("| __syncthreads | block of %d, %d barriers | %.1f ns per thread per barrier |\n", threads, repetitions,
                seconds * 1e9 / (static_cast<double>(threads) * repetitions));
  }
  {
    const int threads = 1024, repetitions = 200;
    const double seconds = best_seconds(3, [&] {
      LLMC_LAUNCH(shuffle_loop_kernel, 1, threads, 0, nullptr, repetitions, float_sink);
    });
    std::printf("| __shfl_xor_sync | block of %d, %d shuffles | %.1f ns per thread per shuffle |\n", threads,
                repetitions, seconds * 1e9 / (static_cast<double>(threads) * repetitions));
  }
  {
    const int launches = 2000;
    const double seconds = best_seconds(3, [&] {
      for (int i = 0; i < launches; ++i) LLMC_LAUNCH(empty_kernel, 1, 1, 0, nullptr);
    });
    std::printf("| kernel launch | empty kernel, 1 x 1 thread, %d launches | %.2f us per launch |\n",
                launches, seconds * 1e6 / launches);
  }
  {
    const int blocks = 256, threads = 256;
    const double seconds = best_seconds(3, [&] { LLMC_LAUNCH(empty_kernel, blocks, threads, 0, nullptr); });
    std::printf("| thread start | empty kernel, %d x %d threads | %.1f ns per thread |\n", blocks, threads,
                seconds * 1e9 / (static_cast<double>(blocks) * threads));
  }

  const int rows = 256, channels = 768;
  std::vector<float> host_in(static_cast<size_t>(rows) * channels), host_weight(channels), host_bias(channels);
  for (size_t i = 0; i < host_in.size(); ++i) host_in[i] = std::sin(0.001f * static_cast<float>(i));
  for (int c = 0; c < channels; ++c) {
    host_weight[c] = 1.0f + 0.01f * c;
    host_bias[c] = 0.001f * c;
  }
  float *in, *out, *weight, *bias;
  CUDA_CHECK(cudaMalloc(&in, host_in.size() * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&out, host_in.size() * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&weight, channels * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&bias, channels * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(in, host_in.data(), host_in.size() * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(weight, host_weight.data(), channels * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(bias, host_bias.data(), channels * sizeof(float), cudaMemcpyHostToDevice));
  {
    const int threads = 256, rows_per_block = threads / 32;
    const double seconds = best_seconds(3, [&] {
      LLMC_LAUNCH(layernorm_warp_per_row_kernel, rows / rows_per_block, threads, 0, nullptr, out, in,
                  weight, bias, rows, channels);
    });
    std::printf("| LayerNorm forward | %d x %d floats, one warp per row (32 blocks of 256) | %.2f ms |\n",
                rows, channels, seconds * 1e3);
  }
  {
    const int threads = 256;
    const double seconds = best_seconds(3, [&] {
      LLMC_LAUNCH(layernorm_block_per_row_kernel, rows, threads, 0, nullptr, out, in, weight, bias, channels);
    });
    std::printf("| LayerNorm forward | %d x %d floats, one block of %d per row | %.2f ms |\n", rows, channels,
                threads, seconds * 1e3);
  }
  for (void* p : {static_cast<void*>(in), static_cast<void*>(out), static_cast<void*>(weight),
                  static_cast<void*>(bias), static_cast<void*>(int_sink), static_cast<void*>(float_sink)}) {
    CUDA_CHECK(cudaFree(p));
  }
  return 0;
}
