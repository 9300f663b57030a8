// RowSparseZeroing (llmc/family/row_sparse_zeroing.h) on a two-bucket layout whose first bucket holds two tables
// ([10, 8] and [6, 8]) around a vector: the first zeroing takes the whole bucket; later ones the tables' rows
// written since (the backward's, and those added), the vector and the padding in full, and nothing else (rows
// nobody wrote keep a sentinel); inside a capture, everything, and every row counts as written after it. And
// IntListUpload (llmc/cuda/int_list_upload.h), which carries its lists: a slot's two buffers in turn.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/int_list_upload.h"
#include "llmc/family/row_sparse_zeroing.h"
#include "test/support/device_buffer.h"
#include "test/support/gpu_test.h"

namespace {

using namespace llmc;
using llmc::test::DeviceBuffer;

class RowSparseZeroingTest : public ::testing::Test {
 protected:
  static constexpr int kTableA = 0, kTableB = 2, kColumns = 8;
  void SetUp() override {
    LLMC_REQUIRE_GPU();
    layout_ = place_param_layout({{{"a", 0, -1, {10, kColumns}}, {"v", 0, -1, {5}}, {"b", 0, -1, {6, kColumns}}},
                                  {{"dense", 0, -1, {16}}}},
                                 1);
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    grads_ = std::make_unique<DeviceBuffer<floatX>>(layout_.total_size);
  }
  void TearDown() override {
    if (stream_ != nullptr) CUDA_REPORT(cudaStreamDestroy(stream_));
  }
  // Every element the sentinel 1 (a backward that wrote everywhere).
  void fill_ones() { grads_->upload_raw(std::vector<floatX>(layout_.total_size, from_float<floatX>(1.0f))); }
  std::vector<float> download() {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::vector<float> out;
    for (floatX x : grads_->download_raw()) out.push_back(to_float(x));
    return out;
  }
  // Bucket 0 after a zeroing of `zeroed_a` and `zeroed_b` rows (-1: all) with the rest of the layout at 1.
  std::vector<float> expected(const std::vector<int>& zeroed_a, const std::vector<int>& zeroed_b) const {
    std::vector<float> want(layout_.total_size, 1.0f);
    const ParamBucket& b = layout_.buckets[0];
    std::fill_n(want.begin() + b.offset, b.padded_size, 0.0f);
    for (const auto& [tensor, zeroed] : {std::pair{kTableA, &zeroed_a}, std::pair{kTableB, &zeroed_b}}) {
      const TensorView& view = layout_.tensors[tensor];
      if (!zeroed->empty() && zeroed->front() == -1) continue;
      std::fill_n(want.begin() + view.offset, view.numel, 1.0f);
      for (int row : *zeroed) std::fill_n(want.begin() + view.offset + row * kColumns, kColumns, 0.0f);
    }
    return want;
  }
  std::vector<RowSparseGrad> rows(std::vector<int> a, std::vector<int> b) const { return {{kTableA, a}, {kTableB, b}}; }

  ParamLayout layout_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<DeviceBuffer<floatX>> grads_;
};

TEST_F(RowSparseZeroingTest, ZeroesTheRowsWrittenSinceAndTheRestOfTheBucket) {
  RowSparseZeroing zeroing(layout_, {kTableA, kTableB});
  fill_ones();
  zeroing.zero_bucket(grads_->get(), 0, rows({1, 4}, {0}), stream_);
  EXPECT_EQ(download(), expected({-1}, {-1})) << "the first zeroing takes every row";
  fill_ones();
  zeroing.zero_bucket(grads_->get(), 0, rows({2}, {5}), stream_);
  EXPECT_EQ(download(), expected({1, 4}, {0})) << "the last backward's rows";
  zeroing.add(kTableA, {7, 9});
  fill_ones();
  zeroing.zero_bucket(grads_->get(), 0, rows({3}, {}), stream_);
  EXPECT_EQ(download(), expected({2, 7, 9}, {5})) << "with the rows added";
  zeroing.add_bucket(0, rows({0}, {1}), stream_);
  zeroing.add_all(kTableB);
  fill_ones();
  zeroing.zero_bucket(grads_->get(), 0, rows({}, {}), stream_);
  EXPECT_EQ(download(), expected({0, 3}, {-1})) << "with a micro-step's rows and every row of b";
  bool all = true;
  EXPECT_TRUE(zeroing.written(kTableA, &all).empty());
  EXPECT_FALSE(all);
}

TEST_F(RowSparseZeroingTest, OtherBucketsGoInFullAndMissingRowsAreRefused) {
  RowSparseZeroing zeroing(layout_, {kTableA, kTableB});
  fill_ones();
  zeroing.zero_bucket(grads_->get(), 1, {}, stream_);
  std::vector<float> want(layout_.total_size, 1.0f);
  std::fill_n(want.begin() + layout_.buckets[1].offset, layout_.buckets[1].padded_size, 0.0f);
  EXPECT_EQ(download(), want);
  EXPECT_THROW(zeroing.zero_bucket(grads_->get(), 0, {{kTableA, {1}}}, stream_), std::invalid_argument);
  EXPECT_EQ(download(), want) << "nothing enqueued before the refusal";
  EXPECT_THROW({ RowSparseZeroing vector_table(layout_, {1}); }, std::invalid_argument) << "a vector is no table";
}

TEST_F(RowSparseZeroingTest, ACaptureZeroesEverythingAndLeavesEveryRowWritten) {
  RowSparseZeroing zeroing(layout_, {kTableA, kTableB});
  zeroing.zero_bucket(grads_->get(), 0, rows({1}, {2}), stream_);
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal));
  zeroing.zero_bucket(grads_->get(), 0, rows({1}, {2}), stream_);
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  fill_ones();
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, stream_));
  EXPECT_EQ(download(), expected({-1}, {-1}));
  bool all = false;
  zeroing.written(kTableB, &all);
  EXPECT_TRUE(all);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
}

TEST(IntListUpload, SlotsAlternateTheirTwoBuffersAndKeepTheirCapacity) {
  LLMC_REQUIRE_GPU();
  IntListUpload upload({4, 3}, "the test's lists");
  const std::vector<int> first{7, 1, 5}, second{2, 9}, other{4, 4, 4};
  const int* a = upload.upload(0, first, nullptr);
  const int* b = upload.upload(0, second, nullptr);
  const int* c = upload.upload(1, other, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto read = [](const int* device, size_t count) {
    std::vector<int> host(count);
    CUDA_CHECK(cudaMemcpy(host.data(), device, count * sizeof(int), cudaMemcpyDeviceToHost));
    return host;
  };
  EXPECT_NE(a, b);
  EXPECT_EQ(read(a, 3), first) << "the slot's other buffer took the second list";
  EXPECT_EQ(read(b, 2), second);
  EXPECT_EQ(read(c, 3), other);
  EXPECT_EQ(upload.upload(0, {3}, nullptr), a) << "the third upload reuses the first buffer";
  EXPECT_THROW(upload.upload(1, {1, 2, 3, 4}, nullptr), std::length_error);
  EXPECT_THROW(upload.upload(2, {1}, nullptr), std::out_of_range);
}

}  // namespace
