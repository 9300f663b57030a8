// RowSparseZeroing (row_sparse_zeroing.h).
#include "llmc/family/row_sparse_zeroing.h"

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/sparse_rows.cuh"

namespace llmc {

namespace {

// Each tensor's upload slot holds all its rows: the written rows never outnumber them.
std::vector<size_t> row_counts(const ParamLayout& layout, const std::vector<int>& tensors) {
  std::vector<size_t> rows;
  for (int t : tensors) {
    const TensorView& view = layout.tensors.at(static_cast<size_t>(t));
    if (view.shape.size() != 2)
      throw std::invalid_argument("RowSparseZeroing: " + view.name + " is not a [rows, columns] tensor");
    rows.push_back(view.shape[0]);
  }
  return rows;
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace

RowSparseZeroing::RowSparseZeroing(const ParamLayout& layout, std::vector<int> tensors)
    : layout_(layout), upload_(row_counts(layout, tensors), "RowSparseZeroing") {
  for (size_t i = 0; i < tensors.size(); i++) written_.push_back(Written{tensors[i], static_cast<int>(i), true, {}});
}

RowSparseZeroing::Written& RowSparseZeroing::entry(int tensor) {
  return const_cast<Written&>(static_cast<const RowSparseZeroing&>(*this).entry(tensor));
}

const RowSparseZeroing::Written& RowSparseZeroing::entry(int tensor) const {
  for (const Written& w : written_)
    if (w.tensor == tensor) return w;
  throw std::out_of_range("RowSparseZeroing: tensor " + std::to_string(tensor) + " is not row-sparse");
}

void RowSparseZeroing::add(int tensor, const std::vector<int>& rows) {
  Written& w = entry(tensor);
  if (w.all) return;
  std::vector<int> merged;
  std::set_union(w.rows.begin(), w.rows.end(), rows.begin(), rows.end(), std::back_inserter(merged));
  w.rows.swap(merged);
}

void RowSparseZeroing::add_all(int tensor) {
  Written& w = entry(tensor);
  w.all = true;
  w.rows.clear();
}

void RowSparseZeroing::add_all() {
  for (Written& w : written_) add_all(w.tensor);
}

const std::vector<int>& RowSparseZeroing::written(int tensor, bool* all) const {
  const Written& w = entry(tensor);
  *all = w.all;
  return w.rows;
}

std::vector<RowSparseZeroing::Written*> RowSparseZeroing::in_bucket(int bucket) {
  std::vector<Written*> sparse;
  for (Written& w : written_)
    if (layout_.tensors[static_cast<size_t>(w.tensor)].bucket == bucket) sparse.push_back(&w);
  std::sort(sparse.begin(), sparse.end(), [](const Written* x, const Written* y) { return x->tensor < y->tensor; });
  return sparse;
}

const std::vector<int>& RowSparseZeroing::rows_given(const std::vector<RowSparseGrad>& written, int tensor) const {
  for (const RowSparseGrad& g : written)
    if (g.tensor == tensor) return g.rows;
  throw std::invalid_argument("RowSparseZeroing: no rows given for " +
                              layout_.tensors[static_cast<size_t>(tensor)].name);
}

void RowSparseZeroing::zero_bucket(floatX* grads, int bucket, const std::vector<RowSparseGrad>& written,
                                   cudaStream_t stream) {
  const ParamBucket& b = layout_.buckets.at(static_cast<size_t>(bucket));
  const bool dense = capturing(stream);
  const std::vector<Written*> sparse = in_bucket(bucket);
  std::vector<const std::vector<int>*> next;  // checked before anything is enqueued
  for (const Written* w : sparse) next.push_back(&rows_given(written, w->tensor));
  size_t at = b.offset;  // the gaps between the row-sparse tensors go in full
  for (const Written* w : sparse) {
    const TensorView& view = layout_.tensors[static_cast<size_t>(w->tensor)];
    if (view.offset > at) memset_async(grads + at, 0, (view.offset - at) * sizeof(floatX), stream);
    if (dense || w->all) {
      memset_async(grads + view.offset, 0, view.numel * sizeof(floatX), stream);
    } else {
      zero_rows(grads + view.offset, upload_.upload(w->slot, w->rows, stream), static_cast<int>(w->rows.size()),
                static_cast<int>(view.shape[1]), stream);
    }
    at = view.offset + view.numel;
  }
  const size_t end = b.offset + b.padded_size;  // the tail and the padding
  if (end > at) memset_async(grads + at, 0, (end - at) * sizeof(floatX), stream);
  for (size_t i = 0; i < sparse.size(); i++) {
    sparse[i]->all = dense;
    sparse[i]->rows = dense ? std::vector<int>{} : *next[i];
  }
}

void RowSparseZeroing::add_bucket(int bucket, const std::vector<RowSparseGrad>& written, cudaStream_t stream) {
  const bool dense = capturing(stream);
  for (Written* w : in_bucket(bucket)) {
    if (dense)
      add_all(w->tensor);
    else
      add(w->tensor, rows_given(written, w->tensor));
  }
}

}  // namespace llmc
