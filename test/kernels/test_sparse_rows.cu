// Kernel tests of llmc/kernels/sparse_rows.cuh: gather_rows copies the listed rows exactly; sum_rows_avg writes
// each shard element the fp32 sum of its contributions in slot order divided by the rank count, rounded once (a
// host loop in the same order gives the same bits), clips boundary rows to the shard and leaves rows nobody sent
// alone; zero_rows, copy_rows and add_rows_and_clear touch the listed rows alone, the sum rounded once as
// add_into. Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <vector>

#include "llmc/kernels/sparse_rows.cuh"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

TEST(SparseRowsKernel, GatherCopiesTheListedRows) {
  LLMC_REQUIRE_GPU();
  const int R = 20, C = 37;
  std::mt19937 rng(77);
  const std::vector<double> table = round_to_floatx(random_values(static_cast<size_t>(R) * C, rng, -4.0, 4.0));
  const std::vector<int> rows{19, 0, 7, 7, 3};
  DeviceBuffer<floatX> d_table(table.size()), d_out(rows.size() * C);
  DeviceBuffer<int> d_rows(rows.size());
  d_table.upload(table);
  d_rows.upload(std::vector<double>(rows.begin(), rows.end()));
  llmc::gather_rows(d_out.get(), d_table.get(), d_rows.get(), static_cast<int>(rows.size()), C, nullptr);
  std::vector<double> want;
  for (int row : rows) want.insert(want.end(), table.begin() + row * C, table.begin() + (row + 1) * C);
  EXPECT_EQ(d_out.download(), want);
}

// A table of 5-element rows starting 3 elements before this shard of 30 (rows 0 and 6 straddle its bounds);
// rows 0, 2 and 6 received from 3, 1 and 2 senders of 4 ranks.
TEST(SparseRowsKernel, SumIsTheRankOrderedMeanClippedToTheShard) {
  LLMC_REQUIRE_GPU();
  const int C = 5, ranks = 4;
  const long long table_at = -3, shard_size = 30;
  const std::vector<int> out_rows{0, 2, 6}, slot_begin{0, 3, 4, 6}, slots{4, 0, 2, 1, 3, 5};
  std::mt19937 rng(78);
  const std::vector<double> received = round_to_floatx(random_values(6 * C, rng, -2.0, 2.0));
  DeviceBuffer<floatX> d_received(received.size()), d_shard(static_cast<size_t>(shard_size));
  DeviceBuffer<int> d_lists(out_rows.size() + slot_begin.size() + slots.size());
  std::vector<double> lists(out_rows.begin(), out_rows.end());
  lists.insert(lists.end(), slot_begin.begin(), slot_begin.end());
  lists.insert(lists.end(), slots.begin(), slots.end());
  d_lists.upload(lists);
  d_received.upload(received);
  const std::vector<double> untouched(static_cast<size_t>(shard_size), 0.5);
  d_shard.upload(untouched);
  const int* d = d_lists.get();
  llmc::sum_rows_avg(llmc::SparseRowShard<floatX>{d_shard.get(), table_at, shard_size}, d_received.get(), d, d + 3,
                     d + 7, 3, 6, C, ranks, nullptr);
  std::vector<double> want = untouched;
  for (size_t i = 0; i < out_rows.size(); i++)
    for (int c = 0; c < C; c++) {
      const long long at = table_at + out_rows[i] * C + c;
      if (at < 0 || at >= shard_size) continue;
      float sum = 0.0f;
      for (int k = slot_begin[i]; k < slot_begin[i + 1]; k++) sum += static_cast<float>(received[slots[k] * C + c]);
      want[static_cast<size_t>(at)] = round_to_floatx({static_cast<double>(sum / ranks)})[0];
    }
  EXPECT_EQ(d_shard.download(), want);
  EXPECT_THROW(llmc::sum_rows_avg(llmc::SparseRowShard<floatX>{d_shard.get(), 0, shard_size}, d_received.get(), d,
                                  d + 3, d + 7, 3, 6, C, 0, nullptr),
               std::invalid_argument);
}

// Rows {5, 0, 3} of 8-row tables of 37 columns: each pass writes those rows as a host loop says and leaves the
// other rows' bits alone (the sentinel 0.75 there).
class SparseRowsBookkeeping : public ::testing::Test {
 protected:
  static constexpr int kRows = 8, kColumns = 37;
  void SetUp() override {
    LLMC_REQUIRE_GPU();
    std::mt19937 rng(79);
    a_ = round_to_floatx(random_values(static_cast<size_t>(kRows) * kColumns, rng, -3.0, 3.0));
    b_ = round_to_floatx(random_values(a_.size(), rng, -3.0, 3.0));
    d_rows_.upload(std::vector<double>(rows_.begin(), rows_.end()));
  }
  bool listed(size_t element) const {
    return std::find(rows_.begin(), rows_.end(), static_cast<int>(element / kColumns)) != rows_.end();
  }
  const std::vector<int> rows_{5, 0, 3};
  std::vector<double> a_, b_;
  DeviceBuffer<int> d_rows_{3};
};

TEST_F(SparseRowsBookkeeping, ZeroRowsZeroesTheListedRowsAlone) {
  DeviceBuffer<floatX> d_a(a_.size());
  d_a.upload(a_);
  llmc::zero_rows(d_a.get(), d_rows_.get(), 3, kColumns, nullptr);
  std::vector<double> want = a_;
  for (size_t i = 0; i < want.size(); i++)
    if (listed(i)) want[i] = 0.0;
  EXPECT_EQ(d_a.download(), want);
  EXPECT_THROW(llmc::zero_rows(d_a.get(), d_rows_.get(), -1, kColumns, nullptr), std::invalid_argument);
}

TEST_F(SparseRowsBookkeeping, CopyRowsCopiesTheListedRowsAlone) {
  DeviceBuffer<floatX> d_a(a_.size()), d_out(a_.size());
  d_a.upload(a_);
  d_out.upload(std::vector<double>(a_.size(), 0.75));
  llmc::copy_rows(d_out.get(), d_a.get(), d_rows_.get(), 3, kColumns, nullptr);
  std::vector<double> want(a_.size(), 0.75);
  for (size_t i = 0; i < want.size(); i++)
    if (listed(i)) want[i] = a_[i];
  EXPECT_EQ(d_out.download(), want);
}

TEST_F(SparseRowsBookkeeping, AddRowsRoundsTheSumOnceAndClearsTheAddend) {
  DeviceBuffer<floatX> d_a(a_.size()), d_b(b_.size());
  d_a.upload(a_);
  d_b.upload(b_);
  llmc::add_rows_and_clear(d_a.get(), d_b.get(), d_rows_.get(), 3, kColumns, nullptr);
  std::vector<double> want_a = a_, want_b = b_;
  for (size_t i = 0; i < a_.size(); i++) {
    if (!listed(i)) continue;
    want_a[i] = round_to_floatx({static_cast<double>(static_cast<float>(a_[i]) + static_cast<float>(b_[i]))})[0];
    want_b[i] = 0.0;
  }
  EXPECT_EQ(d_a.download(), want_a);
  EXPECT_EQ(d_b.download(), want_b);
}

}  // namespace
