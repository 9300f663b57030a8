// TableRows: a step's rows of the row-sparse tables as the union of its micro-batches' rows.
#include "llmc/family/table_rows.h"

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <utility>

namespace llmc {

const std::vector<RowSparseGrad>& no_row_sparse_grads() {
  static const std::vector<RowSparseGrad> none;
  return none;
}

TableRows::TableRows(const std::vector<int>& tensors) {
  for (int tensor : tensors) batch_.push_back({tensor, {}});
  step_ = batch_;
}

void TableRows::set_batch(std::vector<RowSparseGrad> rows) {
  const auto same_table = [&](size_t i) { return rows[i].tensor == batch_[i].tensor; };
  for (size_t i = 0; i < std::max(rows.size(), batch_.size()); i++)
    if (i >= rows.size() || i >= batch_.size() || !same_table(i))
      throw std::invalid_argument("TableRows::set_batch: the batch's rows list other tables than the model's");
  batch_ = std::move(rows);
}

void TableRows::add_batch_to_step(bool first_micro_step) {
  for (size_t i = 0; i < step_.size(); i++) {
    if (first_micro_step) {
      step_[i].rows = batch_[i].rows;
      continue;
    }
    std::vector<int> rows;
    std::set_union(step_[i].rows.begin(), step_[i].rows.end(), batch_[i].rows.begin(), batch_[i].rows.end(),
                   std::back_inserter(rows));
    step_[i].rows.swap(rows);
  }
}

}  // namespace llmc
