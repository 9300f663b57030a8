// The one GEMM interface of the trainer. Row-major semantics throughout:
//   D (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C + bias (N)   [optionally then GELU]
// (C = D unless GemmArgs::c names a separate addend)
// batched over `batch` matrices with element strides. GPU build: cuBLASLt (bf16 in/out with fp32
// compute; fp32 build: fp32, no TF32), GELU and bias as cuBLASLt epilogues. Emulated build
// (LLMC_EMULATION): a blocked CPU GEMM with fp32 accumulation, enqueued with cudaLaunchHostFunc so it
// runs in stream order like a kernel. On top: matmul_forward / matmul_backward of a linear layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "llmc/cuda_common.h"
#include "llmc/kernels/bias_grad.cuh"
#include "llmc/kernels/gemm_args.h"
#include "llmc/kernels/gelu.cuh"
#include "llmc/precision.h"

#if defined(LLMC_EMULATION)
#include "llmc/emu/cpu_gemm.h"
#else
#include "llmc/cublas_check.h"
#endif

namespace llmc {

// What the GEMM needs that outlives one call: the cuBLASLt handle and its workspace (GPU build), the
// CPU thread count (emulated build). Create one per device/stream set; not copyable.
class MatmulContext {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = static_cast<size_t>(32) << 20;  // cuBLAS' recommendation for Hopper

  explicit MatmulContext(size_t workspace_bytes = kDefaultWorkspaceBytes, int cpu_threads = 0) {
#if defined(LLMC_EMULATION)
    (void)workspace_bytes;
    const unsigned hardware = std::thread::hardware_concurrency();
    cpu_threads_ = cpu_threads > 0 ? cpu_threads : (hardware > 0 ? static_cast<int>(hardware) : 1);
#else
    (void)cpu_threads;
    CUBLAS_CHECK(cublasLtCreate(&handle_));
    workspace_bytes_ = workspace_bytes;
    CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
#endif
  }
  ~MatmulContext() {
#if !defined(LLMC_EMULATION)
    CUDA_REPORT(cudaFree(workspace_));
    CUBLAS_REPORT(cublasLtDestroy(handle_));
#endif
  }
  MatmulContext(const MatmulContext&) = delete;
  MatmulContext& operator=(const MatmulContext&) = delete;

#if defined(LLMC_EMULATION)
  int cpu_threads() const { return cpu_threads_; }
#else
  cublasLtHandle_t handle() const { return handle_; }
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
#endif

 private:
#if defined(LLMC_EMULATION)
  int cpu_threads_ = 1;
#else
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
#endif
};

#if defined(LLMC_EMULATION)
struct CpuGemmJob {
  GemmArgs args;
  int threads;
};

// cudaLaunchHostFunc callback: runs the GEMM when the stream reaches it, then frees the job.
inline void run_cpu_gemm_job(void* job_pointer) {
  CpuGemmJob* job = static_cast<CpuGemmJob*>(job_pointer);
  cpu_gemm(job->args, job->threads);
  delete job;
}

inline void gemm(MatmulContext& context, const GemmArgs& g, cudaStream_t stream) {
  validate_gemm(g);
  notify_gemm_setup();  // stands for the GPU path's per-call set-up (descriptors and heuristic query)
  observed_launch(LaunchKind::kGemm, stream, gemm_cost(g), [&] { return gemm_name(g); }, [&] {
    std::unique_ptr<CpuGemmJob> job(new CpuGemmJob{g, context.cpu_threads()});
    CUDA_CHECK(cudaLaunchHostFunc(stream, run_cpu_gemm_job, job.get()));  // on failure job is freed here
    job.release();  // enqueued: run_cpu_gemm_job owns it now
  });
}

#else
// ---- GPU build: cuBLASLt ---------------------------------------------------------------------
// cuBLASLt is column-major. A row-major (r,c) matrix is the column-major (c,r) matrix with the same
// bytes, so the row-major D = op(A) @ op(B) is computed as the column-major D^T = op(B)^T @ op(A)^T:
// cuBLASLt's first operand is our B, its second our A, and its (rows, cols) of D are our (N, M).

// Largest power of two (up to 256) dividing the address: tells the heuristic which kernels may load
// these pointers with wide vector instructions.
inline uint32_t pointer_alignment(const void* pointer) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

inline uint32_t batch_alignment(const void* pointer, long long stride_elements) {
  uint32_t alignment = pointer_alignment(pointer);
  if (stride_elements != 0) {
    const uint32_t stride_alignment = pointer_alignment(reinterpret_cast<const void*>(
        static_cast<uintptr_t>(stride_elements * static_cast<long long>(sizeof(floatX)))));
    if (stride_alignment < alignment) alignment = stride_alignment;
  }
  return alignment;
}

// Owns the cuBLASLt descriptors of one call and destroys them on every exit path.
struct CublasLtDescriptors {
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, output = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  CublasLtDescriptors() = default;
  CublasLtDescriptors(const CublasLtDescriptors&) = delete;
  CublasLtDescriptors& operator=(const CublasLtDescriptors&) = delete;
  ~CublasLtDescriptors() {
    if (preference) CUBLAS_REPORT(cublasLtMatmulPreferenceDestroy(preference));
    if (output) CUBLAS_REPORT(cublasLtMatrixLayoutDestroy(output));
    if (second) CUBLAS_REPORT(cublasLtMatrixLayoutDestroy(second));
    if (first) CUBLAS_REPORT(cublasLtMatrixLayoutDestroy(first));
    if (operation) CUBLAS_REPORT(cublasLtMatmulDescDestroy(operation));
  }
};

inline void set_batch(cublasLtMatrixLayout_t layout, int batch, long long stride) {
  if (batch == 1) return;
  const int32_t batch_count = batch;
  const int64_t batch_stride = stride;
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch_count,
                                                sizeof(batch_count)));
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride,
                                                sizeof(batch_stride)));
}

// Returns false (and launches nothing) when cuBLASLt has no algorithm for the requested epilogue, so
// that the caller can fall back to a simpler one.
inline bool try_cublaslt_gemm(MatmulContext& context, const GemmArgs& g, bool fuse_gelu, cudaStream_t stream) {
#if defined(LLMC_FP32)
  const cudaDataType_t data_type = CUDA_R_32F;
#else
  const cudaDataType_t data_type = CUDA_R_16BF;
#endif
  CublasLtDescriptors desc;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.operation, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t first_op = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t second_op = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc.operation, CUBLASLT_MATMUL_DESC_TRANSA, &first_op, sizeof(first_op)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc.operation, CUBLASLT_MATMUL_DESC_TRANSB, &second_op, sizeof(second_op)));

  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (fuse_gelu) {
    epilogue = g.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    void* aux = g.pre_gelu;
    const int64_t aux_ld = g.n;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.operation, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                sizeof(aux)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.operation, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                sizeof(aux_ld)));
  } else if (g.bias != nullptr) {
    epilogue = CUBLASLT_EPILOGUE_BIAS;
  }
  if (g.bias != nullptr) {
    const void* bias = g.bias;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc.operation, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));

  // Column-major shapes: first = op(B)^T source, second = op(A)^T source, output (N, M).
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.first, data_type, g.trans_b ? g.k : g.n, g.trans_b ? g.n : g.k,
                                          g.trans_b ? g.k : g.n));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.second, data_type, g.trans_a ? g.m : g.k, g.trans_a ? g.k : g.m,
                                          g.trans_a ? g.m : g.k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.output, data_type, g.n, g.m, g.n));
  set_batch(desc.first, g.batch, g.stride_b);
  set_batch(desc.second, g.batch, g.stride_a);
  set_batch(desc.output, g.batch, g.stride_d);

  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&desc.preference));
  const size_t workspace_bytes = context.workspace_bytes();
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(desc.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &workspace_bytes, sizeof(workspace_bytes)));
  const uint32_t align_first = batch_alignment(g.b, g.stride_b);
  const uint32_t align_second = batch_alignment(g.a, g.stride_a);
  const floatX* addend = g.c != nullptr ? g.c : g.d;  // C: same layout as D
  const uint32_t align_output = batch_alignment(g.d, g.stride_d);
  const uint32_t align_addend = batch_alignment(addend, g.stride_d);
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                    &align_first, sizeof(align_first)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                    &align_second, sizeof(align_second)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                    &align_addend, sizeof(align_addend)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                    &align_output, sizeof(align_output)));

  cublasLtMatmulHeuristicResult_t heuristic = {};
  int found = 0;
  const cublasStatus_t heuristic_status =
      cublasLtMatmulAlgoGetHeuristic(context.handle(), desc.operation, desc.first, desc.second, desc.output,
                                     desc.output, desc.preference, 1, &heuristic, &found);
  if (heuristic_status == CUBLAS_STATUS_NOT_SUPPORTED || (heuristic_status == CUBLAS_STATUS_SUCCESS && found == 0))
    return false;
  CUBLAS_CHECK(heuristic_status);

  notify_gemm_setup();
  observed_launch(LaunchKind::kGemm, stream, gemm_cost(g), [&] { return gemm_name(g); }, [&] {
    CUBLAS_CHECK(cublasLtMatmul(context.handle(), desc.operation, &g.alpha, g.b, desc.first, g.a, desc.second,
                                &g.beta, addend, desc.output, g.d, desc.output, &heuristic.algo, context.workspace(),
                                context.workspace_bytes(), stream));
  });
  return true;
}

inline void gemm(MatmulContext& context, const GemmArgs& g, cudaStream_t stream) {
  validate_gemm(g);
  // cuBLASLt wants the GELU aux leading dimension divisible by 8.
  const bool fuse_gelu = g.pre_gelu != nullptr && g.n % 8 == 0;
  if (g.pre_gelu != nullptr && fuse_gelu && try_cublaslt_gemm(context, g, /*fuse_gelu=*/true, stream)) return;
  GemmArgs unfused = g;
  if (g.pre_gelu != nullptr) unfused.d = g.pre_gelu;  // GEMM (+bias) into pre_gelu, then GELU into D
  if (!try_cublaslt_gemm(context, unfused, /*fuse_gelu=*/false, stream))
    throw std::runtime_error("gemm: cuBLASLt found no algorithm for m=" + std::to_string(g.m) +
                             " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
                             " batch=" + std::to_string(g.batch));
  if (g.pre_gelu != nullptr) gelu_forward(g.d, g.pre_gelu, static_cast<size_t>(g.m) * g.n, stream);
}
#endif

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
