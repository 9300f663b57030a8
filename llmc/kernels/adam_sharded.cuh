// The speedrun's sharded Adam on one row shard [row_begin, row_end) of a [rows, cols] tensor: bias-corrected
// moments, the parameter updated in place in its own type (#44: bf16 tables and head have no fp32 master,
// their m and v are bf16 too, the fp32 scalars keep fp32 m and v, no weight decay; the 2026-07-17 record: fp32
// m and v for every tensor, cautious weight decay). The gradient is the shard's averaged gradient (the
// reduce-scatter's output).
#pragma once

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/step_scalar.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/kernels/adam_sharded_settings.h"
#include "llmc/cuda/precision.h"

namespace llmc {

// m = b1 m + (1-b1) g and v = b2 v + (1-b2) g^2 in fp32 (1-b computed in double, as Python does), stored
// in S; p -= step_size * m / (sqrt(v) + eps)
// with the stored (rounded) m and v, p stored in P. The gradient's type G is P's, or floatX for an fp32
// parameter whose gradient the bucket carries in floatX (the scalars in the bf16 build).
// With cautious decay (the 2026-07-17 record; decay 0 leaves #44's arithmetic bit for bit): where the update
// and the parameter agree in sign (strictly), decay p is added to the update.
template <typename P, typename S, typename G = P>
__global__ void adam_sharded_kernel(P* params, const G* grads, S* m, S* v, size_t n, float beta1, float one_minus_beta1,
                                    float beta2, float one_minus_beta2, float eps, StepScalar step_size_arg,
                                    StepScalar decay_arg) {
  const float step_size = step_size_arg.get(), decay = decay_arg.get();
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = to_float(grads[i]);
    const S m_new = from_float<S>(beta1 * to_float(m[i]) + one_minus_beta1 * g);
    const S v_new = from_float<S>(beta2 * to_float(v[i]) + one_minus_beta2 * g * g);
    m[i] = m_new;
    v[i] = v_new;
    float update = to_float(m_new) / (sqrtf(to_float(v_new)) + eps) * step_size;
    const float p = to_float(params[i]);
    if (update * p > 0.0f) update += decay * p;
    params[i] = from_float<P>(p - update);
  }
}

// One Adam update of rows [shard.row_begin, shard.row_end) of `param` [rows, cols]: grad_shard, m_shard and v_shard
// hold just those rows. step_size and decay: adam_step_values's (the update's count and lr in them).
template <typename P, typename S, typename G = P>
void adam_sharded_update(P* param, const G* grad_shard, S* m_shard, S* v_shard, int cols, AdamRowShard shard,
                         const AdamShardedSettings& settings, StepScalar step_size, StepScalar decay,
                         cudaStream_t stream) {
  const size_t n = static_cast<size_t>(shard.rows()) * cols;
  if (n == 0) return;
  constexpr int kBlock = 256;
  // g read; m, v and the parameter read and written.
  const KernelCost cost{static_cast<double>(n) * (sizeof(G) + 4.0 * sizeof(S) + 2.0 * sizeof(P)), 14.0 * n};
  LLMC_LAUNCH_COSTED(cost, (adam_sharded_kernel<P, S, G>), dim3(elementwise_grid(n, kBlock)), dim3(kBlock), 0, stream,
                     param + static_cast<size_t>(shard.row_begin) * cols, grad_shard, m_shard, v_shard, n,
                     static_cast<float>(settings.beta1), static_cast<float>(1.0 - settings.beta1),
                     static_cast<float>(settings.beta2), static_cast<float>(1.0 - settings.beta2),
                     static_cast<float>(settings.eps), step_size, decay);
}

// The t-th update (t >= 1) at learning rate lr.
template <typename P, typename S, typename G = P>
void adam_sharded_update(P* param, const G* grad_shard, S* m_shard, S* v_shard, int cols, AdamRowShard shard,
                         const AdamShardedSettings& settings, double lr, long long t, cudaStream_t stream) {
  const AdamStepValues values = adam_step_values(settings, lr, t);
  adam_sharded_update<P, S, G>(param, grad_shard, m_shard, v_shard, cols, shard, settings,
                               StepScalar::fixed(values.step_size), StepScalar::fixed(values.decay), stream);
}

}  // namespace llmc
