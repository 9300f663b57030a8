// The sparse row exchange's plan (llmc/optim/sparse_row_exchange.h) against the dense reduce-scatter it replaces:
// every rank's plan is played out on the host (the send buffers built from the plan, delivered peer by peer,
// summed as the plan's slots say) and each shard element compared with the sum over ranks of their gradients
// there, computed directly from the touched lists. Integer gradients: every sum is exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <vector>

#include "llmc/optim/sparse_row_exchange.h"

namespace {

using llmc::SparseRowExchangePlan;
using llmc::SparseRowTable;

// Rank r's gradient at (row, column) when it touched the row: a nonzero integer particular to the three.
double gradient(int rank, size_t row, size_t column) {
  return 1.0 + rank * 1000.0 + row * 10.0 + column % 7;
}

// A random ascending subset of [0, rows).
std::vector<int> random_rows(std::mt19937& rng, size_t rows, double fraction) {
  std::bernoulli_distribution touch(fraction);
  std::vector<int> out;
  for (size_t r = 0; r < rows; r++)
    if (touch(rng)) out.push_back(static_cast<int>(r));
  return out;
}

// Each rank's shard as the exchange leaves it (the sums; zero where nobody sent), every rank playing its plan.
std::vector<std::vector<double>> play_exchange(const SparseRowTable& table,
                                               const std::vector<std::vector<int>>& touched) {
  const int world = table.world;
  std::vector<SparseRowExchangePlan> plans;
  for (int r = 0; r < world; r++) plans.push_back(llmc::plan_sparse_row_exchange(table, r, touched));
  std::vector<std::vector<double>> shards(world, std::vector<double>(table.shard_size, 0.0));
  const size_t C = table.row_elements;
  for (int owner = 0; owner < world; owner++) {
    std::vector<double> received;  // peers in rank order, each peer's rows for the owner in its order
    for (int peer = 0; peer < world; peer++) {
      const std::vector<int>& rows = plans[peer].send_rows[owner];
      EXPECT_EQ(rows.size(), plans[owner].recv_rows[peer]) << "peer " << peer << " to " << owner;
      for (int row : rows)
        for (size_t c = 0; c < C; c++) received.push_back(gradient(peer, row, c));
    }
    const SparseRowExchangePlan& plan = plans[owner];
    EXPECT_EQ(received.size(), plan.received_rows() * C);
    for (size_t i = 0; i < plan.out_rows.size(); i++)
      for (size_t c = 0; c < C; c++) {
        const long long at = static_cast<long long>(table.table_offset + plan.out_rows[i] * C + c) -
                             static_cast<long long>(owner * table.shard_size);
        if (at < 0 || at >= static_cast<long long>(table.shard_size)) continue;
        double sum = 0.0;
        for (int k = plan.slot_begin[i]; k < plan.slot_begin[i + 1]; k++) sum += received[plan.slots[k] * C + c];
        shards[owner][at] = sum;
      }
  }
  return shards;
}

// The dense answer: every element of every shard, the sum over ranks of their gradients there.
std::vector<std::vector<double>> dense_sums(const SparseRowTable& table, const std::vector<std::vector<int>>& touched) {
  std::vector<std::vector<double>> shards(table.world, std::vector<double>(table.shard_size, 0.0));
  for (int rank = 0; rank < table.world; rank++)
    for (int row : touched[rank])
      for (size_t c = 0; c < table.row_elements; c++) {
        const size_t element = table.table_offset + row * table.row_elements + c;
        shards[element / table.shard_size][element % table.shard_size] += gradient(rank, row, c);
      }
  return shards;
}

void expect_exchange_is_dense(const SparseRowTable& table, double fraction, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int>> touched;
  for (int r = 0; r < table.world; r++) touched.push_back(random_rows(rng, table.rows, fraction));
  EXPECT_EQ(play_exchange(table, touched), dense_sums(table, touched));
}

// Rows that divide among the ranks (the record's 377,280 rows on 8), and rows that straddle shard boundaries,
// the table not at its bucket's start and the bucket padded past it (3 ranks, 7-element rows).
TEST(SparseRowExchange, EveryShardGetsTheDenseSum) {
  expect_exchange_is_dense(SparseRowTable{64, 16, 0, 128, 8}, 0.3, 1);
  expect_exchange_is_dense(SparseRowTable{41, 7, 5, 100, 3}, 0.5, 2);
  expect_exchange_is_dense(SparseRowTable{41, 7, 5, 100, 3}, 1.0, 3);  // every row: a dense exchange
  expect_exchange_is_dense(SparseRowTable{10, 3, 0, 30, 1}, 0.4, 4);
  expect_exchange_is_dense(SparseRowTable{41, 7, 5, 100, 3}, 0.0, 5);  // nobody touched anything
}

// A row that straddles two shards goes whole to both owners; each sums only its part.
TEST(SparseRowExchange, BoundaryRowsGoToBothOwners) {
  const SparseRowTable table{41, 7, 5, 100, 3};  // row 13 holds elements 96..102: shards 0 and 1
  int first = -1, last = -1;
  llmc::row_owners(table, 13, &first, &last);
  EXPECT_EQ(first, 0);
  EXPECT_EQ(last, 1);
  const std::vector<std::vector<int>> touched{{13}, {}, {13, 40}};
  const SparseRowExchangePlan plan = llmc::plan_sparse_row_exchange(table, 2, touched);
  EXPECT_EQ(plan.send_rows, (std::vector<std::vector<int>>{{13}, {13}, {40}}));
  EXPECT_EQ(plan.sent_rows(), 3u);
  const SparseRowExchangePlan owner1 = llmc::plan_sparse_row_exchange(table, 1, touched);
  EXPECT_EQ(owner1.recv_rows, (std::vector<size_t>{1, 0, 1}));
  EXPECT_EQ(owner1.out_rows, std::vector<int>{13});
  EXPECT_EQ(owner1.slots, (std::vector<int>{0, 1}));  // rank 0's, then rank 2's
}

TEST(SparseRowExchange, RejectsListsAndTablesThatDoNotFit) {
  const SparseRowTable table{41, 7, 5, 100, 3};
  EXPECT_THROW(llmc::plan_sparse_row_exchange(table, 0, {{3, 2}, {}, {}}), std::invalid_argument);  // descending
  EXPECT_THROW(llmc::plan_sparse_row_exchange(table, 0, {{}, {41}, {}}), std::invalid_argument);    // past the end
  EXPECT_THROW(llmc::plan_sparse_row_exchange(table, 3, {{}, {}, {}}), std::invalid_argument);      // no such rank
  EXPECT_THROW(llmc::plan_sparse_row_exchange(table, 0, {{}, {}}), std::invalid_argument);          // lists of 2
  EXPECT_THROW(llmc::plan_sparse_row_exchange(SparseRowTable{41, 7, 5, 90, 3}, 0, {{}, {}, {}}),    // 292 > 270
               std::invalid_argument);
}

}  // namespace
