// Sliding-window causal attention over packed documents, head size 128, bf16 in / fp32 accumulation
// (bf16 build only; the speedrun model's attention). Launchers for the plan, the forward and the
// backward; docs/attention.md describes the kernels, the interface and the measurements.
//
// Layouts: q, k, v are [T, heads, 128] slices whose token rows are qkv_row_stride elements apart:
// heads * 128 for separate buffers, 3 * heads * 128 for views into a fused [T, 3, heads, 128] qkv
// buffer (q = qkv, k = qkv + heads * 128, v = qkv + 2 * heads * 128). dq, dk, dv likewise with
// dqkv_row_stride. out and dout are contiguous [T, heads, 128]; lse is [heads, T] fp32 (natural log).
// cu_seqlens: num_docs + 1 int32 on the device, 0 = cu_seqlens[0] <= ... <= cu_seqlens[num_docs] = T,
// where trailing entries may repeat T (a fixed-length padded array: num_docs is its length minus one,
// not the number of real documents). Query q attends key k iff both lie in one document and
// q - window <= k <= q. All pointers 16-byte aligned, strides multiples of 8 elements.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/window_attention_backward.cuh"
#include "llmc/kernels/window_attention_forward.cuh"
#include "llmc/kernels/window_attention_geometry.cuh"

namespace llmc {

// Whether this build's fast kernel serves heads of head_dim: bf16 and 128 (the records'); anything else takes
// the simple kernel (simple_window_attention.cuh).
inline bool window_attention_fits(int head_dim) {
#if defined(LLMC_FP32)
  (void)head_dim;
  return false;
#else
  return head_dim == window_attention::kHeadDim;
#endif
}

}  // namespace llmc

#if !defined(LLMC_FP32)

namespace llmc {
namespace window_attention {

// One attention call's shape, shared by plan, forward and backward.
struct Problem {
  int T = 0;
  int heads = 0;
  const int* cu_seqlens = nullptr;  // device
  int num_docs = 0;                 // cu_seqlens has num_docs + 1 entries
  int window = 0;                   // W >= 0; W >= T means no window
  float scale = 0.0f;               // softmax scale (the speedrun's attn_scale, not 1/sqrt(128))
};

// Floats of the value mix's per-block partials (ValueMixBackward::partials) for T tokens and `heads` heads.
inline size_t value_mix_partials_floats(int T, int heads) {
  return 2 * static_cast<size_t>(backward_tiles(T)) * static_cast<size_t>(heads);
}

// Ints of device memory the plan of a T-token sequence takes.
inline size_t plan_ints(int T) {
  return static_cast<size_t>(forward_tiles(T)) + 2 * static_cast<size_t>(backward_tiles(T));
}

namespace detail {

inline void require(bool condition, const char* caller, const std::string& what) {
  if (!condition) throw std::invalid_argument(std::string(caller) + ": " + what);
}

inline void check_problem(const char* caller, const Problem& problem) {
  require(problem.T >= 1 && problem.T <= kMaxTokens, caller,
          "T = " + std::to_string(problem.T) + " is outside 1.." + std::to_string(kMaxTokens));
  require(problem.heads >= 1, caller, "heads = " + std::to_string(problem.heads) + " must be positive");
  require(problem.num_docs >= 1 && problem.cu_seqlens != nullptr, caller,
          "needs cu_seqlens with num_docs >= 1 (got " + std::to_string(problem.num_docs) + ")");
  require(problem.window >= 0, caller, "window = " + std::to_string(problem.window) + " must be >= 0");
  require(std::isfinite(problem.scale) && problem.scale > 0.0f, caller,
          "softmax scale " + std::to_string(problem.scale) + " must be positive and finite");
}

inline void check_slices(const char* caller, const void* const* pointers, int count, int64_t row_stride, int heads) {
  for (int i = 0; i < count; i++)
    require(pointers[i] != nullptr && reinterpret_cast<uintptr_t>(pointers[i]) % 16 == 0, caller,
            "pointer " + std::to_string(i) + " is null or not 16-byte aligned");
  require(row_stride % 8 == 0 && row_stride >= static_cast<int64_t>(heads) * kHeadDim, caller,
          "row stride " + std::to_string(row_stride) +
              " must be a multiple of 8 and at least heads * 128 = " + std::to_string(heads * kHeadDim));
}

// `tensors` [T, heads, 128] tensors read or written once, the lse (and delta); flops_per_dim x 128 per (query,
// key, head) over the window's pairs (W + 1 keys per query) before the document cuts, which the launcher does
// not see.
inline KernelCost cost(const Problem& p, int tensors, double flops_per_dim) {
  const double head_rows = static_cast<double>(p.T) * p.heads;
  return KernelCost{tensors * head_rows * kHeadDim * sizeof(bf16) + 8.0 * head_rows,
                    causal_window_pairs(p.T, p.window + 1) * p.heads * flops_per_dim * kHeadDim};
}

// A gate's pointers: both or neither, the backward's logit gradients too; 16-byte alignment is not needed (the
// kernels read the 12 columns one element at a time).
inline void check_gate(const char* caller, const OutputGate& gate, bool backward) {
  if (gate.xn == nullptr && gate.w == nullptr) return;
  require(gate.xn != nullptr && gate.w != nullptr && (!backward || gate.logit_grads != nullptr), caller,
          backward ? "the gate needs xn, w and logit_grads" : "the gate needs xn and w");
  require(gate.xn_stride >= kGateWidth, caller,
          "gate xn stride " + std::to_string(gate.xn_stride) + " must hold the 12 gate columns");
}

// The gate's reads: xn's 12 columns per token (L2 serves the other heads' blocks) and the weights.
inline double gate_bytes(const Problem& p, const OutputGate& gate) {
  return gate.xn == nullptr ? 0.0 : (static_cast<double>(p.T) + p.heads) * kGateWidth * sizeof(bf16);
}

// The backward's optional work in the stores: what each needs.
inline void check_store_work(const char* caller, const Problem& problem, const NormRopeBackward& norm_rope,
                             const OutputGate& gate, const ValueMixBackward& value_mix,
                             const PairNormRopeBackward& pair_rope) {
  require(norm_rope.rstd == nullptr || (norm_rope.cos_table != nullptr && norm_rope.sin_table != nullptr), caller,
          "the QK-norm and RoPE backward needs both tables beside rstd");
  const bool pair = pair_rope.rstd_q != nullptr;
  require(!pair || norm_rope.rstd == nullptr, caller, "one QK-norm and RoPE backward at a time");
  require(pair || pair_rope.rstd_k == nullptr, caller, "the pair RoPE backward of k needs q's");
  require(!pair || (pair_rope.cos_table != nullptr && pair_rope.sin_table != nullptr && pair_rope.dq_raw != nullptr &&
                    (pair_rope.rstd_k == nullptr || pair_rope.dk_raw != nullptr)),
          caller, "the pair RoPE backward needs both tables, dq_raw, and dk_raw with rstd_k");
  const int64_t model_heads = pair_rope.paired_rows ? 2 * problem.heads : problem.heads;
  require(!pair || (pair_rope.raw_row_stride >= model_heads * kHeadDim && pair_rope.raw_row_stride % 2 == 0 &&
                    (!pair_rope.paired_rows || problem.T % 2 == 0)),
          caller, "the pair RoPE backward's rows must hold every head of a token (an even stride), and its paired "
                  "view two rows per token");
  check_gate(caller, gate, true);
  require(value_mix.scalars == nullptr ||
              (value_mix.v_raw != nullptr && value_mix.partials != nullptr && value_mix.dscalars != nullptr &&
               (value_mix.ve == nullptr) == (value_mix.dve == nullptr) &&
               value_mix.v_raw_stride >= static_cast<int64_t>(problem.heads) * kHeadDim),
          caller,
          "the value mix needs v_raw (rows of at least heads * 128), partials, dscalars, and dve exactly with ve");
}

// delta (and with a gate its values and the logit gradients: xn's 12 columns read, 8 bytes a row written).
inline void launch_delta(float* delta, float* gate_values, const bf16* dout, const bf16* out, const Problem& problem,
                         const OutputGate& gate, cudaStream_t stream) {
  constexpr int kDeltaThreads = 256;  // 16 rows per block
  const int T = problem.T, heads = problem.heads;
  const double values = static_cast<double>(T) * heads * kHeadDim;
  const double gate_writes = gate.xn != nullptr ? 8.0 * T * heads : 0.0;
  LLMC_LAUNCH_COSTED(
      (KernelCost{2.0 * values * sizeof(bf16) + 4.0 * T * heads + gate_writes + gate_bytes(problem, gate),
                  2.0 * values}),
      delta_kernel<>,
      dim3(static_cast<unsigned>(ceil_div(static_cast<int64_t>(T) * heads * 16, static_cast<int64_t>(kDeltaThreads)))),
      dim3(kDeltaThreads), 0, stream, delta, dout, out, T, heads, gate, gate_values);
}

// The dK/dV kernel, then the dQ kernel (its tile order dq_order), gated or not: named by their templates in the
// launch records (scripts/projection_modded89.py files them as attention by those names).
template <bool kGated>
void launch_gradient_kernels(BackwardParams params, const int* dq_order, dim3 grid, const KernelCost& dkdv_cost,
                             const KernelCost& dq_cost, cudaStream_t stream) {
  CUDA_CHECK(cudaFuncSetAttribute(dkdv_kernel<kGated>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(kBackwardSharedBytes)));
  CUDA_CHECK(cudaFuncSetAttribute(dq_kernel<kGated>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(kBackwardSharedBytes)));
  LLMC_LAUNCH_COSTED(dkdv_cost, dkdv_kernel<kGated>, grid, dim3(kThreads), kBackwardSharedBytes, stream, params);
  params.order = dq_order;
  LLMC_LAUNCH_COSTED(dq_cost, dq_kernel<kGated>, grid, dim3(kThreads), kBackwardSharedBytes, stream, params);
}

inline Documents documents(const Problem& problem) {
  return Documents{problem.cu_seqlens, problem.num_docs, problem.T, std::min(problem.window, problem.T)};
}

}  // namespace detail

// Writes the tile orders of `problem` (plan_ints(T) ints). They depend only on cu_seqlens, T and
// the window: one plan serves every layer with that window, forward and backward.
inline void plan(int* plan, const Problem& problem, cudaStream_t stream) {
  detail::check_problem("window_attention::plan", problem);
  detail::require(plan != nullptr, "window_attention::plan", "plan is null");
  constexpr int kPlanThreads = 1024;
  const size_t shared_bytes = plan_ints(problem.T) * sizeof(uint16_t);
  const KernelCost cost{4.0 * (problem.num_docs + 1) + 4.0 * plan_ints(problem.T), 0.0};
  LLMC_LAUNCH_COSTED(cost, plan_kernel<>, dim3(1), dim3(kPlanThreads), shared_bytes, stream, plan,
                     detail::documents(problem));
}

// out [T, heads, 128] and lse [heads, T] from q, k, v; `plan` from plan() for this problem. With gate.xn set, out is
// the gated output (lse stays the attention's).
inline void forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, int64_t qkv_row_stride,
                    const int* plan, const Problem& problem, cudaStream_t stream, const OutputGate& gate = {}) {
  const char* caller = "window_attention::forward";
  detail::check_problem(caller, problem);
  const void* slices[] = {q, k, v, out};
  detail::check_slices(caller, slices, 4, qkv_row_stride, problem.heads);
  detail::require(lse != nullptr && plan != nullptr, caller, "lse or plan is null");
  detail::check_gate(caller, gate, false);
  const ForwardParams params{out,  lse, q, k, v, qkv_row_stride, plan, detail::documents(problem), problem.heads,
                             problem.scale * kLog2e, gate};
  CUDA_CHECK(cudaFuncSetAttribute(forward_kernel<>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(kForwardSharedBytes)));
  const KernelCost cost = detail::cost(problem, 4, 4.0);
  LLMC_LAUNCH_COSTED((KernelCost{cost.bytes + detail::gate_bytes(problem, gate), cost.flops}), forward_kernel<>,
                     dim3(static_cast<unsigned>(forward_tiles(problem.T) * problem.heads)), dim3(kThreads),
                     kForwardSharedBytes, stream, params);
}

// dq, dk, dv (overwritten) from dout and the forward's out and lse. delta_scratch: heads * T floats, twice that with
// a gate. With norm_rope.rstd set, q and k are the QK-norm and RoPE forward's output and dq, dk the gradients of its
// input. With gate.xn set, out and dout are the gated output and its gradient, and gate.logit_grads receives the
// gate logits' gradients. With value_mix.scalars set, v is the value mix's output and dv the gradient of v_raw. With
// pair_rope.rstd_q set, q (and k with rstd_k) are qk_norm_pair_rope_forward's output and the gradients of its input
// go to pair_rope.dq_raw (dk_raw) instead of dq (dk). accumulate_dv: dv += the attention's dV (dv holds another
// reader's share of v's gradient, e.g. XSA's), rounded once; not with a value mix.
inline void backward(bf16* dq, bf16* dk, bf16* dv, int64_t dqkv_row_stride, float* delta_scratch, const bf16* dout,
                     const bf16* out, const float* lse, const bf16* q, const bf16* k, const bf16* v,
                     int64_t qkv_row_stride, const int* plan, const Problem& problem, cudaStream_t stream,
                     const NormRopeBackward& norm_rope = {}, const OutputGate& gate = {},
                     const ValueMixBackward& value_mix = {}, const PairNormRopeBackward& pair_rope = {},
                     bool accumulate_dv = false) {
  const char* caller = "window_attention::backward";
  detail::check_problem(caller, problem);
  const void* inputs[] = {q, k, v, dout, out};
  detail::check_slices(caller, inputs, 5, qkv_row_stride, problem.heads);
  const void* outputs[] = {dq, dk, dv};
  detail::check_slices(caller, outputs, 3, dqkv_row_stride, problem.heads);
  detail::require(lse != nullptr && delta_scratch != nullptr && plan != nullptr, caller,
                  "lse, delta_scratch or plan is null");
  detail::check_store_work(caller, problem, norm_rope, gate, value_mix, pair_rope);
  detail::require(!(accumulate_dv && value_mix.scalars != nullptr), caller,
                  "accumulate_dv with a value mix (its dV store writes v_raw's gradient)");
  const bool gated = gate.xn != nullptr;
  const int T = problem.T, heads = problem.heads;
  // The epilogue's reads, once per kernel: each head's rstd column and the two tables (L2 serves the other heads).
  const double norm_rope_bytes =
      norm_rope.rstd == nullptr ? 0.0 : 4.0 * T * heads + 2.0 * T * (kHeadDim / 2) * sizeof(bf16);
  const double pair_rope_bytes =
      pair_rope.rstd_q == nullptr ? 0.0 : 4.0 * T * heads + 2.0 * T * (kHeadDim / 4) * sizeof(bf16);
  const double values = static_cast<double>(T) * heads * kHeadDim;
  float* gate_values = gated ? delta_scratch + static_cast<size_t>(T) * heads : nullptr;
  detail::launch_delta(delta_scratch, gate_values, dout, out, problem, gate, stream);
  BackwardParams params{dq, dk, dv, dqkv_row_stride, dout, lse, delta_scratch, gate_values, q, k, v, qkv_row_stride,
                        plan + forward_tiles(T) + backward_tiles(T), detail::documents(problem), heads,
                        problem.scale, problem.scale * kLog2e, norm_rope, value_mix, pair_rope, accumulate_dv};
  const dim3 grid(static_cast<unsigned>(backward_tiles(T) * heads));
  const KernelCost dkdv_base = detail::cost(problem, 6, 8.0), dq_base = detail::cost(problem, 5, 6.0);
  const double norm_rope_flops = norm_rope.rstd == nullptr ? 0.0 : 14.0 * T * heads * kHeadDim;
  const double pair_rope_flops = pair_rope.rstd_q == nullptr ? 0.0 : 14.0 * T * heads * kHeadDim;
  const bool pair_k = pair_rope.rstd_k != nullptr;
  const double gate_reads = gated ? 4.0 * T * heads : 0.0;
  // The value mix: v_raw read (and ve read, dve read and written), 4 operations per element.
  const double mix_values = value_mix.scalars == nullptr ? 0.0 : values * (value_mix.ve != nullptr ? 4.0 : 1.0);
  const double mix_flops = value_mix.scalars == nullptr ? 0.0 : 4.0 * values;
  const double old_dv_bytes = accumulate_dv ? values * sizeof(bf16) : 0.0;
  const KernelCost dkdv_cost{
      dkdv_base.bytes + norm_rope_bytes + (pair_k ? pair_rope_bytes : 0.0) + gate_reads + mix_values * sizeof(bf16) +
          old_dv_bytes,
      dkdv_base.flops + norm_rope_flops + (pair_k ? pair_rope_flops : 0.0) + mix_flops};
  const KernelCost dq_cost{dq_base.bytes + norm_rope_bytes + pair_rope_bytes + gate_reads,
                           dq_base.flops + norm_rope_flops + pair_rope_flops};
  const int* dq_order = plan + forward_tiles(T);
  if (gated)
    detail::launch_gradient_kernels<true>(params, dq_order, grid, dkdv_cost, dq_cost, stream);
  else
    detail::launch_gradient_kernels<false>(params, dq_order, grid, dkdv_cost, dq_cost, stream);
  if (value_mix.scalars != nullptr) {
    const int blocks = backward_tiles(T) * heads;
    LLMC_LAUNCH_COSTED((KernelCost{8.0 * blocks, 2.0 * blocks}), value_mix_scalars_kernel<>, dim3(1),
                       dim3(kWarpSize), 0, stream, value_mix, blocks);
  }
}

}  // namespace window_attention
}  // namespace llmc

#endif  // !LLMC_FP32
