// The FP8 head of the speedrun model (docs/fp8.md), training forward and backward:
//   z  = (x_s w_s) e4m3(x / x_s) e4m3(W / w_s)^T            fast accumulation, z in Tx (bf16)
//   g8 = e5m2(dz / g_s)
//   dx = (g_s w_s) g8 e4m3(W / w_s)                         no fast accumulation, dx in Tx
//   dW = (x_s g_s) g8^T e4m3(x / x_s)                       no fast accumulation, fp32 sums (out fp32 or bf16)
// with static scales. Every GEMM reads K-major operands, so the casts also write the transposed copies the
// backward needs (fp8_cast_transpose). Validation uses the bf16 head, not this. The #44 model stores W as
// (V, C), the #89 model as (C, V); both models' loss kernels write g8 directly (fp8_head_backward_from_codes
// transposes it); fp8_head_backward casts a floatX dz itself.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/fp8.h"
#include "llmc/kernels/fp8_cast.cuh"
#include "llmc/kernels/fp8_cast_transpose.cuh"
#include "llmc/kernels/fp8_matmul.cuh"
#include "llmc/kernels/mutant.h"

namespace llmc {

// x_s = sqrt(768) / 448, w_s = 2^-9, g_s = 1/448 in the record. x is the output of a weightless RMSNorm, so
// |x_i| <= sqrt(C) and x / x_s never exceeds e4m3's 448: x_s is sqrt(C) / 448 for width C (the record's
// constant at C = 768). W / w_s saturates where |W| > 448 * 2^-9 = 0.875, dz / g_s where |dz| > 128 (e5m2's
// 57344 / 448). Each is computed in double and rounded to float once.
struct Fp8HeadScales {
  float x = 0.0f, weight = 0.0f, grad = 0.0f;
  // The #89 record's (SPEEDRUN89.md section 4): x_s = 100/448, w_s = 1.6/448, g_s = 0.75/448 for its SUM
  // loss (fp8_head_grad_scale(dloss, kModded89GradUnit) for ours).
  static Fp8HeadScales modded89() {
    Fp8HeadScales scales;
    scales.x = static_cast<float>(100.0 / 448.0);
    scales.weight = static_cast<float>(1.6 / 448.0);
    scales.grad = static_cast<float>(0.75 / 448.0);
    return scales;
  }
  static Fp8HeadScales speedrun(int channels) {
    Fp8HeadScales scales;
    scales.x = static_cast<float>(std::sqrt(static_cast<double>(channels)) / 448.0);
    scales.weight = static_cast<float>(std::ldexp(1.0, -9));
    scales.grad = static_cast<float>(1.0 / 448.0);
    return scales;
  }
};

// g_s for a loss whose gradient is scaled by `dloss` (the backward starts from dloss * d(sum of the per-token
// losses)). The soft-capped cross-entropy bounds each logit's gradient by dloss: |softmax - onehot| <= 1 and
// d(30 sigmoid(z / 7.5))/dz <= 30 / 7.5 / 4 = 1. The record's SUM loss (dloss = 1) uses g_s = 1/448, so
// |dz / g_s| <= 448; a mean over N tokens (dloss = 1/N) keeps that bound, and the record's e5m2 codes, with
// g_s = dloss / 448 (exactly the record's codes when dloss is a power of two). Computed in double, rounded
// once; docs/fp8.md.
// `unit` is g_s of the SUM loss: the #44 record's 1/448, the #89 record's 0.75/448 (its gradient bound is the
// soft cap's 23/7.5/4 = 0.77 times the summed weights, so 0.75 leaves e5m2 little headroom, as the record).
inline constexpr double kModded44GradUnit = 1.0 / 448.0;
inline constexpr double kModded89GradUnit = 0.75 / 448.0;
inline float fp8_head_grad_scale(float dloss, double unit = kModded44GradUnit) {
  if (!(dloss > 0.0f) || !std::isfinite(dloss))
    throw std::invalid_argument("fp8_head_grad_scale: the loss scale must be positive and finite (got " +
                                std::to_string(dloss) + ")");
  return static_cast<float>(static_cast<double>(dloss) * unit);
}

// How the model stores the head weight W: (V, C), a row per token (#44), or (C, V), a column per token (#89).
enum class Fp8HeadWeight { kOutIn, kInOut };

// Bytes of device memory a head of these sizes keeps: the six fp8 copies, 256-byte aligned, and the scales.
inline size_t fp8_head_workspace_bytes(int max_tokens, int channels, int vocab) {
  const auto aligned = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const size_t t = static_cast<size_t>(max_tokens), c = static_cast<size_t>(channels), v = static_cast<size_t>(vocab);
  return 2 * aligned(t * c) + 2 * aligned(v * c) + 2 * aligned(t * v) + aligned(3 * sizeof(float));
}

// Whether an FP8 head of these sizes can exist: every FP8 GEMM dimension is a multiple of 16.
inline bool fp8_head_shape_fits(int tokens, int channels, int vocab) {
  return tokens > 0 && channels > 0 && vocab > 0 && tokens % 16 == 0 && channels % 16 == 0 && vocab % 16 == 0;
}

// The device buffers of one FP8 head: e4m3 x and W with their transposes, e5m2 dz with its transpose, the
// three scales (as cuBLASLt's scale pointers read them). Its own allocation, or `memory` of
// fp8_head_workspace_bytes() bytes, 256-byte aligned, that the caller owns (a model's arena). Not copyable.
class Fp8HeadWorkspace {
 public:
  Fp8HeadWorkspace(int max_tokens, int channels, int vocab, Fp8HeadScales scales, void* memory = nullptr,
                   Fp8HeadWeight weight_layout = Fp8HeadWeight::kOutIn)
      : max_tokens_(max_tokens), channels_(channels), vocab_(vocab), scales_(scales), weight_layout_(weight_layout) {
    if (!fp8_head_shape_fits(max_tokens, channels, vocab))
      throw std::invalid_argument(
          "Fp8HeadWorkspace: tokens, channels and vocab must be positive multiples of 16 (got " +
          std::to_string(max_tokens) + ", " + std::to_string(channels) + ", " + std::to_string(vocab) + ")");
    if (memory == nullptr) {
      CUDA_CHECK(cudaMalloc(&memory_, fp8_head_workspace_bytes(max_tokens, channels, vocab)));
      owned_ = memory_;
    } else {
      if (reinterpret_cast<uintptr_t>(memory) % 256 != 0)
        throw std::invalid_argument("Fp8HeadWorkspace: memory must be 256-byte aligned");
      memory_ = memory;
    }
    char* next = static_cast<char*>(memory_);
    const auto take = [&next](size_t bytes) {
      char* region = next;
      next += (bytes + 255) / 256 * 256;
      return region;
    };
    const size_t t = static_cast<size_t>(max_tokens), c = static_cast<size_t>(channels), v = static_cast<size_t>(vocab);
    x8_ = reinterpret_cast<fp8e4m3*>(take(t * c));
    x8t_ = reinterpret_cast<fp8e4m3*>(take(t * c));
    w8_ = reinterpret_cast<fp8e4m3*>(take(v * c));
    w8t_ = reinterpret_cast<fp8e4m3*>(take(v * c));
    g8_ = reinterpret_cast<fp8e5m2*>(take(t * v));
    g8t_ = reinterpret_cast<fp8e5m2*>(take(t * v));
    device_scales_ = reinterpret_cast<float*>(take(3 * sizeof(float)));
    const float host_scales[3] = {scales.x, scales.weight, scales.grad};
    CUDA_CHECK(cudaMemcpy(device_scales_, host_scales, sizeof(host_scales), cudaMemcpyHostToDevice));
  }
  ~Fp8HeadWorkspace() {
    if (owned_ != nullptr) CUDA_REPORT(cudaFree(owned_));
  }
  Fp8HeadWorkspace(const Fp8HeadWorkspace&) = delete;
  Fp8HeadWorkspace& operator=(const Fp8HeadWorkspace&) = delete;

  int max_tokens() const { return max_tokens_; }
  int channels() const { return channels_; }
  int vocab() const { return vocab_; }
  const Fp8HeadScales& scales() const { return scales_; }
  Fp8HeadWeight weight_layout() const { return weight_layout_; }
  // Replaces g_s (e.g. fp8_head_grad_scale(dloss) when the loss scale changes), in stream order: the
  // backwards enqueued before it keep the old scale.
  void set_grad_scale(float grad_scale, cudaStream_t stream) {
    if (grad_scale == scales_.grad) return;
    scales_.grad = grad_scale;
    // From pageable memory: the copy takes the value before returning (the staging is the runtime's).
    CUDA_CHECK(cudaMemcpyAsync(device_scales_ + 2, &scales_.grad, sizeof(float), cudaMemcpyHostToDevice, stream));
  }
  fp8e4m3* x8() const { return x8_; }    // (T, C)
  fp8e4m3* x8t() const { return x8t_; }  // (C, T)
  fp8e4m3* w8() const { return w8_; }    // (V, C)
  fp8e4m3* w8t() const { return w8t_; }  // (C, V)
  fp8e5m2* g8() const { return g8_; }    // (T, V)
  fp8e5m2* g8t() const { return g8t_; }  // (V, T)
  const float* x_scale() const { return device_scales_; }
  const float* weight_scale() const { return device_scales_ + 1; }
  const float* grad_scale() const { return device_scales_ + 2; }

  // The tokens of the last forward that kept the transposed copies (0: none), checked by the backward.
  int tokens_kept_for_backward = 0;

 private:
  int max_tokens_, channels_, vocab_;
  Fp8HeadScales scales_;
  Fp8HeadWeight weight_layout_;
  void* memory_ = nullptr;
  void* owned_ = nullptr;  // memory_ when the workspace allocated it
  fp8e4m3 *x8_ = nullptr, *x8t_ = nullptr, *w8_ = nullptr, *w8t_ = nullptr;
  fp8e5m2 *g8_ = nullptr, *g8t_ = nullptr;
  float* device_scales_ = nullptr;
};

inline void check_fp8_head_tokens(const Fp8HeadWorkspace& workspace, int tokens, const char* what) {
  if (tokens <= 0 || tokens % 16 != 0 || tokens > workspace.max_tokens())
    throw std::invalid_argument(std::string(what) + ": tokens must be a positive multiple of 16 up to " +
                                std::to_string(workspace.max_tokens()) + " (got " + std::to_string(tokens) + ")");
}

// The head's three FP8 GEMMs over the workspace's copies (the benchmark times them one by one).
// logits (T,V) = x8 (T,C) w8 (V,C)^T, e4m3 x e4m3, fast accumulation.
template <class Tx>
Fp8GemmArgs fp8_head_logits_gemm(const Fp8HeadWorkspace& workspace, Tx* logits, int tokens) {
  Fp8GemmArgs z;
  z.d = logits;
  z.d_type = fp8_gemm_output_type<Tx>();
  z.a = workspace.x8();
  z.b = workspace.w8();
  z.m = tokens;
  z.n = workspace.vocab();
  z.k = workspace.channels();
  z.a_scale = workspace.x_scale();
  z.b_scale = workspace.weight_scale();
  z.fast_accumulation = true;
  return z;
}

// dx (T,C) = g8 (T,V) w8t (C,V)^T, e5m2 x e4m3.
template <class Tx>
Fp8GemmArgs fp8_head_input_grad_gemm(const Fp8HeadWorkspace& workspace, Tx* dx, int tokens) {
  Fp8GemmArgs input_grad;
  input_grad.d = dx;
  input_grad.d_type = fp8_gemm_output_type<Tx>();
  input_grad.a = workspace.g8();  // (T, V): K = V contiguous
  input_grad.a_type = CUDA_R_8F_E5M2;
  input_grad.b = workspace.w8t();  // (C, V)
  input_grad.m = tokens;
  input_grad.n = workspace.channels();
  input_grad.k = workspace.vocab();
  input_grad.a_scale = workspace.grad_scale();
  input_grad.b_scale = LLMC_MUTANT("fp8_head.dx_without_weight_scale", workspace.weight_scale(), input_grad.b_scale);
  return input_grad;
}

// dweight (V,C) (+)= g8t (V,T) x8t (C,T)^T, e5m2 x e4m3, fp32 sums rounded once to Tw (fp32, or the model's bf16
// gradient itself: the same bits as an fp32 dweight converted or added into it); for a (C, V) weight the same
// product the other way round, dweight (C,V) (+)= x8t (C,T) g8t (V,T)^T.
template <class Tw>
Fp8GemmArgs fp8_head_weight_grad_gemm(const Fp8HeadWorkspace& workspace, Tw* dweight, int tokens, bool accumulate) {
  Fp8GemmArgs weight_grad;
  weight_grad.d = dweight;
  weight_grad.d_type = fp8_gemm_output_type<Tw>();
  weight_grad.a = workspace.g8t();  // (V, T): K = T contiguous
  weight_grad.a_type = CUDA_R_8F_E5M2;
  weight_grad.b = workspace.x8t();  // (C, T)
  weight_grad.m = workspace.vocab();
  weight_grad.n = workspace.channels();
  weight_grad.k = tokens;
  weight_grad.a_scale = workspace.grad_scale();
  weight_grad.b_scale = workspace.x_scale();
  weight_grad.beta = accumulate ? 1.0f : 0.0f;
  if (workspace.weight_layout() == Fp8HeadWeight::kInOut) {
    std::swap(weight_grad.a, weight_grad.b);
    std::swap(weight_grad.a_type, weight_grad.b_type);
    std::swap(weight_grad.a_scale, weight_grad.b_scale);
    if (LLMC_MUTANT("fp8_head.in_out_weight_grad_unswapped", true, false)) std::swap(weight_grad.m, weight_grad.n);
  }
  return weight_grad;
}

// logits (T,V) = x (T,C) W (V,C)^T (or x W for a (C, V) weight) in FP8. With keep_for_backward the casts also
// write the transposed copies of x and W that the backward reads (one read of x and W either way; a (C, V)
// weight always gets both copies, as the logits GEMM reads its transpose).
template <class Tx>
void fp8_head_forward(MatmulContext& context, Fp8HeadWorkspace& workspace, Tx* logits, const Tx* x, const Tx* weight,
                      int tokens, bool keep_for_backward, cudaStream_t stream) {
  check_fp8_head_tokens(workspace, tokens, "fp8_head_forward");
  const int C = workspace.channels(), V = workspace.vocab();
  const Fp8HeadScales& scales = workspace.scales();
  if (keep_for_backward)
    fp8_cast_transpose(workspace.x8t(), workspace.x8(), x, tokens, C, scales.x, stream);
  else
    fp8_cast(workspace.x8(), x, static_cast<size_t>(tokens) * C, scales.x, stream);
  if (workspace.weight_layout() == Fp8HeadWeight::kInOut)  // w8 (V, C) is the transpose of W (C, V)
    fp8_cast_transpose(workspace.w8(), workspace.w8t(), weight, C, V, scales.weight, stream);
  else if (keep_for_backward)
    fp8_cast_transpose(workspace.w8t(), workspace.w8(), weight, V, C, scales.weight, stream);
  else
    fp8_cast(workspace.w8(), weight, static_cast<size_t>(V) * C, scales.weight, stream);
  workspace.tokens_kept_for_backward = keep_for_backward ? tokens : 0;
  fp8_gemm(context, fp8_head_logits_gemm(workspace, logits, tokens), stream);
}

// The forward of a training step whose backward starts from dloss * d(sum of the per-token losses) (the
// trainer's mean loss: dloss = 1 / tokens): g_s follows dloss, then the forward keeps its copies.
template <class Tx>
void fp8_head_training_forward(MatmulContext& context, Fp8HeadWorkspace& workspace, Tx* logits, const Tx* x,
                               const Tx* weight, int tokens, float dloss, cudaStream_t stream) {
  if (LLMC_MUTANT("fp8_head.fixed_grad_scale", true, false))
    workspace.set_grad_scale(fp8_head_grad_scale(dloss), stream);
  fp8_head_forward(context, workspace, logits, x, weight, tokens, /*keep_for_backward=*/true, stream);
}

namespace detail {
inline void check_fp8_head_backward(const Fp8HeadWorkspace& workspace, int tokens, const char* what) {
  check_fp8_head_tokens(workspace, tokens, what);
  if (workspace.tokens_kept_for_backward != tokens)
    throw std::logic_error(std::string(what) + ": the forward of these " + std::to_string(tokens) +
                           " tokens did not keep its fp8 copies (keep_for_backward)");
}

// The backward's two GEMMs over g8, g8t and the forward's copies.
template <class Tx, class Tw>
void fp8_head_backward_gemms(MatmulContext& context, Fp8HeadWorkspace& workspace, Tx* dx, Tw* dweight, int tokens,
                             bool accumulate, cudaStream_t stream) {
  if (dx != nullptr) fp8_gemm(context, fp8_head_input_grad_gemm(workspace, dx, tokens), stream);
  fp8_gemm(context, fp8_head_weight_grad_gemm(workspace, dweight, tokens, accumulate), stream);
}
}  // namespace detail

// dx (T,C) = dz (T,V) W (V,C) and dweight (V,C) (+)= dz^T x (fp32 sums, rounded once to Tw: fp32 or bf16), from
// the copies the forward kept. accumulate: dweight += (gradient accumulation), else overwritten. dx may be null
// (not needed).
template <class Tx, class Tw>
void fp8_head_backward(MatmulContext& context, Fp8HeadWorkspace& workspace, Tx* dx, Tw* dweight, const Tx* dlogits,
                       int tokens, bool accumulate, cudaStream_t stream) {
  detail::check_fp8_head_backward(workspace, tokens, "fp8_head_backward");
  fp8_cast_transpose(workspace.g8t(), workspace.g8(), dlogits, tokens, workspace.vocab(), workspace.scales().grad,
                     stream);
  detail::fp8_head_backward_gemms(context, workspace, dx, dweight, tokens, accumulate, stream);
}

// The same from e5m2 codes a loss kernel already wrote into workspace.g8() (codes of dz / g_s, g_s =
// workspace.scales().grad): their transpose, then the two GEMMs.
template <class Tx, class Tw>
void fp8_head_backward_from_codes(MatmulContext& context, Fp8HeadWorkspace& workspace, Tx* dx, Tw* dweight,
                                  int tokens, bool accumulate, cudaStream_t stream) {
  detail::check_fp8_head_backward(workspace, tokens, "fp8_head_backward_from_codes");
  if (LLMC_MUTANT("fp8_head.codes_not_transposed", true, false))
    fp8_transpose(workspace.g8t(), workspace.g8(), tokens, workspace.vocab(), stream);
  detail::fp8_head_backward_gemms(context, workspace, dx, dweight, tokens, accumulate, stream);
}

}  // namespace llmc
