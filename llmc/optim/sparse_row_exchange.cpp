// The host-side plan of a sparse row exchange (see sparse_row_exchange.h).
#include "llmc/optim/sparse_row_exchange.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace llmc {

namespace {

void check_table(const SparseRowTable& table) {
  if (table.world < 1 || table.row_elements == 0 || table.shard_size == 0 ||
      table.table_offset + table.rows * table.row_elements > table.shard_size * static_cast<size_t>(table.world))
    throw std::invalid_argument("sparse row exchange: a table of " + std::to_string(table.rows) + " x " +
                                std::to_string(table.row_elements) + " at element " +
                                std::to_string(table.table_offset) + " does not fit " + std::to_string(table.world) +
                                " shards of " + std::to_string(table.shard_size));
}

void check_rows(const SparseRowTable& table, const std::vector<int>& rows, int rank) {
  for (size_t i = 0; i < rows.size(); i++)
    if (rows[i] < 0 || static_cast<size_t>(rows[i]) >= table.rows || (i > 0 && rows[i] <= rows[i - 1]))
      throw std::invalid_argument("sparse row exchange: rank " + std::to_string(rank) + "'s row " + std::to_string(i) +
                                  " (" + std::to_string(rows[i]) + ") is not ascending inside [0, " +
                                  std::to_string(table.rows) + ")");
}

// The table's rows that overlap rank's shard: [*first, *end); empty when none does.
void owned_rows(const SparseRowTable& table, int rank, size_t* first, size_t* end) {
  const size_t shard_begin = static_cast<size_t>(rank) * table.shard_size, shard_end = shard_begin + table.shard_size;
  const size_t table_end = table.table_offset + table.rows * table.row_elements;
  const size_t begin = std::max(shard_begin, table.table_offset), stop = std::min(shard_end, table_end);
  if (begin >= stop) {
    *first = *end = 0;
    return;
  }
  *first = (begin - table.table_offset) / table.row_elements;
  *end = (stop - 1 - table.table_offset) / table.row_elements + 1;
}

// The part of `rows` (ascending) inside [first, end).
std::pair<std::vector<int>::const_iterator, std::vector<int>::const_iterator> rows_within(const std::vector<int>& rows,
                                                                                          size_t first, size_t end) {
  auto lo = std::lower_bound(rows.begin(), rows.end(), static_cast<long long>(first),
                             [](int row, long long bound) { return row < bound; });
  auto hi = std::lower_bound(lo, rows.end(), static_cast<long long>(end),
                             [](int row, long long bound) { return row < bound; });
  return {lo, hi};
}

}  // namespace

size_t SparseRowExchangePlan::sent_rows() const {
  size_t total = 0;
  for (const std::vector<int>& rows : send_rows) total += rows.size();
  return total;
}

size_t SparseRowExchangePlan::received_rows() const {
  size_t total = 0;
  for (size_t count : recv_rows) total += count;
  return total;
}

void row_owners(const SparseRowTable& table, size_t row, int* first, int* last) {
  const size_t begin = table.table_offset + row * table.row_elements;
  *first = static_cast<int>(begin / table.shard_size);
  *last = static_cast<int>((begin + table.row_elements - 1) / table.shard_size);
}

SparseRowExchangePlan plan_sparse_row_exchange(const SparseRowTable& table, int rank,
                                               const std::vector<std::vector<int>>& touched) {
  check_table(table);
  if (rank < 0 || rank >= table.world || static_cast<int>(touched.size()) != table.world)
    throw std::invalid_argument("sparse row exchange: rank " + std::to_string(rank) + " with the rows of " +
                                std::to_string(touched.size()) + " ranks, of a world of " +
                                std::to_string(table.world));
  for (int r = 0; r < table.world; r++) check_rows(table, touched[static_cast<size_t>(r)], r);
  SparseRowExchangePlan plan;
  plan.send_rows.resize(static_cast<size_t>(table.world));
  for (int row : touched[static_cast<size_t>(rank)]) {
    int first = 0, last = 0;
    row_owners(table, static_cast<size_t>(row), &first, &last);
    for (int peer = first; peer <= last; peer++) plan.send_rows[static_cast<size_t>(peer)].push_back(row);
  }
  size_t first = 0, end = 0;
  owned_rows(table, rank, &first, &end);
  std::vector<std::pair<int, int>> row_slots;  // (row, receive-buffer row), peers in rank order
  int slot = 0;
  for (int peer = 0; peer < table.world; peer++) {
    const auto [lo, hi] = rows_within(touched[static_cast<size_t>(peer)], first, end);
    plan.recv_rows.push_back(static_cast<size_t>(hi - lo));
    for (auto row = lo; row != hi; ++row) row_slots.emplace_back(*row, slot++);
  }
  std::sort(row_slots.begin(), row_slots.end());  // by row, then slot: rank order within a row
  for (const auto& [row, at] : row_slots) {
    if (plan.out_rows.empty() || plan.out_rows.back() != row) {
      plan.out_rows.push_back(row);
      plan.slot_begin.push_back(static_cast<int>(plan.slots.size()));
    }
    plan.slots.push_back(at);
  }
  plan.slot_begin.push_back(static_cast<int>(plan.slots.size()));
  return plan;
}

}  // namespace llmc
