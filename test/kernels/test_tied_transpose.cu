// Kernel tests of the tied embed/head transposes (llmc/kernels/tied_transpose.cuh): the copy exact at shapes
// that are not multiples of the tile, inside larger matrices (nothing outside the window written); the add
// rounding the exact sum once; the record's three uses (the head's gradient absorbing the embedding's, the
// embedding from the head, a rank's shard of the head's moments moved to the embedding's); bad shapes.
// Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "llmc/kernels/tied_transpose.cuh"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

template <typename T>
bool untouched(T value) {  // DeviceBuffer starts as 0xff bytes
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  for (unsigned char b : bytes)
    if (b != 0xff) return false;
  return true;
}

// src: a rows x cols window at (r0, c0) of a src_rows x src_cols matrix; dst: the cols x rows window at (d0, e0)
// of a dst_rows x dst_cols matrix.
template <typename T>
void check_copy_window(int src_rows, int src_cols, int r0, int c0, int rows, int cols, int dst_rows, int dst_cols,
                       int d0, int e0, unsigned seed) {
  std::mt19937 rng(seed);
  const std::vector<double> src = random_values(static_cast<size_t>(src_rows) * src_cols, rng);
  DeviceBuffer<T> d_src(src.size()), d_dst(static_cast<size_t>(dst_rows) * dst_cols);
  d_src.upload(src);
  llmc::transpose_copy(d_dst.get() + static_cast<size_t>(d0) * dst_cols + e0, dst_cols,
                       d_src.get() + static_cast<size_t>(r0) * src_cols + c0, src_cols, rows, cols, nullptr);
  const std::vector<T> raw = d_dst.download_raw();
  for (int i = 0; i < dst_rows; i++)
    for (int j = 0; j < dst_cols; j++) {
      const T got = raw[static_cast<size_t>(i) * dst_cols + j];
      const bool inside = i >= d0 && i < d0 + cols && j >= e0 && j < e0 + rows;
      if (!inside) {
        ASSERT_TRUE(untouched(got)) << "written outside the window at " << i << ", " << j;
        continue;
      }
      const double want = src[static_cast<size_t>(r0 + (j - e0)) * src_cols + c0 + (i - d0)];
      ASSERT_EQ(llmc::to_float(got), want) << "at " << i << ", " << j;
    }
}

TEST(TiedTransposeKernel, CopyIsExactAtAnyShape) {
  LLMC_REQUIRE_GPU();
  check_copy_window<floatX>(1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 10);
  check_copy_window<floatX>(33, 70, 0, 0, 33, 70, 70, 33, 0, 0, 11);
  check_copy_window<float>(64, 32, 0, 0, 64, 32, 32, 64, 0, 0, 12);
  check_copy_window<floatX>(40, 100, 3, 17, 29, 45, 60, 50, 5, 9, 13);  // windows in larger matrices
  check_copy_window<float>(40, 100, 3, 17, 29, 45, 60, 50, 5, 9, 14);
}

// dst += src^T: each sum rounded once from the exact value (double, then T), for T = floatX and fp32.
template <typename T>
void check_add(int rows, int cols, unsigned seed) {
  std::mt19937 rng(seed);
  const std::vector<double> src = random_values(static_cast<size_t>(rows) * cols, rng),
                            dst = random_values(static_cast<size_t>(rows) * cols, rng);
  DeviceBuffer<T> d_src(src.size()), d_dst(dst.size());
  d_src.upload(src);
  d_dst.upload(dst);
  llmc::transpose_add(d_dst.get(), rows, d_src.get(), cols, rows, cols, nullptr);
  const std::vector<double> got = d_dst.download();
  for (int i = 0; i < cols; i++)
    for (int j = 0; j < rows; j++) {
      const size_t at = static_cast<size_t>(i) * rows + j;
      const double exact = dst[at] + src[static_cast<size_t>(j) * cols + i];
      ASSERT_EQ(got[at], llmc::to_float(llmc::from_float<T>(static_cast<float>(exact)))) << "at " << i << ", " << j;
    }
}

TEST(TiedTransposeKernel, AddRoundsTheExactSumOnce) {
  LLMC_REQUIRE_GPU();
  check_add<floatX>(48, 80, 20);
  check_add<float>(37, 5, 21);
}

// The record's uses at a small shape, C = 48, V = 80, two ranks: head_grad [C, V] += embed_grad^T; embed =
// head^T; rank r's embed moments (rows [40 r, 40 r + 40)) from the head's full moments [C, V].
TEST(TiedTransposeKernel, TheRecordsThreeUsesOfTheTie) {
  LLMC_REQUIRE_GPU();
  const int C = 48, V = 80, shard = V / 2;
  std::mt19937 rng(30);
  const std::vector<double> head = random_values(static_cast<size_t>(C) * V, rng),
                            moments = random_values(static_cast<size_t>(C) * V, rng, 0.0, 1e-3);
  DeviceBuffer<floatX> d_head(head.size()), d_embed(head.size());
  DeviceBuffer<float> d_moments(moments.size()), d_embed_moments(static_cast<size_t>(shard) * C);
  d_head.upload(head);
  d_moments.upload(moments);
  llmc::transpose_copy(d_embed.get(), C, d_head.get(), V, C, V, nullptr);
  const std::vector<double> embed = d_embed.download();
  for (int v = 0; v < V; v++)
    for (int c = 0; c < C; c++) ASSERT_EQ(embed[v * C + c], head[c * V + v]);
  for (int rank = 0; rank < 2; rank++) {
    llmc::transpose_copy(d_embed_moments.get(), C, d_moments.get() + rank * shard, V, C, shard, nullptr);
    const std::vector<double> got = d_embed_moments.download();
    for (int v = 0; v < shard; v++)
      for (int c = 0; c < C; c++)
        ASSERT_EQ(got[v * C + c], static_cast<float>(moments[c * V + rank * shard + v])) << "rank " << rank;
  }
}

TEST(TiedTransposeKernel, RejectsBadShapes) {
  LLMC_REQUIRE_GPU();
  DeviceBuffer<float> buffer(64);
  EXPECT_THROW(llmc::transpose_copy(buffer.get(), 4, buffer.get(), 7, 4, 8, nullptr), std::invalid_argument);
  EXPECT_THROW(llmc::transpose_add(buffer.get(), 3, buffer.get(), 8, 4, 8, nullptr), std::invalid_argument);
  EXPECT_THROW(llmc::transpose_copy(buffer.get(), 4, buffer.get(), 8, -1, 8, nullptr), std::invalid_argument);
  EXPECT_NO_THROW(llmc::transpose_copy(buffer.get(), 4, buffer.get(), 8, 0, 8, nullptr));
}

}  // namespace
