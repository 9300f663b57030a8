// Tests of the cuBLASLt calls the GEMM wrappers make, straight against the library, run by both targets: on
// a GPU the real cuBLASLt, in the emulated build its CPU stand-in (llmc/emu/cublaslt.cpp). Column-major
// semantics with leading dimensions larger than the rows, both transposes and a strided batch, the bias and
// GELU-aux epilogues: small integers, so that every product and sum is exact in fp32 and the comparison
// with a double reference is bitwise. Then what the emulation refuses (an attribute it does not model, a
// host pointer) and the stream-ordered allocation the wrapper's timing uses.
#include <gtest/gtest.h>

#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <stdexcept>
#include <vector>

#include "llmc/cuda/cublas_check.h"
#include "llmc/cuda/cuda_common.h"
#include "test/support/device_buffer.h"
#include "test/support/gpu_test.h"
#include "test/support/worst_error.h"

namespace {

using llmc::test::DeviceBuffer;

// Element (r, c) of column-major batch matrix `b` with `ld` rows per column and `stride` elements per matrix.
size_t at(int r, int c, int ld, int b = 0, long long stride = 0) {
  return static_cast<size_t>(b * stride + static_cast<long long>(c) * ld + r);
}

// Owns the descriptors of one fp32 call.
struct Call {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  Call() {
    CUBLAS_CHECK(cublasLtCreate(&handle));
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  }
  ~Call() {
    for (cublasLtMatrixLayout_t layout : {a, b, d})
      if (layout) CUBLAS_REPORT(cublasLtMatrixLayoutDestroy(layout));
    CUBLAS_REPORT(cublasLtMatmulDescDestroy(op));
    CUBLAS_REPORT(cublasLtDestroy(handle));
  }
  template <class T>
  void set(cublasLtMatmulDescAttributes_t attribute, T value) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, attribute, &value, sizeof value));
  }
  static cublasLtMatrixLayout_t layout(int rows, int cols, int ld, int batch, long long stride) {
    cublasLtMatrixLayout_t layout = nullptr;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, rows, cols, ld));
    if (batch > 1) {
      const int32_t count = batch;
      const int64_t offset = stride;
      CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
      CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &offset,
                                                    sizeof offset));
    }
    return layout;
  }
  // D (m x n) = A (m x k) B (k x n), one matrix each, leading dimensions their row counts.
  void set_plain_layouts(int m, int n, int k) {
    a = layout(m, k, m, 1, 0);
    b = layout(k, n, k, 1, 0);
    d = layout(m, n, m, 1, 0);
  }
  // The heuristic's first algorithm (a test failure if there is none).
  cublasLtMatmulAlgo_t algorithm() {
    cublasLtMatmulPreference_t preference = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    cublasLtMatmulHeuristicResult_t result = {};
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, op, a, b, d, d, preference, 1, &result, &found));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(preference));
    EXPECT_EQ(found, 1);
    return result.algo;
  }
};

std::vector<float> small_integers(size_t n, int seed) {
  std::vector<float> values(n);
  for (size_t i = 0; i < n; i++) values[i] = static_cast<float>(static_cast<int>((i * 7 + seed * 13) % 9) - 4);
  return values;
}

// D = alpha op(A) op(B) + beta D, column-major, with ld > rows, both transposes and two batch matrices.
TEST(CublasLt, ColumnMajorSemanticsWithTransposesStridesAndBatches) {
  LLMC_REQUIRE_GPU();
  const int m = 5, n = 6, k = 7, batch = 2;
  for (const bool trans_a : {false, true}) {
    for (const bool trans_b : {false, true}) {
      SCOPED_TRACE(std::string(trans_a ? "T" : "N") + (trans_b ? "T" : "N"));
      const int a_rows = trans_a ? k : m, a_cols = trans_a ? m : k, b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
      const int lda = a_rows + 3, ldb = b_rows + 2, ldd = m + 1;
      const long long stride_a = static_cast<long long>(lda) * a_cols + 5, stride_b = static_cast<long long>(ldb) * b_cols,
                      stride_d = static_cast<long long>(ldd) * n + 4;
      const std::vector<float> a = small_integers(static_cast<size_t>(stride_a * batch), 1),
                               b = small_integers(static_cast<size_t>(stride_b * batch), 2),
                               d0 = small_integers(static_cast<size_t>(stride_d * batch), 3);
      DeviceBuffer<float> d_a(a), d_b(b), d_d(d0);
      Call call;
      call.set(CUBLASLT_MATMUL_DESC_TRANSA, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
      call.set(CUBLASLT_MATMUL_DESC_TRANSB, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
      call.a = Call::layout(a_rows, a_cols, lda, batch, stride_a);
      call.b = Call::layout(b_rows, b_cols, ldb, batch, stride_b);
      call.d = Call::layout(m, n, ldd, batch, stride_d);
      const float alpha = 2.0f, beta = -1.0f;
      const cublasLtMatmulAlgo_t algo = call.algorithm();
      CUBLAS_CHECK(cublasLtMatmul(call.handle, call.op, &alpha, d_a.get(), call.a, d_b.get(), call.b, &beta, d_d.get(),
                                  call.d, d_d.get(), call.d, &algo, nullptr, 0, nullptr));
      CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> d = d_d.download_raw();
      for (int p = 0; p < batch; p++)
        for (int i = 0; i < m; i++)
          for (int j = 0; j < n; j++) {
            double sum = 0.0;
            for (int kk = 0; kk < k; kk++)
              sum += a[trans_a ? at(kk, i, lda, p, stride_a) : at(i, kk, lda, p, stride_a)] *
                     b[trans_b ? at(j, kk, ldb, p, stride_b) : at(kk, j, ldb, p, stride_b)];
            ASSERT_EQ(d[at(i, j, ldd, p, stride_d)], alpha * sum + beta * d0[at(i, j, ldd, p, stride_d)])
                << "batch " << p << " (" << i << ", " << j << ")";
          }
      // Between the columns and the matrices, D is untouched.
      EXPECT_EQ(d[at(m, 0, ldd)], d0[at(m, 0, ldd)]);
      EXPECT_EQ(d[static_cast<size_t>(ldd) * n + 1], d0[static_cast<size_t>(ldd) * n + 1]);
    }
  }
}

// A captured matmul is a graph node: each replay computes it again (D += A B twice after two launches), nothing
// at capture time.
TEST(CublasLt, CapturedMatmulRunsAtEveryReplay) {
  LLMC_REQUIRE_GPU();
  const int m = 4, n = 3, k = 5;
  const std::vector<float> a = small_integers(static_cast<size_t>(m) * k, 4), b = small_integers(static_cast<size_t>(k) * n, 5),
                           d0 = small_integers(static_cast<size_t>(m) * n, 6);
  DeviceBuffer<float> d_a(a), d_b(b), d_d(d0);
  Call call;
  call.set_plain_layouts(m, n, k);
  const float alpha = 1.0f, beta = 1.0f;
  const cublasLtMatmulAlgo_t algo = call.algorithm();
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  CUBLAS_CHECK(cublasLtMatmul(call.handle, call.op, &alpha, d_a.get(), call.a, d_b.get(), call.b, &beta, d_d.get(),
                              call.d, d_d.get(), call.d, &algo, nullptr, 0, stream));
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_EQ(d_d.download_raw(), d0);
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> d = d_d.download_raw();
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double sum = 0.0;
      for (int kk = 0; kk < k; kk++) sum += a[at(i, kk, m)] * b[at(kk, j, k)];
      EXPECT_EQ(d[at(i, j, m)], d0[at(i, j, m)] + 2.0 * sum) << "(" << i << ", " << j << ")";
    }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

// The bias is one value per row of D (column-major); GELU_AUX keeps the pre-activation with its own ld.
TEST(CublasLt, BiasAndGeluAuxEpilogues) {
  LLMC_REQUIRE_GPU();
  const int m = 8, n = 3, k = 4, aux_ld = 16;
  const std::vector<float> a = small_integers(m * k, 4), b = small_integers(k * n, 5), bias = small_integers(m, 6);
  DeviceBuffer<float> d_a(a), d_b(b), d_bias(bias), d_d(static_cast<size_t>(m) * n), d_aux(static_cast<size_t>(aux_ld) * n);
  Call call;
  call.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  call.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(d_bias.get()));
  call.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(d_aux.get()));
  call.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<int64_t>(aux_ld));
  call.set_plain_layouts(m, n, k);
  const float alpha = 1.0f, beta = 0.0f;
  const cublasLtMatmulAlgo_t algo = call.algorithm();
  CUBLAS_CHECK(cublasLtMatmul(call.handle, call.op, &alpha, d_a.get(), call.a, d_b.get(), call.b, &beta, d_d.get(),
                              call.d, d_d.get(), call.d, &algo, nullptr, 0, nullptr));
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> d = d_d.download_raw(), aux = d_aux.download_raw();
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double x = bias[i];
      for (int kk = 0; kk < k; kk++) x += a[at(i, kk, m)] * b[at(kk, j, k)];
      ASSERT_EQ(aux[at(i, j, aux_ld)], x) << i << ", " << j;
      const double gelu = 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
      EXPECT_NEAR(d[at(i, j, m)], gelu, 1e-5 * (1.0 + std::fabs(gelu))) << i << ", " << j;
    }
}

// The fp32 accumulation over K: for every K its error stays within the bound of a blocked sum (each block of
// 16 products in order, then the blocks: 16 + K/16 additions, each off by at most half an ulp), which a
// serial sum over K exceeds; in the emulation it is also below what a serial fp32 sum of the same products
// makes (the model of a tiled accumulator, llmc/emu/cpu_gemm.h; at K = 65,536 2.3e-6 against 4.5e-6). Random positive fp32 values, so
// the exact sum is far from zero and the error is relative to it.
TEST(CublasLt, AccumulationErrorGrowsAsATiledSumNotASerialOne) {
  LLMC_REQUIRE_GPU();
  const int m = 4, n = 8;
  std::mt19937 rng(2808);
  std::uniform_real_distribution<float> uniform(0.5f, 1.0f);
  for (const int k : {1024, 16384, 65536}) {
    SCOPED_TRACE("K = " + std::to_string(k));
    std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(k) * n);
    for (float& value : a) value = uniform(rng);
    for (float& value : b) value = uniform(rng);
    DeviceBuffer<float> d_a(a), d_b(b), d_d(static_cast<size_t>(m) * n);
    Call call;
    call.set_plain_layouts(m, n, k);
    const float alpha = 1.0f, beta = 0.0f;
    const cublasLtMatmulAlgo_t algo = call.algorithm();
    CUBLAS_CHECK(cublasLtMatmul(call.handle, call.op, &alpha, d_a.get(), call.a, d_b.get(), call.b, &beta, d_d.get(),
                                call.d, d_d.get(), call.d, &algo, nullptr, 0, nullptr));
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> d = d_d.download_raw();
    double worst = 0.0, worst_serial = 0.0;
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++) {
        double exact = 0.0;
        float serial = 0.0f;
        for (int kk = 0; kk < k; kk++) {
          const float product = a[at(i, kk, m)] * b[at(kk, j, k)];
          exact += static_cast<double>(a[at(i, kk, m)]) * b[at(kk, j, k)];
          serial += product;
        }
        worst = llmc::worse_error(worst, std::fabs(d[at(i, j, m)] - exact) / exact);
        worst_serial = std::max(worst_serial, std::fabs(serial - exact) / exact);
      }
    const double unit = std::ldexp(1.0, -24);
    EXPECT_LE(worst, (16 + k / 16 + 1) * unit) << "serial fp32 sum: " << worst_serial;
    if (LLMC_IS_EMULATION) {
      EXPECT_LT(worst, worst_serial) << "blocked " << worst;
    }
    std::printf("K=%d: relative error %.3g (a serial fp32 sum of the same products: %.3g)\n", k, worst, worst_serial);
  }
}

#if defined(LLMC_EMULATION)
// The emulation refuses what it does not model instead of ignoring it, and stops where a GPU would fault.
TEST(CublasLt, EmulationRefusesUnmodelledAttributesAndHostMemory) {
  Call call;
  const int32_t sm_count = 4;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sm_count, sizeof sm_count),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSA, &sm_count, 1),
            CUBLAS_STATUS_INVALID_VALUE);  // the wrong size
  call.a = Call::layout(4, 4, 4, 1, 0);
  call.b = Call::layout(4, 4, 4, 1, 0);
  call.d = Call::layout(4, 4, 4, 1, 0);
  const cublasLtMatmulAlgo_t algo = call.algorithm();
  std::vector<float> host(16, 1.0f);
  DeviceBuffer<float> d_b(host), d_d(host);
  const float alpha = 1.0f, beta = 0.0f;
  try {
    (void)cublasLtMatmul(call.handle, call.op, &alpha, host.data(), call.a, d_b.get(), call.b, &beta, d_d.get(),
                         call.d, d_d.get(), call.d, &algo, nullptr, 0, nullptr);
    ADD_FAILURE() << "a host operand was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("operand A is not (entirely) device memory"), std::string::npos)
        << error.what();
  }
  // A GELU aux whose leading dimension is not a multiple of 8: no algorithm (the wrapper then fuses nothing).
  call.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_AUX);
  call.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<int64_t>(4));
  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  cublasLtMatmulHeuristicResult_t result = {};
  int found = 1;
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(call.handle, call.op, call.a, call.b, call.d, call.d, preference, 1, &result,
                                           &found),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(found, 0);
  CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(preference));
}
#endif

// Stream-ordered allocation: a buffer allocated, written, read and freed in stream order holds what was
// written when it is read, and the stream's later work runs after the free.
TEST(CublasLt, StreamOrderedAllocationKeepsTheBufferUntilTheFree) {
  LLMC_REQUIRE_GPU();
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::vector<float> values = {1.0f, 2.0f, 3.0f, 4.0f};
  DeviceBuffer<float> source(values), target(values.size());
  void* scratch = nullptr;
  CUDA_CHECK(cudaMallocAsync(&scratch, values.size() * sizeof(float), stream));
  CUDA_CHECK(cudaMemcpyAsync(scratch, source.get(), values.size() * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(target.get(), scratch, values.size() * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  CUDA_CHECK(cudaFreeAsync(scratch, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaStreamDestroy(stream));
  EXPECT_EQ(target.download_raw(), values);
}

}  // namespace
