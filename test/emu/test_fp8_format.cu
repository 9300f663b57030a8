// The FP8 conversions of llmc/cuda/fp8.h in a kernel (the GPU's cvt.rn.satfinite on sm_90; the emulation's model
// llmc/emu/fp8_convert.h in the emulated build) against an independent model: ml_dtypes' float8_e4m3fn / float8_e5m2
// with the instruction's saturation (test/emu/fp8_reference.py). All 256 codes decode; encoding is checked on
// every code's value, every midpoint between neighbours (exact ties, both parities) and the floats beside it,
// the subnormal and overflow boundaries, specials and random floats. On the host, the emulation's model also
// agrees with the software path of CUDA's own cuda_fp8.h (a third model).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/emu/fp8_convert.h"
#include "llmc/cuda/fp8.h"
#include "test/support/device_buffer.h"
#include "test/support/python_oracle.h"
#include "test/support/test_helpers.h"

namespace {

using llmc::test::DeviceBuffer;
using llmc::test::float_bits;

float float_from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

template <class Fp8>
__global__ void decode_kernel(const uint8_t* codes, float* values, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) values[i] = llmc::fp8_to_float(llmc::fp8_from_bits<Fp8>(codes[i]));
}

// Pairs through the two-value conversion (the cast kernels' instruction), odd-free n.
template <class Fp8>
__global__ void encode_pairs_kernel(const float* values, uint16_t* pairs, int pair_count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < pair_count) pairs[i] = llmc::fp8x2_from_floats<Fp8>(values[2 * i], values[2 * i + 1]);
}

template <class Fp8>
__global__ void encode_single_kernel(const float* values, uint8_t* codes, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) codes[i] = llmc::fp8_from_float<Fp8>(values[i]).__x;
}

class Fp8Format : public llmc::test::TempDirTest {
 protected:
  Fp8Format() : TempDirTest("llmc_fp8") {}
  llmc::test::PythonOracle oracle(const char* format) const {
    llmc::test::PythonOracle call(dir(), "test/emu/fp8_reference.py");
    call.config(std::string("{\"format\": \"") + format + "\"}");
    return call;
  }
};

template <class Fp8>
std::vector<float> all_code_values() {
  std::vector<float> values(256);
  for (int code = 0; code < 256; code++)
    values[code] = llmc::emu::fp8_decode(static_cast<uint8_t>(code), llmc::Fp8Traits<Fp8>::kFormat);
  return values;
}

// Floats that probe every rounding decision: each finite code value, each midpoint between neighbouring
// non-negative values (a tie, exactly representable in float) and the floats one ulp either side of values
// and midpoints, each with both signs; the overflow boundaries past the largest value; specials; random
// bit patterns and random magnitudes spread over the format's range.
template <class Fp8>
std::vector<float> probe_floats() {
  std::vector<float> magnitudes;
  const std::vector<float> code_values = all_code_values<Fp8>();
  std::vector<float> finite;
  for (int code = 0; code < 0x80; code++)
    if (std::isfinite(code_values[code])) finite.push_back(code_values[code]);
  const float max_finite = llmc::Fp8Traits<Fp8>::kMaxFinite;
  const float max_ulp = max_finite - finite[finite.size() - 2];
  finite.push_back(max_finite + max_ulp);  // the first value past the range: its midpoint is the overflow tie
  for (size_t i = 0; i < finite.size(); i++) {
    magnitudes.push_back(finite[i]);
    if (i + 1 < finite.size()) magnitudes.push_back(0.5f * (finite[i] + finite[i + 1]));
  }
  const size_t anchors = magnitudes.size();
  for (size_t i = 0; i < anchors; i++) {
    magnitudes.push_back(std::nextafter(magnitudes[i], 0.0f));
    magnitudes.push_back(std::nextafter(magnitudes[i], std::numeric_limits<float>::infinity()));
  }
  const float specials[] = {0.0f,
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::denorm_min(),
                            float_from_bits(0x007fffffu),
                            2.0f * max_finite,
                            1e30f,
                            1e-30f};
  magnitudes.insert(magnitudes.end(), std::begin(specials), std::end(specials));
  std::vector<float> probes;
  for (float magnitude : magnitudes) {
    probes.push_back(magnitude);
    probes.push_back(-magnitude);
  }
  const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff812345u, 0x7fffffffu};
  for (uint32_t nan : nans) probes.push_back(float_from_bits(nan));
  std::mt19937 random(20261201);
  std::uniform_real_distribution<float> log2_magnitude(std::log2(code_values[1]) - 2.0f, std::log2(max_finite) + 1.0f);
  for (int i = 0; i < 50000; i++) {
    probes.push_back(float_from_bits(static_cast<uint32_t>(random())));
    const float value = std::exp2(log2_magnitude(random));
    probes.push_back((random() & 1u) != 0 ? -value : value);
  }
  if (probes.size() % 2 != 0) probes.push_back(1.0f);
  return probes;
}

// NaN must stay NaN (its bits are the hardware's choice); everything else bit for bit, the sign of zero too.
template <class Fp8>
void expect_same_code(uint8_t got, uint8_t expected, float input, const char* what) {
  const llmc::emu::Fp8Format format = llmc::Fp8Traits<Fp8>::kFormat;
  if (std::isnan(llmc::emu::fp8_decode(expected, format))) {
    EXPECT_TRUE(std::isnan(llmc::emu::fp8_decode(got, format)))
        << what << ": " << input << " (0x" << std::hex << float_bits(input) << ") gave code 0x" << int{got};
  } else {
    EXPECT_EQ(int{got}, int{expected}) << what << ": " << input << " (float bits 0x" << std::hex << float_bits(input)
                                       << ")";
  }
}

template <class Fp8>
void check_decode(const llmc::test::PythonOracle& oracle) {
  oracle.run("decode");
  const std::vector<double> expected = oracle.get("values");
  ASSERT_EQ(expected.size(), 256u);
  std::vector<uint8_t> codes(256);
  for (int code = 0; code < 256; code++) codes[code] = static_cast<uint8_t>(code);
  DeviceBuffer<uint8_t> d_codes(codes);
  DeviceBuffer<float> d_values(256);
  LLMC_LAUNCH(decode_kernel<Fp8>, 2, 128, 0, nullptr, d_codes.get(), d_values.get(), 256);
  const std::vector<float> got = d_values.download_raw();
  for (int code = 0; code < 256; code++) {
    if (std::isnan(expected[code])) {
      EXPECT_TRUE(std::isnan(got[code])) << "code 0x" << std::hex << code;
    } else {
      EXPECT_EQ(float_bits(got[code]), float_bits(static_cast<float>(expected[code])))
          << "code 0x" << std::hex << code << ": " << got[code] << " vs " << expected[code];
    }
  }
}

template <class Fp8>
void check_encode(const llmc::test::PythonOracle& oracle) {
  const std::vector<float> probes = probe_floats<Fp8>();
  oracle.put("values", {probes.size()}, std::vector<double>(probes.begin(), probes.end()));
  oracle.run("encode");
  const std::vector<double> expected = oracle.get("codes");
  ASSERT_EQ(expected.size(), probes.size());
  const int n = static_cast<int>(probes.size());
  DeviceBuffer<float> d_probes(probes);
  DeviceBuffer<uint16_t> d_pairs(probes.size() / 2);
  DeviceBuffer<uint8_t> d_codes(probes.size());
  LLMC_LAUNCH(encode_pairs_kernel<Fp8>, (n / 2 + 255) / 256, 256, 0, nullptr, d_probes.get(), d_pairs.get(), n / 2);
  LLMC_LAUNCH(encode_single_kernel<Fp8>, (n + 255) / 256, 256, 0, nullptr, d_probes.get(), d_codes.get(), n);
  const std::vector<uint16_t> pairs = d_pairs.download_raw();
  const std::vector<uint8_t> singles = d_codes.download_raw();
  for (int i = 0; i < n && !::testing::Test::HasFailure(); i++) {
    const uint8_t expected_code = static_cast<uint8_t>(expected[i]);
    const uint8_t pair_code = static_cast<uint8_t>(i % 2 == 0 ? pairs[i / 2] & 0xffu : pairs[i / 2] >> 8);
    expect_same_code<Fp8>(pair_code, expected_code, probes[i], "two-value conversion");
    expect_same_code<Fp8>(singles[i], expected_code, probes[i], "one-value conversion");
  }
}

TEST_F(Fp8Format, E4M3DecodesAllCodesLikeMlDtypes) { check_decode<llmc::fp8e4m3>(oracle("e4m3")); }
TEST_F(Fp8Format, E5M2DecodesAllCodesLikeMlDtypes) { check_decode<llmc::fp8e5m2>(oracle("e5m2")); }
TEST_F(Fp8Format, E4M3EncodesLikeMlDtypesSaturated) { check_encode<llmc::fp8e4m3>(oracle("e4m3")); }
TEST_F(Fp8Format, E5M2EncodesLikeMlDtypesSaturated) { check_encode<llmc::fp8e5m2>(oracle("e5m2")); }

// The values the FP8 head depends on, spelled out: the largest values, the saturation, the ties at the top.
TEST(Fp8FormatFacts, RangesAndSaturation) {
  using llmc::emu::fp8_decode;
  using llmc::emu::fp8_encode;
  using llmc::emu::Fp8Format;
  EXPECT_EQ(fp8_decode(0x7e, Fp8Format::kE4M3), 448.0f);
  EXPECT_EQ(fp8_decode(0x01, Fp8Format::kE4M3), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_decode(0x7b, Fp8Format::kE5M2), 57344.0f);
  EXPECT_EQ(fp8_decode(0x01, Fp8Format::kE5M2), std::ldexp(1.0f, -16));
  EXPECT_TRUE(std::isinf(fp8_decode(0x7c, Fp8Format::kE5M2)));
  EXPECT_EQ(fp8_encode(464.0f, Fp8Format::kE4M3), 0x7e);  // the tie between 448 and (absent) 480: even = 448
  EXPECT_EQ(fp8_encode(465.0f, Fp8Format::kE4M3), 0x7e);  // saturated, not NaN
  EXPECT_EQ(fp8_encode(-std::numeric_limits<float>::infinity(), Fp8Format::kE4M3), 0xfe);
  EXPECT_EQ(fp8_encode(61440.0f, Fp8Format::kE5M2), 0x7b);               // the tie above 57344 would round to infinity
  EXPECT_EQ(fp8_encode(std::ldexp(1.0f, -10), Fp8Format::kE4M3), 0x00);  // half the smallest subnormal: even
  EXPECT_EQ(fp8_encode(std::ldexp(3.0f, -11), Fp8Format::kE4M3), 0x01);  // three quarters of it
  EXPECT_EQ(fp8_encode(-1e-30f, Fp8Format::kE5M2), 0x80);                // rounds to -0
}

// The emulation's model against cuda_fp8.h's own software conversion (what __nv_cvt_float_to_fp8 does on the
// host and on GPUs before sm_89), every probe, both formats.
TEST(Fp8FormatFacts, AgreesWithCudaHeaderSoftwarePath) {
  const std::vector<float> e4m3_probes = probe_floats<llmc::fp8e4m3>();
  const std::vector<float> e5m2_probes = probe_floats<llmc::fp8e5m2>();
  for (float x : e4m3_probes)
    expect_same_code<llmc::fp8e4m3>(llmc::emu::fp8_encode(x, llmc::emu::Fp8Format::kE4M3),
                                    __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3), x, "e4m3 vs cuda_fp8.h");
  for (float x : e5m2_probes)
    expect_same_code<llmc::fp8e5m2>(llmc::emu::fp8_encode(x, llmc::emu::Fp8Format::kE5M2),
                                    __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2), x, "e5m2 vs cuda_fp8.h");
}

}  // namespace
