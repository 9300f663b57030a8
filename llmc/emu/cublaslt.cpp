// The cuBLASLt API the GEMM wrappers call (llmc/kernels/gemm_cublaslt.cuh, llmc/kernels/fp8_matmul.cuh),
// implemented on the CPU for the emulated build, so that the wrappers' one code path -- descriptors,
// layouts, epilogues, FP8 scales, the heuristic query -- runs in CI as it runs on a GPU. A matmul runs as a
// stream-ordered host function (llmc/emu/cpu_gemm.h for bf16 and fp32, llmc/emu/cpu_fp8_gemm.h for FP8).
// As strict as the GPU: what Hopper's cuBLASLt refuses is refused with its status (an unknown attribute is
// NOT_SUPPORTED here, not ignored), and an operand that is not device memory, where a GPU would fault later,
// stops the call with std::invalid_argument naming the operand.
#include <cublasLt.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "llmc/emu/cpu_fp8_gemm.h"
#include "llmc/emu/cpu_gemm.h"
#include "llmc/emu/emulated_device.h"

namespace {

using llmc::emu::CpuFp8Gemm;
using llmc::emu::CpuGemm;

constexpr uint64_t kAlgoTag = 0x454d55434c41474fULL;  // marks the algorithms this emulation hands out

struct Handle {};

struct MatmulDesc {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
  const void* a_scale = nullptr;
  const void* b_scale = nullptr;
  int8_t fast_accumulation = 0;
};

struct Layout {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
};

struct Preference {};

MatmulDesc& desc_of(cublasLtMatmulDesc_t desc) { return *reinterpret_cast<MatmulDesc*>(desc); }
const Layout& layout_of(cublasLtMatrixLayout_t layout) { return *reinterpret_cast<const Layout*>(layout); }

template <class T>
cublasStatus_t set_field(T& field, const void* buffer, size_t bytes) {
  if (buffer == nullptr || bytes != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buffer, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

bool is_fp8(cudaDataType_t type) { return type == CUDA_R_8F_E4M3 || type == CUDA_R_8F_E5M2; }
size_t element_bytes(cudaDataType_t type) { return type == CUDA_R_32F ? 4 : type == CUDA_R_16BF ? 2 : 1; }
bool uses_bias(cublasLtEpilogue_t e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
bool uses_aux(cublasLtEpilogue_t e) { return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }

// The shape of a call: op(A) (m,k), op(B) (k,n), C and D (m,n), column-major.
struct Shape {
  uint64_t m = 0, n = 0, k = 0;
};

// What Hopper's cuBLASLt accepts of the operation and layouts (the pointers are checked at the call).
cublasStatus_t check_problem(const MatmulDesc& op, const Layout& a, const Layout& b, const Layout& c, const Layout& d,
                             Shape* shape) {
  if (op.compute != CUBLAS_COMPUTE_32F || op.scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  const uint64_t m = op.transa == CUBLAS_OP_N ? a.rows : a.cols, k = op.transa == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t k2 = op.transb == CUBLAS_OP_N ? b.rows : b.cols, n = op.transb == CUBLAS_OP_N ? b.cols : b.rows;
  if (m == 0 || n == 0 || k == 0 || k != k2 || d.rows != m || d.cols != n || c.rows != m || c.cols != n)
    return CUBLAS_STATUS_INVALID_VALUE;
  for (const Layout* layout : {&a, &b, &c, &d})
    if (layout->ld < static_cast<int64_t>(layout->rows) || layout->batch != a.batch) return CUBLAS_STATUS_INVALID_VALUE;
  if (c.type != d.type || (d.type != CUDA_R_16BF && d.type != CUDA_R_32F)) return CUBLAS_STATUS_NOT_SUPPORTED;
  *shape = Shape{m, n, k};
  if (is_fp8(a.type) || is_fp8(b.type)) {  // Hopper's FP8 kernels: TN, both fp8 (not both e5m2), multiples of 16
    if (!is_fp8(a.type) || !is_fp8(b.type) || (a.type == CUDA_R_8F_E5M2 && b.type == CUDA_R_8F_E5M2) ||
        op.transa != CUBLAS_OP_T || op.transb != CUBLAS_OP_N || m % 16 != 0 || n % 16 != 0 || k % 16 != 0 ||
        op.epilogue != CUBLASLT_EPILOGUE_DEFAULT || a.batch != 1)
      return CUBLAS_STATUS_NOT_SUPPORTED;
    // The CPU model takes dense operands only (what the FP8 head passes).
    if (a.ld != static_cast<int64_t>(k) || b.ld != static_cast<int64_t>(k) || d.ld != static_cast<int64_t>(m) ||
        c.ld != d.ld)
      return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (a.type != d.type || b.type != d.type || op.a_scale != nullptr || op.b_scale != nullptr)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  switch (op.epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_BIAS: return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:  // the aux's leading dimension a multiple of 8, one matrix
      return op.aux_ld >= static_cast<int64_t>(m) && op.aux_ld % 8 == 0 && a.batch == 1 ? CUBLAS_STATUS_SUCCESS
                                                                                        : CUBLAS_STATUS_NOT_SUPPORTED;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

// Bytes a column-major matrix of `layout` spans from its pointer.
size_t span_bytes(const Layout& layout) {
  const int64_t elements = (layout.batch - 1) * layout.stride + (static_cast<int64_t>(layout.cols) - 1) * layout.ld +
                           static_cast<int64_t>(layout.rows);
  return static_cast<size_t>(elements) * element_bytes(layout.type);
}

// A GPU reading host memory, or past an allocation, faults: the emulation stops the call instead.
void require_device(const void* pointer, size_t bytes, const std::string& what) {
  llmc::emu::MemoryKind kind;
  const cudaError_t status = llmc::emu::EmulatedDevice::instance().classify(pointer, bytes, &kind);
  if (status != cudaSuccess || kind != llmc::emu::MemoryKind::kDevice)
    throw std::invalid_argument("cublasLtMatmul: " + what +
                                " is not (entirely) device memory (an illegal address on a GPU)");
}

struct MatmulJob {
  bool fp8 = false;
  CpuGemm gemm;
  CpuFp8Gemm fp8_gemm;
  int threads = 1;
};

void run_matmul_job(const MatmulJob& job) {
  if (job.fp8)
    llmc::emu::cpu_fp8_gemm(job.fp8_gemm, job.threads);
  else
    llmc::emu::cpu_gemm(job.gemm, job.threads);
}

// Column-major D = op(A) op(B) is row-major D^T = op(B)^T op(A)^T: the CPU GEMM's first operand is cuBLASLt's
// B (transposed when TRANSB is T), its second cuBLASLt's A (transposed when TRANSA is T), and its (M, N) are
// D's (cols, rows).
CpuGemm row_major_gemm(const MatmulDesc& op, const Shape& shape, float alpha, const void* a, const Layout& al,
                       const void* b, const Layout& bl, float beta, const void* c, const Layout& cl, void* d,
                       const Layout& dl) {
  CpuGemm g;
  g.element = dl.type == CUDA_R_32F ? llmc::emu::GemmElement::kF32 : llmc::emu::GemmElement::kBF16;
  g.m = static_cast<int>(shape.n);
  g.n = static_cast<int>(shape.m);
  g.k = static_cast<int>(shape.k);
  g.a = b;
  g.trans_a = op.transb == CUBLAS_OP_T;
  g.lda = bl.ld;
  g.stride_a = bl.stride;
  g.b = a;
  g.trans_b = op.transa == CUBLAS_OP_T;
  g.ldb = al.ld;
  g.stride_b = al.stride;
  g.c = c;
  g.ldc = cl.ld;
  g.stride_c = cl.stride;
  g.d = d;
  g.ldd = dl.ld;
  g.stride_d = dl.stride;
  g.alpha = alpha;
  g.beta = beta;
  g.batch = dl.batch;
  if (uses_bias(op.epilogue)) g.bias = op.bias;
  if (uses_aux(op.epilogue)) {
    g.gelu = true;
    g.pre_gelu = op.aux;
    g.ld_pre_gelu = op.aux_ld;
  }
  return g;
}

// The FP8 call (TN): row-major D (M = D's cols, N = D's rows) = A' B'^T with A' cuBLASLt's B and B' its A,
// each K-major; the scales swap with them.
CpuFp8Gemm row_major_fp8_gemm(const MatmulDesc& op, const Shape& shape, float alpha, const void* a, const Layout& al,
                              const void* b, const Layout& bl, float beta, void* d, const Layout& dl) {
  CpuFp8Gemm g;
  g.d = d;
  g.d_type = dl.type;
  g.a = b;
  g.a_type = bl.type;
  g.b = a;
  g.b_type = al.type;
  g.m = static_cast<int>(shape.n);
  g.n = static_cast<int>(shape.m);
  g.k = static_cast<int>(shape.k);
  g.a_scale = static_cast<const float*>(op.b_scale);
  g.b_scale = static_cast<const float*>(op.a_scale);
  g.alpha = alpha;
  g.beta = beta;
  g.fast_accumulation = op.fast_accumulation != 0;
  return g;
}

void check_pointers(const MatmulDesc& op, const Shape& shape, const void* a, const Layout& al, const void* b,
                    const Layout& bl, const void* c, const Layout& cl, const void* d, const Layout& dl) {
  require_device(a, span_bytes(al), "operand A");
  require_device(b, span_bytes(bl), "operand B");
  require_device(c, span_bytes(cl), "operand C");
  require_device(d, span_bytes(dl), "operand D");
  if (uses_bias(op.epilogue)) require_device(op.bias, shape.m * element_bytes(dl.type), "the bias");
  if (uses_aux(op.epilogue))
    require_device(op.aux, ((shape.n - 1) * op.aux_ld + shape.m) * element_bytes(dl.type), "the GELU aux");
  if (op.a_scale != nullptr) require_device(op.a_scale, sizeof(float), "the A scale");
  if (op.b_scale != nullptr) require_device(op.b_scale, sizeof(float), "the B scale");
}

}  // namespace

// ---- status texts --------------------------------------------------------------------------------------

const char* CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_INVALID_VALUE: return "an unsupported value or parameter was passed to the function";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "an error (emulated cuBLASLt)";
  }
}

// ---- handle, descriptors, layouts, preferences ---------------------------------------------------------

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = reinterpret_cast<cublasLtHandle_t>(new Handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) {
  delete reinterpret_cast<Handle*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  MatmulDesc* created = new MatmulDesc;
  created->compute = compute;
  created->scale = scale;
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(created);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete reinterpret_cast<MatmulDesc*>(desc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attribute,
                                                           const void* buffer, size_t bytes) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  MatmulDesc& op = desc_of(desc);
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return set_field(op.transa, buffer, bytes);
    case CUBLASLT_MATMUL_DESC_TRANSB: return set_field(op.transb, buffer, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set_field(op.epilogue, buffer, bytes);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set_field(op.bias, buffer, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set_field(op.aux, buffer, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set_field(op.aux_ld, buffer, bytes);
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: return set_field(op.a_scale, buffer, bytes);
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: return set_field(op.b_scale, buffer, bytes);
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM: return set_field(op.fast_accumulation, buffer, bytes);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;  // not modelled: refused, never silently ignored
  }
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{type, rows, cols, ld, 1, 0});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete reinterpret_cast<Layout*>(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                             cublasLtMatrixLayoutAttribute_t attribute,
                                                             const void* buffer, size_t bytes) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Layout& l = *reinterpret_cast<Layout*>(layout);
  switch (attribute) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return set_field(l.batch, buffer, bytes);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return set_field(l.stride, buffer, bytes);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference) {
  if (preference == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *preference = reinterpret_cast<cublasLtMatmulPreference_t>(new Preference);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  delete reinterpret_cast<Preference*>(preference);
  return CUBLAS_STATUS_SUCCESS;
}

// The workspace and alignment limits only narrow a GPU's choice of kernels; the CPU needs neither.
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                                                 cublasLtMatmulPreferenceAttributes_t attribute,
                                                                 const void* buffer, size_t bytes) {
  if (preference == nullptr || buffer == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attribute) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return bytes == sizeof(uint64_t) ? CUBLAS_STATUS_SUCCESS
                                                                                     : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return bytes == sizeof(uint32_t) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

// ---- algorithms ------------------------------------------------------------------------------------------

// One algorithm for every problem the GPU runs (the CPU has no others to offer), none for the rest.
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                           cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                           cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                           cublasLtMatmulPreference_t preference, int requested,
                                                           cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (handle == nullptr || desc == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr ||
      preference == nullptr || requested < 1 || results == nullptr || returned == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  Shape shape;
  const cublasStatus_t status = check_problem(desc_of(desc), layout_of(a), layout_of(b), layout_of(c), layout_of(d), &shape);
  *returned = 0;
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].algo.data[0] = kAlgoTag;
  results[0].algo.data[1] = 1;  // split-K: 1
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// No split-K: the emulated algorithm supports no reduction scheme.
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoCapGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                              cublasLtMatmulAlgoCapAttributes_t attribute, void* buffer,
                                                              size_t bytes, size_t* written) {
  if (algo == nullptr || algo->data[0] != kAlgoTag || buffer == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attribute) {
    case CUBLASLT_ALGO_CAP_SPLITK_SUPPORT:
    case CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK:
      if (bytes != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memset(buffer, 0, bytes);
      if (written != nullptr) *written = bytes;
      return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                                 cublasLtMatmulAlgoConfigAttributes_t attribute,
                                                                 void* buffer, size_t bytes, size_t* written) {
  if (algo == nullptr || algo->data[0] != kAlgoTag || buffer == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (attribute != CUBLASLT_ALGO_CONFIG_SPLITK_NUM) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (bytes != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
  const int32_t splits = static_cast<int32_t>(algo->data[1]);
  std::memcpy(buffer, &splits, sizeof splits);
  if (written != nullptr) *written = sizeof splits;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoConfigSetAttribute(cublasLtMatmulAlgo_t* algo,
                                                                 cublasLtMatmulAlgoConfigAttributes_t attribute,
                                                                 const void* buffer, size_t bytes) {
  (void)attribute, (void)buffer, (void)bytes;
  if (algo == nullptr || algo->data[0] != kAlgoTag) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_NOT_SUPPORTED;  // its split-K and reduction scheme cannot change
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoCheck(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                    cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                    cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                    const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulHeuristicResult_t* result) {
  if (handle == nullptr || desc == nullptr || algo == nullptr || algo->data[0] != kAlgoTag || result == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  Shape shape;
  const cublasStatus_t status = check_problem(desc_of(desc), layout_of(a), layout_of(b), layout_of(c), layout_of(d), &shape);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  *result = cublasLtMatmulHeuristicResult_t{};
  result->algo = *algo;
  result->state = CUBLAS_STATUS_SUCCESS;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- the matmul ------------------------------------------------------------------------------------------

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                           const void* a, cublasLtMatrixLayout_t a_layout, const void* b,
                                           cublasLtMatrixLayout_t b_layout, const void* beta, const void* c,
                                           cublasLtMatrixLayout_t c_layout, void* d, cublasLtMatrixLayout_t d_layout,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                           cudaStream_t stream) {
  (void)workspace, (void)workspace_bytes;
  if (handle == nullptr || desc == nullptr || alpha == nullptr || beta == nullptr || a_layout == nullptr ||
      b_layout == nullptr || c_layout == nullptr || d_layout == nullptr || algo == nullptr || algo->data[0] != kAlgoTag)
    return CUBLAS_STATUS_INVALID_VALUE;
  const MatmulDesc& op = desc_of(desc);
  const Layout &al = layout_of(a_layout), &bl = layout_of(b_layout), &cl = layout_of(c_layout), &dl = layout_of(d_layout);
  Shape shape;
  const cublasStatus_t status = check_problem(op, al, bl, cl, dl, &shape);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  if ((uses_bias(op.epilogue) && op.bias == nullptr) || (uses_aux(op.epilogue) && op.aux == nullptr))
    return CUBLAS_STATUS_INVALID_VALUE;
  check_pointers(op, shape, a, al, b, bl, c, cl, d, dl);
  const float alpha_value = *static_cast<const float*>(alpha), beta_value = *static_cast<const float*>(beta);
  MatmulJob* job = new MatmulJob;
  job->fp8 = is_fp8(al.type);
  if (job->fp8) {
    if (c != d) {  // the CPU model adds beta times D itself
      delete job;
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    job->fp8_gemm = row_major_fp8_gemm(op, shape, alpha_value, a, al, b, bl, beta_value, d, dl);
  } else {
    job->gemm = row_major_gemm(op, shape, alpha_value, a, al, b, bl, beta_value, c, cl, d, dl);
  }
  const unsigned cores = std::thread::hardware_concurrency();
  job->threads = cores > 0 ? static_cast<int>(cores) : 1;
  // The task owns the job: a captured matmul runs again at every replay of its graph.
  const std::shared_ptr<const MatmulJob> owned(job);
  if (llmc::emu::EmulatedDevice::instance().enqueue(stream, [owned] { run_matmul_job(*owned); }) != cudaSuccess)
    return CUBLAS_STATUS_EXECUTION_FAILED;
  return CUBLAS_STATUS_SUCCESS;
}
