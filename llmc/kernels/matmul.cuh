// The one GEMM interface of the trainer. Row-major semantics throughout:
//   D (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C + bias (N)   [optionally then GELU]
// (C = D unless GemmArgs::c names a separate addend)
// batched over `batch` matrices with element strides, on cuBLASLt (bf16 in/out with fp32 compute; fp32
// build: fp32, no TF32), GELU and bias as cuBLASLt epilogues; the emulated build runs the same calls on its
// CPU cuBLASLt (llmc/emu/cublaslt.cpp). On top: matmul_forward / matmul_backward of a linear layer.
//
// Plans (llmc/kernels/gemm_plan_cache.h): the first call with a given key (shape, layouts, epilogue, type,
// batch and strides, alignments) builds the cuBLASLt descriptors and chooses the algorithm; every later
// call only sets its pointers and enqueues. The choice (GemmAlgoSelection): the heuristic's first answer
// (default: the same algorithm in every run, so runs stay bitwise reproducible), or the fastest of the
// heuristic's top candidates -- plus split-K variants when the output has fewer tiles than the GPU has
// SMs (the 768x768 weight gradients with K = B*T) -- timed on the stream at the first call without the
// host waiting: the heuristic's choice runs until the timings are in, read at a later call. The emulated
// cuBLASLt offers one algorithm per shape, so there is nothing to time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/bias_grad.cuh"
#include "llmc/kernels/gemm_args.h"
#include "llmc/kernels/gelu.cuh"
#include "llmc/kernels/gemm_cublaslt.cuh"
#include "llmc/kernels/matmul_context.h"
#include "llmc/cuda/precision.h"

namespace llmc {

// ---- linear layer ----------------------------------------------------------------------------
// out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC; may be null). With pre_gelu non-null, pre_gelu
// gets that value and out gets gelu(pre_gelu) (the fc layer of the MLP).
inline void matmul_forward(MatmulContext& context, floatX* out, floatX* pre_gelu, const floatX* inp,
                           const floatX* weight, const floatX* bias, int N, int C, int OC, cudaStream_t stream) {
  GemmArgs g;
  g.d = out;
  g.a = inp;
  g.b = weight;
  g.trans_b = true;
  g.m = N;
  g.n = OC;
  g.k = C;
  g.bias = bias;
  g.pre_gelu = pre_gelu;
  gemm(context, g, stream);
}

// Floats of device scratch matmul_backward needs (for the bias gradient).
inline size_t matmul_backward_scratch_floats(int N, int OC) { return bias_grad_scratch_floats(N, OC); }

// Backward of matmul_forward:
//   dinp (N,C) = dout (N,OC) @ weight (OC,C)   (overwritten; skipped if dinp is null). If inp_pre_gelu is
//     non-null, inp was gelu(inp_pre_gelu) and dinp is turned into the gradient w.r.t. inp_pre_gelu.
//   dweight (OC,C) (+)= dout^T @ inp;  dbias (OC) (+)= column sums of dout (skipped if null).
// accumulate_param_grads: += (gradient accumulation) or overwrite. scratch: matmul_backward_scratch_floats.
inline void matmul_backward(MatmulContext& context, floatX* dinp, floatX* dweight, floatX* dbias,
                            const floatX* dout, const floatX* inp, const floatX* weight, const floatX* inp_pre_gelu,
                            int N, int C, int OC, bool accumulate_param_grads, float* scratch, size_t scratch_floats,
                            cudaStream_t stream) {
  if (dbias != nullptr) bias_grad(dbias, dout, N, OC, accumulate_param_grads, scratch, scratch_floats, stream);
  GemmArgs weight_grad;
  weight_grad.d = dweight;
  weight_grad.a = dout;
  weight_grad.trans_a = true;  // dout^T (OC,N)
  weight_grad.b = inp;         // (N,C)
  weight_grad.m = OC;
  weight_grad.n = C;
  weight_grad.k = N;
  weight_grad.beta = accumulate_param_grads ? 1.0f : 0.0f;
  gemm(context, weight_grad, stream);
  if (dinp != nullptr) {
    GemmArgs input_grad;
    input_grad.d = dinp;
    input_grad.a = dout;    // (N,OC)
    input_grad.b = weight;  // (OC,C)
    input_grad.m = N;
    input_grad.n = C;
    input_grad.k = OC;
    gemm(context, input_grad, stream);
    if (inp_pre_gelu != nullptr) gelu_backward(dinp, inp_pre_gelu, dinp, static_cast<size_t>(N) * C, stream);
  }
}

}  // namespace llmc
