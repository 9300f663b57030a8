// The rows of a model's row-sparse tables (embedding tables: a step's tokens touch at most T of their rows):
// the rows a batch reads, listed once as its batch is uploaded, and the rows a step's micro-batches read
// together, the union taken once per backward. Plain C++: the models and their tests share it.
#pragma once

#include <vector>

namespace llmc {

struct RowSparseGrad {
  int tensor = -1;        // index into the layout's tensors
  std::vector<int> rows;  // the rows of [rows, columns] with a gradient, sorted and distinct
};

// The empty list, for a model or bucket without row-sparse tables (constant and never destroyed before the
// program ends, so a reference to it may be kept).
const std::vector<RowSparseGrad>& no_row_sparse_grads();

class TableRows {
 public:
  TableRows() = default;  // no tables
  // The tables (indices into the layout's tensors), with no rows yet.
  explicit TableRows(const std::vector<int>& tensors);

  // The uploaded batch's rows of each table (sorted and distinct). Throws std::invalid_argument unless it lists
  // the same tables in the same order.
  void set_batch(std::vector<RowSparseGrad> rows);
  // A backward of the batch ran: its rows become the step's (first micro-step) or join them.
  void add_batch_to_step(bool first_micro_step);
  const std::vector<RowSparseGrad>& batch() const { return batch_; }
  const std::vector<RowSparseGrad>& step() const { return step_; }

 private:
  std::vector<RowSparseGrad> batch_, step_;
};

}  // namespace llmc
