// AdamW update on fp32 master weights and optimizer state, writing the floatX parameters the model
// reads. Bias-corrected moments, decoupled weight decay (per segment of the shard: 0 for biases and
// LayerNorm weights, so a whole bucket shard is one launch), and a gradient scale (e.g. the clipping
// factor, also readable from device memory) applied before the moments. Works on any contiguous shard
// [start, start + n): the caller passes pointers to the shard's first element.
#pragma once

#include <cmath>
#include <cstddef>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/kernels/adamw_settings.h"
#include "llmc/cuda/precision.h"

namespace llmc {

// Each thread takes a grid-stride slice of every segment in turn. The gradient is multiplied by
// grad_scale and, when grad_scale_device is not null, by grad_scale_device[0] (the clipping factor
// computed on the device, llmc/kernels/global_norm.cuh).
template <typename Tx>
__global__ void adamw_kernel(Tx* params, float* master, const Tx* grads, float* m, float* v, AdamWSegments segments,
                             float learning_rate, float beta1, float beta2, float bias_correction1,
                             float bias_correction2, float eps, float grad_scale, const float* grad_scale_device) {
  const float scale = grad_scale_device != nullptr ? grad_scale * grad_scale_device[0] : grad_scale;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (int s = 0; s < segments.count; s++) {
    const size_t end = segments.begin[s] + segments.length[s];
    const float weight_decay = segments.weight_decay[LLMC_MUTANT("adamw.first_segment_decay", s, 0)];
    for (size_t i = segments.begin[s] + static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < end;
         i += stride) {
      const float grad = to_float(grads[i]) * scale;
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
}

// One AdamW step (step is 1-based) over the segments of a shard, one launch: params (floatX, what the
// model reads), master (fp32 master copy, or nullptr to update params in place, e.g. in the fp32 build),
// grads (floatX), m and v (fp32 moments), all pointing at the shard's first element; hp.weight_decay is
// ignored (each segment has its own). The gradients are multiplied by grad_scale and by
// grad_scale_device[0] if that is not null (clipping: max_norm / norm).
inline void adamw_update(floatX* params, float* master, const floatX* grads, float* m, float* v,
                         const AdamWSegments& segments, int step, float learning_rate, const AdamWSettings& hp,
                         float grad_scale, const float* grad_scale_device, cudaStream_t stream) {
  // Corrections in double on the host: 1 - beta^step loses digits in fp32 for beta2 near 1.
  const float bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta1), step));
  const float bias_correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(hp.beta2), step));
  constexpr int kBlock = 256;
  const size_t n = segments.elements();
  // grads read, params written, master, m, v read and written (fp32); ~12 operations, sqrt counts one.
  const KernelCost cost{static_cast<double>(n) * (2 * sizeof(floatX) + 6 * sizeof(float)), 12.0 * n};
  LLMC_LAUNCH_COSTED(cost, adamw_kernel<floatX>, dim3(elementwise_grid(n, kBlock)), dim3(kBlock), 0, stream, params,
                     master, grads, m, v, segments, learning_rate, hp.beta1, hp.beta2, bias_correction1,
                     bias_correction2, hp.eps, grad_scale, grad_scale_device);
}

// The one-segment form: n elements decaying by hp.weight_decay, gradients multiplied by grad_scale.
inline void adamw_update(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n, int step,
                         float learning_rate, const AdamWSettings& hp, float grad_scale, cudaStream_t stream) {
  AdamWSegments segments;
  segments.add(0, n, hp.weight_decay);
  adamw_update(params, master, grads, m, v, segments, step, learning_rate, hp, grad_scale, nullptr, stream);
}

}  // namespace llmc
