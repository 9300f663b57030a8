// Polar Express on the device: Frobenius normalisation kernels, then three batched GEMMs per step
// (see polar_express.h). Compiled by nvcc for GPUs and by g++ against the emulation.
#include "llmc/optim/polar_express.h"

#include <stdexcept>
#include <string>

#include "llmc/kernels/matmul.cuh"
#include "llmc/kernels/matrix_norm.cuh"
#include "llmc/kernels/reduction.cuh"

namespace llmc {

std::vector<PolarExpressStep> polar_express_record_steps() {
  return {{8.156554524902461, -22.48329292557795, 15.878769915207462},
          {4.042929935166739, -2.808917465908714, 0.5000178451051316},
          {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
          {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
          {2.3465413258596377, -1.7097828382687081, 0.42323551169305323}};
}

namespace {
constexpr size_t kAlignment = 256;

// y = y + a x, one fused multiply-add rounded once to floatX (the compiled reference contracts it too).
__global__ void add_scaled_kernel(floatX* y, const floatX* x, float a, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = from_float<floatX>(fmaf(a, to_float(x[i]), to_float(y[i])));
}

void add_scaled(floatX* y, const floatX* x, float a, size_t n, cudaStream_t stream) {
  constexpr int kBlock = 256;
  const unsigned blocks = elementwise_grid(n, kBlock) < 1024 ? elementwise_grid(n, kBlock) : 1024;
  LLMC_LAUNCH_COSTED((KernelCost{3.0 * n * sizeof(floatX), 2.0 * n}), add_scaled_kernel, dim3(blocks), dim3(kBlock), 0,
                     stream, y, x, a, n);
}
size_t aligned(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

struct WorkspaceLayout {
  size_t x, gram, poly, scratch, total;
};

WorkspaceLayout workspace_layout(int rows, int cols, int max_batch) {
  if (rows <= 0 || cols <= 0 || max_batch <= 0)
    throw std::invalid_argument("PolarExpress: shape and batch must be positive (rows=" + std::to_string(rows) +
                                " cols=" + std::to_string(cols) + " max_batch=" + std::to_string(max_batch) + ")");
  const size_t small = rows < cols ? rows : cols;
  const size_t matrix = static_cast<size_t>(rows) * cols;
  WorkspaceLayout layout;
  layout.x = 0;
  layout.gram = layout.x + aligned(matrix * max_batch * sizeof(floatX));
  layout.poly = layout.gram + aligned(small * small * max_batch * sizeof(floatX));
  layout.scratch = layout.poly + aligned(small * small * max_batch * sizeof(floatX));
  layout.total = layout.scratch + aligned(frobenius_scratch_floats(matrix, max_batch) * sizeof(float));
  return layout;
}
}  // namespace

size_t PolarExpress::workspace_bytes(int rows, int cols, int max_batch) {
  return workspace_layout(rows, cols, max_batch).total;
}

PolarExpress::PolarExpress(int rows, int cols, int max_batch, void* workspace, size_t workspace_bytes,
                           std::vector<PolarExpressStep> steps, PolarExpressUpdate update)
    : rows_(rows),
      cols_(cols),
      max_batch_(max_batch),
      small_(rows < cols ? rows : cols),
      tall_(rows > cols),
      steps_(std::move(steps)),
      update_(update) {
  if (steps_.empty()) throw std::invalid_argument("PolarExpress: needs at least one polynomial step");
  const WorkspaceLayout layout = workspace_layout(rows, cols, max_batch);
  if (workspace == nullptr || workspace_bytes < layout.total ||
      reinterpret_cast<uintptr_t>(workspace) % kAlignment != 0)
    throw std::invalid_argument("PolarExpress: workspace of " + std::to_string(workspace_bytes) + " bytes at " +
                                std::to_string(reinterpret_cast<uintptr_t>(workspace)) + "; needs " +
                                std::to_string(layout.total) + " bytes, 256-byte aligned");
  char* base = static_cast<char*>(workspace);
  x_work_ = reinterpret_cast<floatX*>(base + layout.x);
  gram_ = reinterpret_cast<floatX*>(base + layout.gram);
  poly_ = reinterpret_cast<floatX*>(base + layout.poly);
  scratch_ = reinterpret_cast<float*>(base + layout.scratch);
  scratch_floats_ = frobenius_scratch_floats(static_cast<size_t>(rows) * cols, max_batch);
}

// next = a x + (b A + c A A^T) x with A = x x^T (wide) or, for tall x, next = a x + x (b A + c A A^T)^T with
// A = x^T x. A is symmetric, so A A^T = A A; the transposes make each product exactly the reference's.
void PolarExpress::step(MatmulContext& context, const PolarExpressStep& k, const floatX* x, floatX* next, int batch,
                        cudaStream_t stream) const {
  const long long matrix = static_cast<long long>(rows_) * cols_, square = static_cast<long long>(small_) * small_;
  const int large = tall_ ? rows_ : cols_;
  GemmArgs gram;
  gram.d = gram_;
  gram.a = x;
  gram.b = x;
  gram.trans_a = tall_;   // x^T x
  gram.trans_b = !tall_;  // x x^T
  gram.m = gram.n = small_;
  gram.k = large;
  gram.batch = batch;
  gram.stride_a = gram.stride_b = matrix;
  gram.stride_d = square;
  gemm(context, gram, stream);

  GemmArgs poly;  // B = c A A^T + b A
  poly.d = poly_;
  poly.a = poly.b = poly.c = gram_;
  poly.trans_b = true;
  poly.m = poly.n = poly.k = small_;
  poly.alpha = static_cast<float>(k.c);
  poly.beta = static_cast<float>(k.b);
  poly.batch = batch;
  poly.stride_a = poly.stride_b = poly.stride_d = square;
  gemm(context, poly, stream);

  GemmArgs update;  // next = B x + a x (wide), x B^T + a x (tall); split: the product, then + a x
  const bool split = update_ == PolarExpressUpdate::kSplit;
  update.d = next;
  update.c = split ? nullptr : x;
  update.a = tall_ ? x : poly_;
  update.b = tall_ ? poly_ : x;
  update.trans_b = tall_;
  update.m = rows_;
  update.n = cols_;
  update.k = small_;
  update.alpha = 1.0f;
  update.beta = split ? 0.0f : static_cast<float>(k.a);
  update.batch = batch;
  update.stride_a = tall_ ? matrix : square;
  update.stride_b = tall_ ? square : matrix;
  update.stride_d = matrix;
  gemm(context, update, stream);
  if (split) add_scaled(next, x, static_cast<float>(k.a), static_cast<size_t>(matrix) * batch, stream);
}

void PolarExpress::run(MatmulContext& context, const floatX* in, floatX* out, int batch, cudaStream_t stream) const {
  if (batch <= 0 || batch > max_batch_)
    throw std::invalid_argument("PolarExpress::run: batch " + std::to_string(batch) + " outside [1, " +
                                std::to_string(max_batch_) + "]");
  // Ping-pong between the workspace and `out`, starting where an odd/even step count ends in `out`.
  floatX* current = steps_.size() % 2 == 1 ? x_work_ : out;
  floatX* other = current == out ? x_work_ : out;
  frobenius_normalize(in, current, static_cast<size_t>(rows_) * cols_, batch, kPolarExpressNormScale,
                      kPolarExpressNormEps, scratch_, scratch_floats_, stream);
  for (const PolarExpressStep& coefficients : steps_) {
    step(context, coefficients, current, other, batch, stream);
    std::swap(current, other);
  }
}

}  // namespace llmc
