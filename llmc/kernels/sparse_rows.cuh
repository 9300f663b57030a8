// Kernels over the listed rows of a table: the sparse row exchange's two (llmc/optim/sparse_row_exchange.h):
// gather_rows packs a table's listed rows for sending; sum_rows_avg writes an owner's shard from the rows it
// received, each element the sum of its contributions in rank order in fp32 divided by the world size and
// rounded once, as the emulated reduce-scatter computes the mean (a row nobody sent stays as the caller zeroed
// it). And the row-sparse gradients' bookkeeping (zero_rows, copy_rows, add_rows_and_clear): the rows a step
// touched instead of whole embedding tables.
#pragma once

#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/kernels/mutant.h"

namespace llmc {

inline constexpr int kSparseRowThreads = 256;

// out[i] = table[rows[i]], rows of row_elements. Grid (count).
template <typename T>
__global__ void gather_rows_kernel(T* out, const T* table, const int* rows, int row_elements) {
  const T* source = table + static_cast<size_t>(rows[blockIdx.x]) * row_elements;
  T* target = out + static_cast<size_t>(blockIdx.x) * row_elements;
  for (int c = threadIdx.x; c < row_elements; c += blockDim.x) target[c] = source[c];
}

template <typename T>
void gather_rows(T* out, const T* table, const int* rows_device, int count, int row_elements, cudaStream_t stream) {
  if (count < 0 || row_elements <= 0)
    throw std::invalid_argument("gather_rows: " + std::to_string(count) + " rows of " + std::to_string(row_elements));
  if (count == 0) return;
  const double bytes = 2.0 * count * row_elements * sizeof(T) + count * sizeof(int);
  LLMC_LAUNCH_COSTED((KernelCost{bytes, 0.0}), gather_rows_kernel<T>, dim3(static_cast<unsigned>(count)),
                     dim3(kSparseRowThreads), 0, stream, out, table, rows_device, row_elements);
}

// Where an owner's sum goes: its shard of the bucket, and the table's first element relative to the shard's
// (negative when the table starts in an earlier shard).
template <typename T>
struct SparseRowShard {
  T* shard = nullptr;
  long long table_at = 0;
  long long shard_size = 0;
};

// For out_rows[i] and each column whose element lies in the shard: the sum of received[slots[k]] over
// k in [slot_begin[i], slot_begin[i + 1]), in that order, in fp32, divided by `ranks`. Grid (count).
template <typename T>
__global__ void sum_rows_avg_kernel(SparseRowShard<T> out, const T* received, const int* out_rows,
                                    const int* slot_begin, const int* slots, int row_elements, float ranks) {
  const long long row_at = out.table_at + static_cast<long long>(out_rows[blockIdx.x]) * row_elements;
  const int first = slot_begin[blockIdx.x];
  const int end = LLMC_MUTANT("sparse_rows.first_sender_only", slot_begin[blockIdx.x + 1], first + 1);
  for (int c = threadIdx.x; c < row_elements; c += blockDim.x) {
    const long long at = row_at + c;
    if (at < 0 || at >= out.shard_size) continue;  // a boundary row: its other part is another rank's
    float sum = 0.0f;
    for (int k = first; k < end; k++) sum += to_float(received[static_cast<size_t>(slots[k]) * row_elements + c]);
    out.shard[at] = from_float<T>(sum / ranks);
  }
}

template <typename T>
void sum_rows_avg(SparseRowShard<T> out, const T* received, const int* out_rows, const int* slot_begin,
                  const int* slots, int count, int contributions, int row_elements, int ranks, cudaStream_t stream) {
  if (count < 0 || row_elements <= 0 || ranks < 1)
    throw std::invalid_argument("sum_rows_avg: " + std::to_string(count) + " rows of " + std::to_string(row_elements) +
                                " over " + std::to_string(ranks) + " ranks");
  if (count == 0) return;
  const double bytes = (static_cast<double>(contributions) + count) * row_elements * sizeof(T);
  LLMC_LAUNCH_COSTED((KernelCost{bytes, static_cast<double>(contributions) * row_elements}), sum_rows_avg_kernel<T>,
                     dim3(static_cast<unsigned>(count)), dim3(kSparseRowThreads), 0, stream, out, received, out_rows,
                     slot_begin, slots, row_elements, static_cast<float>(ranks));
}

// The row-sparse gradients' three passes, each over rows[0, count) of [rows, row_elements] tables; the rows
// distinct (a row listed twice would be added twice). Grid (count).
template <typename T>
__global__ void zero_rows_kernel(T* table, const int* rows, int row_elements) {
  T* row = table + static_cast<size_t>(rows[blockIdx.x]) * row_elements;
  for (int c = threadIdx.x; c < row_elements; c += blockDim.x) row[c] = from_float<T>(0.0f);
}

template <typename T>
__global__ void copy_rows_kernel(T* out, const T* table, const int* rows, int row_elements) {
  const size_t at = static_cast<size_t>(rows[blockIdx.x]) * row_elements;
  for (int c = threadIdx.x; c < row_elements; c += blockDim.x) out[at + c] = table[at + c];
}

template <typename T>
__global__ void add_rows_and_clear_kernel(T* table, T* addend, const int* rows, int row_elements) {
  const size_t at = static_cast<size_t>(rows[blockIdx.x]) * row_elements;
  for (int c = threadIdx.x; c < row_elements; c += blockDim.x) {
    table[at + c] = from_float<T>(to_float(table[at + c]) + to_float(addend[at + c]));
    addend[at + c] = from_float<T>(LLMC_MUTANT("sparse_rows.clear_keeps_addend", 0.0f, to_float(addend[at + c])));
  }
}

inline void check_row_list(const char* what, int count, int row_elements) {
  if (count < 0 || row_elements <= 0)
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(count) + " rows of " +
                                std::to_string(row_elements));
}

// table[rows[i]] = 0.
template <typename T>
void zero_rows(T* table, const int* rows_device, int count, int row_elements, cudaStream_t stream) {
  check_row_list("zero_rows", count, row_elements);
  if (count == 0) return;
  const double bytes = static_cast<double>(count) * (row_elements * sizeof(T) + sizeof(int));
  LLMC_LAUNCH_COSTED((KernelCost{bytes, 0.0}), zero_rows_kernel<T>, dim3(static_cast<unsigned>(count)),
                     dim3(kSparseRowThreads), 0, stream, table, rows_device, row_elements);
}

// out[rows[i]] = table[rows[i]] (two tables of one shape).
template <typename T>
void copy_rows(T* out, const T* table, const int* rows_device, int count, int row_elements, cudaStream_t stream) {
  check_row_list("copy_rows", count, row_elements);
  if (count == 0) return;
  const double bytes = static_cast<double>(count) * (2.0 * row_elements * sizeof(T) + sizeof(int));
  LLMC_LAUNCH_COSTED((KernelCost{bytes, 0.0}), copy_rows_kernel<T>, dim3(static_cast<unsigned>(count)),
                     dim3(kSparseRowThreads), 0, stream, out, table, rows_device, row_elements);
}

// table[rows[i]] = T(table[rows[i]] + addend[rows[i]]) rounded once, as add_into (llmc/kernels/convert.cuh); then
// addend[rows[i]] = 0: the sharded Adam's saved gradients added in and the saved buffer left zero.
template <typename T>
void add_rows_and_clear(T* table, T* addend, const int* rows_device, int count, int row_elements,
                        cudaStream_t stream) {
  check_row_list("add_rows_and_clear", count, row_elements);
  if (count == 0) return;
  const double bytes = static_cast<double>(count) * (4.0 * row_elements * sizeof(T) + sizeof(int));
  LLMC_LAUNCH_COSTED((KernelCost{bytes, static_cast<double>(count) * row_elements}), add_rows_and_clear_kernel<T>,
                     dim3(static_cast<unsigned>(count)), dim3(kSparseRowThreads), 0, stream, table, addend,
                     rows_device, row_elements);
}

}  // namespace llmc
