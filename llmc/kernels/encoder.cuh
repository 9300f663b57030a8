// Token + position embedding: forward out[b,t,:] = wte[token[b,t],:] + wpe[t,:], and a DETERMINISTIC
// backward. The backward groups the positions by token id on the host (the tokens of a batch are on the
// host anyway) so that each (token, column) gradient is one thread summing its positions in increasing
// order: no float atomics, bitwise-identical results from run to run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/cuda_common.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/precision.h"

namespace llmc {

template <typename Tx>
__global__ void encoder_forward_kernel(Tx* out, const int* tokens, const Tx* wte, const Tx* wpe, int B, int T,
                                       int C) {
  const size_t total = static_cast<size_t>(B) * T * C;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const size_t position = i / C;  // b * T + t
    const int c = static_cast<int>(i % C);
    const int t = static_cast<int>(position % T);
    const int token = tokens[position];
    out[i] = from_float<Tx>(to_float(wte[static_cast<size_t>(token) * C + c]) +
                            to_float(wpe[static_cast<size_t>(t) * C + c]));
  }
}

// out (B,T,C) from tokens (B,T) on the device, wte (V,C), wpe (maxT,C). Token ids must be in [0, V).
inline void encoder_forward(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe, int B, int T, int C,
                            cudaStream_t stream) {
  constexpr int kBlock = 256;
  const double btc = static_cast<double>(B) * T * C;
  const KernelCost cost{3 * btc * sizeof(floatX) + 4.0 * B * T, btc};
  LLMC_LAUNCH_COSTED(cost, encoder_forward_kernel<floatX>, dim3(elementwise_grid(static_cast<size_t>(B) * T * C, kBlock)),
              dim3(kBlock), 0, stream, out, tokens, wte, wpe, B, T, C);
}

// Device and host buffers for encoder_backward, sized for up to max_positions = B*T tokens; create one
// per model and reuse it every step. Not copyable.
struct EncoderBackwardWorkspace {
  explicit EncoderBackwardWorkspace(int max_positions_) : max_positions(max_positions_) {
    if (max_positions <= 0) throw std::invalid_argument("EncoderBackwardWorkspace: max_positions must be positive");
    host_table.resize(static_cast<size_t>(4) * max_positions);
    sort_keys.resize(static_cast<size_t>(max_positions));
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_table), host_table.size() * sizeof(int)));
    CUDA_CHECK(cudaEventCreate(&upload_done));
  }
  ~EncoderBackwardWorkspace() {
    if (upload_pending) CUDA_REPORT(cudaEventSynchronize(upload_done));
    CUDA_REPORT(cudaEventDestroy(upload_done));
    CUDA_REPORT(cudaFree(device_table));
  }
  EncoderBackwardWorkspace(const EncoderBackwardWorkspace&) = delete;
  EncoderBackwardWorkspace& operator=(const EncoderBackwardWorkspace&) = delete;

  int max_positions;
  // Layout (host and device): positions sorted by (token, position), then one (token, first, count)
  // triple per distinct token.
  std::vector<int> host_table;
  std::vector<uint64_t> sort_keys;
  int* device_table = nullptr;
  cudaEvent_t upload_done = nullptr;  // the last upload has finished reading host_table
  bool upload_pending = false;
};

// One block row per distinct token, one thread per column: sums dout over the token's positions in
// increasing position order and adds the total into dwte once.
template <typename Tx>
__global__ void encoder_backward_wte_kernel(Tx* dwte, const Tx* dout, const int* sorted_positions,
                                            const int* buckets, int C) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int* bucket = buckets + 3 * static_cast<size_t>(blockIdx.x);
  const int token = bucket[0], first = bucket[1], count = bucket[2];
  float sum = 0.0f;
  for (int i = first; i < first + count; i++) sum += to_float(dout[static_cast<size_t>(sorted_positions[i]) * C + c]);
  Tx* target = dwte + static_cast<size_t>(token) * C + c;
  *target = from_float<Tx>(to_float(*target) + sum);
}

// One thread per (t, c): sums dout over the batch in order b = 0..B-1.
template <typename Tx>
__global__ void encoder_backward_wpe_kernel(Tx* dwpe, const Tx* dout, int B, int T, int C) {
  const size_t total = static_cast<size_t>(T) * C;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    float sum = 0.0f;
    for (int b = 0; b < B; b++) sum += to_float(dout[static_cast<size_t>(b) * total + i]);
    dwpe[i] = from_float<Tx>(to_float(dwpe[i]) + sum);
  }
}

// Accumulates dwte (V,C) += and dwpe (maxT,C) += from dout (B,T,C). tokens_host: the same (B,T) token
// ids as the forward, in host memory (read before the call returns). Stream-ordered; the host table of
// the previous call is reused only after its upload has completed.
inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* tokens_host, int B, int T,
                             int C, EncoderBackwardWorkspace& workspace, cudaStream_t stream) {
  const int positions = B * T;
  if (positions > workspace.max_positions)
    throw std::invalid_argument("encoder_backward: B*T = " + std::to_string(positions) +
                                " exceeds the workspace size " + std::to_string(workspace.max_positions));
  if (workspace.upload_pending) CUDA_CHECK(cudaEventSynchronize(workspace.upload_done));

  // Sort (token, position) pairs; positions of one token end up contiguous and in increasing order.
  for (int i = 0; i < positions; i++) {
    if (tokens_host[i] < 0)
      throw std::invalid_argument("encoder_backward: negative token id " + std::to_string(tokens_host[i]) +
                                  " at position " + std::to_string(i));
    workspace.sort_keys[i] =
        (static_cast<uint64_t>(static_cast<uint32_t>(tokens_host[i])) << 32) | static_cast<uint32_t>(i);
  }
  std::sort(workspace.sort_keys.begin(), workspace.sort_keys.begin() + positions);
  int* sorted_positions = workspace.host_table.data();
  int* buckets = sorted_positions + positions;
  int num_buckets = 0;
  for (int i = 0; i < positions; i++) {
    const int token = static_cast<int>(workspace.sort_keys[i] >> 32);
    sorted_positions[i] = static_cast<int>(workspace.sort_keys[i] & 0xffffffffu);
    if (i == 0 || token != buckets[3 * (num_buckets - 1)]) {
      buckets[3 * num_buckets] = token;
      buckets[3 * num_buckets + 1] = i;
      buckets[3 * num_buckets + 2] = 0;
      num_buckets++;
    }
    buckets[3 * (num_buckets - 1) + 2]++;
  }
  memcpy_async(workspace.device_table, workspace.host_table.data(),
               (static_cast<size_t>(positions) + 3 * static_cast<size_t>(num_buckets)) * sizeof(int),
               cudaMemcpyHostToDevice, stream);
  CUDA_CHECK(cudaEventRecord(workspace.upload_done, stream));
  workspace.upload_pending = true;

  constexpr int kBlock = 128;
  const double x = sizeof(floatX), btc = static_cast<double>(positions) * C;
  // dout rows read once, each distinct token's dwte row read and written; the position table.
  const KernelCost wte_cost{btc * x + 2.0 * num_buckets * C * x + 4.0 * (positions + 3.0 * num_buckets), btc};
  const KernelCost wpe_cost{btc * x + 2.0 * T * C * x, btc};
  if (num_buckets > 0)
    LLMC_LAUNCH_COSTED(wte_cost, encoder_backward_wte_kernel<floatX>,
                dim3(static_cast<unsigned>(num_buckets), static_cast<unsigned>(ceil_div(C, kBlock))), dim3(kBlock), 0,
                stream, dwte, dout, workspace.device_table, workspace.device_table + positions, C);
  LLMC_LAUNCH_COSTED(wpe_cost, encoder_backward_wpe_kernel<floatX>, dim3(elementwise_grid(static_cast<size_t>(T) * C, kBlock)),
              dim3(kBlock), 0, stream, dwpe, dout, B, T, C);
}

}  // namespace llmc
