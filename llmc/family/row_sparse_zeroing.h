// Zeroing a model's row-sparse gradients (embedding tables: a step's tokens touch at most T of their rows) row by
// row: for one gradient buffer, which rows of each such tensor may be nonzero, so that the next backward zeroes
// those rows instead of the whole tables. Inside a stream capture (a CUDA graph replays other rows) it zeroes all.
#pragma once
#include <cuda_runtime.h>

#include <vector>

#include "llmc/cuda/int_list_upload.h"
#include "llmc/cuda/precision.h"
#include "llmc/family/param_layout.h"
#include "llmc/family/trainable_model.h"

namespace llmc {

class RowSparseZeroing {
 public:
  // `tensors`: indices into the layout of [rows, columns] tensors. At first every row counts as written.
  RowSparseZeroing(const ParamLayout& layout, std::vector<int> tensors);

  // Zeroes bucket `bucket` of `grads` (the layout's offsets) on `stream`: the written rows of its row-sparse
  // tensors, the rest of the bucket in full. Then `written` (the coming backward's rows of those tensors, an
  // entry per tensor of the bucket) are the rows that may be nonzero. Inside a capture every row counts.
  void zero_bucket(floatX* grads, int bucket, const std::vector<RowSparseGrad>& written, cudaStream_t stream);
  // Rows a later micro-step's backward adds to bucket `bucket` (`written`, as for zero_bucket); inside a
  // capture every row.
  void add_bucket(int bucket, const std::vector<RowSparseGrad>& written, cudaStream_t stream);
  // Rows written besides the backward's (an optimizer adding its saved gradients): the next zeroing takes them
  // too. Sorted and distinct.
  void add(int tensor, const std::vector<int>& rows);
  void add_all(int tensor);
  void add_all();
  // The rows of `tensor` that may be nonzero; `*all` tells whether every row may be.
  const std::vector<int>& written(int tensor, bool* all) const;

 private:
  struct Written {
    int tensor = -1, slot = -1;  // slot: its list's in upload_
    bool all = true;
    std::vector<int> rows;
  };
  Written& entry(int tensor);
  std::vector<Written*> in_bucket(int bucket);  // in buffer order
  const std::vector<int>& rows_given(const std::vector<RowSparseGrad>& written, int tensor) const;
  const Written& entry(int tensor) const;

  const ParamLayout& layout_;
  std::vector<Written> written_;
  IntListUpload upload_;
};

}  // namespace llmc
