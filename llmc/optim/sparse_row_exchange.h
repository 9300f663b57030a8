// The sparse exchange of a row-sparse gradient (the 2026-07-17 model's bigram table), planned on the host from
// every rank's touched rows: instead of its bucket's reduce-scatter, each rank sends the rows it touched to the
// ranks whose shard of the bucket they overlap, and each owner sums what it receives, in rank order, into its
// shard (docs/distributed.md#the-bigram-tables-gradient-exchange).
#pragma once

#include <cstddef>
#include <vector>

namespace llmc {

// Where a [rows, row_elements] table lies in its bucket, and how the bucket is sharded.
struct SparseRowTable {
  size_t rows = 0, row_elements = 0;
  size_t table_offset = 0;  // elements from the bucket's start to the table's
  size_t shard_size = 0;    // elements of each rank's shard of the bucket
  int world = 1;
};

// One rank's part of an exchange. Its receive buffer holds, for each peer in rank order, the rows that peer
// sends it (in the peer's row order); its send buffer, for each peer in rank order, send_rows[peer]'s rows.
struct SparseRowExchangePlan {
  std::vector<std::vector<int>> send_rows;  // [peer]: the rows of this rank that overlap peer's shard, ascending
  std::vector<size_t> recv_rows;            // [peer]: how many rows the peer sends this rank
  // The owner's sum, per row of the table that overlaps this rank's shard and that any rank touched (ascending):
  // its contributions, rows of the receive buffer in rank order, are slots[slot_begin[i] .. slot_begin[i + 1]).
  std::vector<int> out_rows, slot_begin, slots;
  size_t sent_rows() const;      // all of send_rows, this rank's own included
  size_t received_rows() const;  // all of recv_rows
};

// The ranks whose shards the table's row `row` overlaps: [first, last].
void row_owners(const SparseRowTable& table, size_t row, int* first, int* last);

// Rank `rank`'s plan from touched[r], rank r's touched rows (ascending, distinct, inside the table), for every
// rank. Every rank computes the same exchange from the same lists. Throws std::invalid_argument for a list that
// is not ascending or leaves the table, a table that does not fit the world's shards, or a bad rank.
SparseRowExchangePlan plan_sparse_row_exchange(const SparseRowTable& table, int rank,
                                               const std::vector<std::vector<int>>& touched);

}  // namespace llmc
