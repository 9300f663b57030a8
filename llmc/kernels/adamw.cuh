// AdamW update on fp32 master weights and optimizer state, writing the floatX parameters the model
// reads. Bias-corrected moments, decoupled weight decay (given per call: 0 for biases and LayerNorm
// weights), and a gradient scale (e.g. the clipping factor) applied before the moments. Works on any
// contiguous shard [start, start + n): the caller passes pointers to the shard's first element.
#pragma once

#include <cmath>
#include <cstddef>

#include "llmc/cuda_common.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/optim/adamw_settings.h"
#include "llmc/precision.h"

namespace llmc {

template <typename Tx>
__global__ void adamw_kernel(Tx* params, float* master, const Tx* grads, float* m, float* v, size_t n,
                             float learning_rate, float beta1, float beta2, float bias_correction1,
                             float bias_correction2, float eps, float weight_decay, float grad_scale) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float grad = to_float(grads[i]) * grad_scale;
    const float m_new = beta1 * m[i] + (1.0f - beta1) * grad;
    const float v_new = beta2 * v[i] + (1.0f - beta2) * grad * grad;
    const float m_hat = m_new / bias_correction1;
    const float v_hat = v_new / bias_correction2;
    float param = master != nullptr ? master[i] : to_float(params[i]);
    param -= learning_rate * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * param);
    m[i] = m_new;
    v[i] = v_new;
    if (master != nullptr) master[i] = param;
    params[i] = from_float<Tx>(param);
  }
}

// One AdamW step (step is 1-based) on n elements: params (floatX, what the model reads), master (fp32
// master copy, or nullptr to update params in place, e.g. in the fp32 build), grads (floatX), m and v
// (fp32 moments). All pointers point at the first element of the shard. The gradients are multiplied
// by grad_scale first (clipping: max_norm / norm).
inline void adamw_update(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n, int step,
                         float learning_rate, const AdamWSettings& hp, float grad_scale, cudaStream_t stream) {
  // Corrections in double on the host: 1 - beta^step loses digits in fp32 for beta2 near 1.
  const float bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta1), step));
  const float bias_correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta2), step));
  constexpr int kBlock = 256;
  // grads read, params written, master, m, v read and written (fp32); ~12 operations, sqrt counts one.
  const KernelCost cost{static_cast<double>(n) * (2 * sizeof(floatX) + 6 * sizeof(float)), 12.0 * n};
  LLMC_LAUNCH_COSTED(cost, adamw_kernel<floatX>, dim3(elementwise_grid(n, kBlock)), dim3(kBlock), 0, stream, params, master, grads,
              m, v, n, learning_rate, hp.beta1, hp.beta2, bias_correction1, bias_correction2, hp.eps,
              hp.weight_decay, grad_scale);
}

}  // namespace llmc
