// The 2026-07-17 record's FP8 MLP forward: its memory, the order of its kernels and the life of its scales
// (modded89_fp8_mlp.h; the kernels are llmc/kernels/fp8_mlp.cuh, fp8_cast*.cuh and fp8_gemm).
#include "llmc/model/modded89/modded89_fp8_mlp.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/fp8_cast.cuh"
#include "llmc/kernels/fp8_cast_transpose.cuh"
#include "llmc/kernels/fp8_matmul.cuh"
#include "llmc/kernels/fp8_mlp.cuh"
#include "llmc/kernels/wgmma_fp8_gemm.cuh"

namespace llmc {

namespace {

constexpr size_t kAlign = 16;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

__global__ void fill_floats_kernel(float* out, int stride, int count, float value) {
  for (int i = threadIdx.x; i < count; i += blockDim.x) out[static_cast<size_t>(i) * stride] = value;
}

}  // namespace

bool Modded89Fp8Mlp::shape_fits(int seq_len, int channels) {
  return seq_len > 0 && channels > 0 && seq_len % 16 == 0 && channels % 16 == 0;
}

size_t Modded89Fp8Mlp::bytes(int seq_len, int channels, int layers) {
  const size_t T = static_cast<size_t>(seq_len), C = static_cast<size_t>(channels);
  return aligned(T * C) + aligned(4 * T * C) + 2 * static_cast<size_t>(layers) * aligned(4 * C * C) +
         aligned(static_cast<size_t>(layers) * kScalars * sizeof(float));
}

Modded89Fp8Mlp::Modded89Fp8Mlp(int seq_len, int channels, int layers, unsigned char* memory, cudaStream_t stream,
                               FusedGemms up_gemm)
    : seq_len_(seq_len), channels_(channels), layers_(layers), up_gemm_(up_gemm) {
  if (!shape_fits(seq_len, channels))
    throw std::invalid_argument("the FP8 MLP needs the sequence length (" + std::to_string(seq_len) +
                                ") and the width (" + std::to_string(channels) + ") to be multiples of 16");
  if (up_gemm == FusedGemms::kWgmma && channels % 32 != 0)
    throw std::invalid_argument("--wgmma-gemms on: the FP8 MLP's up projection takes widths that are multiples of "
                                "32 (whole FP8 MMAs), not " + std::to_string(channels));
  if (memory == nullptr || reinterpret_cast<uintptr_t>(memory) % kAlign != 0)
    throw std::invalid_argument("Modded89Fp8Mlp: memory must be 16-byte aligned");
  const size_t T = static_cast<size_t>(seq_len), C = static_cast<size_t>(channels);
  unsigned char* next = memory;
  auto take = [&next](size_t bytes) {
    unsigned char* at = next;
    next += aligned(bytes);
    return at;
  };
  x8_ = reinterpret_cast<fp8e4m3*>(take(T * C));
  post8_ = reinterpret_cast<fp8e4m3*>(take(4 * T * C));
  up_codes_ = reinterpret_cast<fp8e4m3*>(take(static_cast<size_t>(layers) * aligned(4 * C * C)));
  down_codes_ = reinterpret_cast<fp8e4m3*>(take(static_cast<size_t>(layers) * aligned(4 * C * C)));
  scalars_ = reinterpret_cast<float*>(take(static_cast<size_t>(layers) * kScalars * sizeof(float)));
  CUDA_CHECK(cudaMemsetAsync(scalars_, 0, static_cast<size_t>(layers) * kScalars * sizeof(float), stream));
  reset(stream);
}

fp8e4m3* Modded89Fp8Mlp::up_codes(int layer) const {
  return up_codes_ + static_cast<size_t>(layer) * aligned(4 * static_cast<size_t>(channels_) * channels_);
}

fp8e4m3* Modded89Fp8Mlp::down_codes(int layer) const {
  return down_codes_ + static_cast<size_t>(layer) * aligned(4 * static_cast<size_t>(channels_) * channels_);
}

void Modded89Fp8Mlp::reset(cudaStream_t stream) {
  // Step 0 runs with activation scale 1 (the record's buffer init, and again after its warm-up reset).
  LLMC_LAUNCH(fill_floats_kernel, 1, 32, 0, stream, scalar(kActScale, 0), static_cast<int>(kScalars), layers_, 1.0f);
  stale_.assign(static_cast<size_t>(layers_), 1);
  refreshed_.assign(static_cast<size_t>(layers_), 0);
}

void Modded89Fp8Mlp::before_step(int step) {
  if (step < 1) return;  // the copies of the parameters step 0 starts from are already due
  stale_.assign(static_cast<size_t>(layers_), 1);
  update_bootstraps_ = step - 1 < kFp8MlpBootstrapSteps;
}

std::string Modded89Fp8Mlp::refresh_state() const {
  std::string state = update_bootstraps_ ? "bootstrap " : "delayed ";
  for (int layer = 0; layer < layers_; layer++)
    state += std::to_string(stale_[static_cast<size_t>(layer)]) + std::to_string(refreshed_[static_cast<size_t>(layer)]);
  return state;
}

// Up: s_up = bf16(max|c_fc| / 448), W8 = e4m3(bf16(c_fc / s_up)). Down: with a bootstrap the scale of these
// weights, else the `next` of the previous refresh (the weights one update older, with headroom 1.12); W8^T =
// e4m3(c_proj^T / scale) (C, 4C) K-major; then used = that scale and next = max|c_proj| 1.12 / 448.
void Modded89Fp8Mlp::refresh(int layer, const floatX* c_fc, const floatX* c_proj, cudaStream_t stream) {
  const int C = channels_, hidden = 4 * channels_;
  const size_t n = static_cast<size_t>(hidden) * C;
  abs_max(scalar(kUpAmax, layer), c_fc, n, stream);
  fp8_up_weights(up_codes(layer), scalar(kUpScale, layer), scalar(kUpAmax, layer), c_fc, n, stream);
  abs_max(scalar(kDownAmax, layer), c_proj, n, stream);
  if (!refreshed_[static_cast<size_t>(layer)] || update_bootstraps_)
    fp8_scale_from_amax(scalar(kDownNext, layer), nullptr, scalar(kDownAmax, layer), fp8_mlp_scale_factor(1.0), stream);
  fp8_cast_transpose(down_codes(layer), static_cast<fp8e4m3*>(nullptr), c_proj, hidden, C, 1.0f, stream,
                     scalar(kDownNext, layer));
  fp8_scale_from_amax(scalar(kDownNext, layer), scalar(kDownUsed, layer), scalar(kDownAmax, layer),
                      fp8_mlp_scale_factor(kFp8MlpWeightHeadroom), stream);
  stale_[static_cast<size_t>(layer)] = 0;
  refreshed_[static_cast<size_t>(layer)] = 1;
}

void Modded89Fp8Mlp::forward(MatmulContext& matmul, int layer, const floatX* xn, const floatX* c_fc,
                             const floatX* c_proj, floatX* pre, floatX* post, floatX* out, int T,
                             cudaStream_t stream, const float* xn_amax) {
  if (layer < 0 || layer >= layers_) throw std::out_of_range("Modded89Fp8Mlp: layer " + std::to_string(layer));
  if (T < 16 || T > seq_len_ || T % 16 != 0)
    throw std::invalid_argument("Modded89Fp8Mlp: " + std::to_string(T) + " rows (a multiple of 16 up to " +
                                std::to_string(seq_len_) + ")");
  if (stale_[static_cast<size_t>(layer)]) refresh(layer, c_fc, c_proj, stream);
  const int C = channels_, hidden = 4 * channels_;
  const size_t rows = static_cast<size_t>(T);
  // x8 = e4m3(xn / x_s), x_s = max|xn| / 448 of this forward.
  if (xn_amax == nullptr) {
    abs_max(scalar(kXAmax, layer), xn, rows * C, stream);
    xn_amax = scalar(kXAmax, layer);
  }
  fp8_scale_from_amax(scalar(kXScale, layer), nullptr, xn_amax, fp8_mlp_scale_factor(1.0), stream);
  fp8_cast(x8_, xn, rows * C, 1.0f, stream, scalar(kXScale, layer));
  if (up_gemm_ == FusedGemms::kWgmma) {  // post, post8 and max post from the GEMM's epilogue; pre stays in registers
    wgmma_fp8_relu_squared_launch(post, post8_, scalar(kActAmax, layer), x8_, up_codes(layer), scalar(kXScale, layer),
                                  scalar(kUpScale, layer), scalar(kActScale, layer), T, hidden, C, stream);
  } else {
    Fp8GemmArgs up;  // pre (T, 4C) = (x_s s_up) x8 W8^T, fp32 accumulation
    up.d = pre, up.d_type = fp8_gemm_output_type<floatX>(), up.a = x8_, up.b = up_codes(layer);
    up.m = T, up.n = hidden, up.k = C;
    up.a_scale = scalar(kXScale, layer), up.b_scale = scalar(kUpScale, layer);
    fp8_gemm(matmul, up, stream);
    relu_squared_fp8_forward(post, post8_, scalar(kActAmax, layer), pre, scalar(kActScale, layer), rows * hidden,
                             stream);
  }
  Fp8GemmArgs down;  // out (T, C) = (s_act s_w) post8 Wd8^T, fast accumulation
  down.d = out, down.d_type = fp8_gemm_output_type<floatX>(), down.a = post8_, down.b = down_codes(layer);
  down.m = T, down.n = C, down.k = hidden;
  down.a_scale = scalar(kActScale, layer), down.b_scale = scalar(kDownUsed, layer);
  down.fast_accumulation = true;
  fp8_gemm(matmul, down, stream);
  // The delayed scale for the next forward: this one's maximum of post with headroom 1.80.
  fp8_scale_from_amax(scalar(kActScale, layer), nullptr, scalar(kActAmax, layer),
                      fp8_mlp_scale_factor(kFp8MlpActivationHeadroom), stream);
}

Modded89Fp8Mlp::Scales Modded89Fp8Mlp::download_scales(cudaStream_t stream) const {
  std::vector<float> all(static_cast<size_t>(layers_) * kScalars);
  CUDA_CHECK(cudaMemcpyAsync(all.data(), scalars_, all.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  Scales scales;
  for (int i = 0; i < layers_; i++) {
    const float* row = all.data() + static_cast<size_t>(i) * kScalars;
    scales.x.push_back(row[kXScale]);
    scales.up_weight.push_back(row[kUpScale]);
    scales.activation.push_back(row[kActScale]);
    scales.down_used.push_back(row[kDownUsed]);
    scales.down_next.push_back(row[kDownNext]);
  }
  return scales;
}

namespace {

constexpr const char* kScalesArray = "model.fp8_mlp.scales";
constexpr const char* kRefreshedArray = "model.fp8_mlp.refreshed";

NamedStateArray float_array(const char* name, const std::vector<float>& values) {
  NamedStateArray array;
  array.name = name;
  array.element_bytes = sizeof(float);
  array.bytes.resize(values.size() * sizeof(float));
  std::memcpy(array.bytes.data(), values.data(), array.bytes.size());
  return array;
}

std::vector<float> floats_of(const std::vector<NamedStateArray>& arrays, const char* name, size_t count) {
  for (const NamedStateArray& array : arrays) {
    if (array.name != name) continue;
    if (array.element_bytes != sizeof(float) || array.bytes.size() != count * sizeof(float))
      throw std::runtime_error(std::string("the FP8 MLP's checkpoint array ") + name + " holds " +
                               std::to_string(array.bytes.size()) + " bytes, this model expects " +
                               std::to_string(count) + " fp32 values");
    std::vector<float> values(count);
    std::memcpy(values.data(), array.bytes.data(), array.bytes.size());
    return values;
  }
  throw std::runtime_error(std::string("the checkpoint has no ") + name + " (the FP8 MLP's state)");
}

}  // namespace

std::vector<NamedStateArray> Modded89Fp8Mlp::save_state(cudaStream_t stream) const {
  std::vector<float> scalars(static_cast<size_t>(layers_) * kScalars);
  CUDA_CHECK(cudaMemcpyAsync(scalars.data(), scalars_, scalars.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> refreshed(refreshed_.begin(), refreshed_.end());
  return {float_array(kScalesArray, scalars), float_array(kRefreshedArray, refreshed)};
}

void Modded89Fp8Mlp::restore_state(const std::vector<NamedStateArray>& arrays, cudaStream_t stream) {
  const std::vector<float> scalars = floats_of(arrays, kScalesArray, static_cast<size_t>(layers_) * kScalars);
  const std::vector<float> refreshed = floats_of(arrays, kRefreshedArray, static_cast<size_t>(layers_));
  CUDA_CHECK(cudaMemcpyAsync(scalars_, scalars.data(), scalars.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vector must outlive the copy
  for (int i = 0; i < layers_; i++) refreshed_[static_cast<size_t>(i)] = refreshed[static_cast<size_t>(i)] != 0.0f;
  stale_.assign(static_cast<size_t>(layers_), 1);  // the copies themselves are made again from the parameters
}

}  // namespace llmc
