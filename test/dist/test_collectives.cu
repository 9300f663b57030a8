// Multi-rank tests of CommContext and of the NCCL calls behind it (NCCL over MPI in the emulated
// build; real NCCL on a GPU): reduce-scatter (avg), all-gather, all-reduce, reduce, broadcast and grouped
// sends and receives in fp32 and bf16, in and out of place, against values each rank computes independently in double
// precision from the known per-rank inputs; argument errors; host-side reductions; and the stream
// choreography: a collective on the comm stream runs while the compute stream is busy, and an
// event wait orders a consumer after the collective. Run under mpirun -np 1, 2 and 4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/dist/comm.h"
#include "test/dist/comm_test_context.h"
#include "test/support/captured_graph.h"
#include "test/support/device_buffer.h"
#include "test/support/gpu_test.h"
#include "test/support/stream_gate.h"

namespace {

using llmc::CommContext;
using llmc::test::comm_context;
using llmc::test::DeviceBuffer;
using llmc::test::CapturedGraph;

// A per-rank element count that is a multiple of nothing in particular (prime).
constexpr size_t kShard = 1009;

// fp32 inputs: multiples of 1/4 of magnitude < 64, so every partial sum over <= 8 ranks is exact
// in fp32 and the double-precision expectation is the exact answer.
float fp32_input(int rank, size_t i) {
  return 0.25f * static_cast<float>(static_cast<int>((i * 7 + rank * 13) % 101) - 50) + static_cast<float>(rank);
}

// bf16 inputs with 8 significant bits: (1 + k/128) * 2^e, k in [0, 128), e in {0, 1, 2}. Sums
// over ranks need more bits than bf16 has, so rounding once differs from rounding per step.
float bf16_input(int rank, size_t i) {
  const int k = static_cast<int>((i * 37 + rank * 53) % 128);
  const int e = static_cast<int>((i + rank) % 3);
  return std::ldexp(1.0f + k / 128.0f, e);
}

float round_to_bf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& values) {
  std::vector<__nv_bfloat16> result(values.size());
  for (size_t i = 0; i < values.size(); ++i) result[i] = __float2bfloat16(values[i]);
  return result;
}

// One bf16 unit in the last place at |x| (8 significant bits).
double bf16_ulp(double x) {
  int exponent = 0;
  std::frexp(x == 0.0 ? 1.0 : x, &exponent);
  return std::ldexp(1.0, exponent - 8);
}

// The exact sum over ranks of input(rank, index), in double (exact for the patterns above).
template <class Input>
double exact_sum(Input input, int world, size_t index) {
  double sum = 0.0;
  for (int r = 0; r < world; ++r) sum += input(r, index);
  return sum;
}

// Full send buffer of `rank` for a reduce-scatter: world * kShard elements.
template <class Input>
std::vector<float> full_input(Input input, int rank, int world) {
  std::vector<float> values(kShard * static_cast<size_t>(world));
  for (size_t i = 0; i < values.size(); ++i) values[i] = input(rank, i);
  return values;
}

TEST(CommContext, RanksAndStreamAreConsistent) {
  CommContext& comm = comm_context();
  EXPECT_GE(comm.rank(), 0);
  EXPECT_LT(comm.rank(), comm.world_size());
  EXPECT_GE(comm.local_rank(), 0);
  EXPECT_LT(comm.local_rank(), comm.local_size());
  EXPECT_LE(comm.local_size(), comm.world_size());
  // The launcher's own view of the job, when launched by OpenMPI's mpirun.
  if (const char* size = std::getenv("OMPI_COMM_WORLD_SIZE")) {
    EXPECT_EQ(comm.world_size(), std::atoi(size));
  }
  if (const char* rank = std::getenv("OMPI_COMM_WORLD_RANK")) {
    EXPECT_EQ(comm.rank(), std::atoi(rank));
  }
  if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) {
    EXPECT_EQ(comm.local_rank(), std::atoi(local));
  }
  int least = 0, greatest = 0, priority = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CUDA_CHECK(cudaStreamGetPriority(comm.comm_stream(), &priority));
  EXPECT_EQ(priority, greatest);
  int count = 0, user_rank = -1;
  NCCL_CHECK(ncclCommCount(comm.nccl(), &count));
  NCCL_CHECK(ncclCommUserRank(comm.nccl(), &user_rank));
  EXPECT_EQ(count, comm.world_size());
  EXPECT_EQ(user_rank, comm.rank());
}

TEST(CommContext, HostReductions) {
  CommContext& comm = comm_context();
  const int world = comm.world_size();
  EXPECT_EQ(comm.all_reduce_sum(comm.rank() + 1.0), world * (world + 1) / 2.0);
  EXPECT_DOUBLE_EQ(comm.all_reduce_mean(comm.rank() + 1.0), (world + 1) / 2.0);
  EXPECT_EQ(comm.all_reduce_max(-1.0 * comm.rank()), 0.0);
  double values[3] = {1.0, static_cast<double>(comm.rank()), 0.5};
  comm.all_reduce_sum(values, 3);
  EXPECT_EQ(values[0], world);
  EXPECT_EQ(values[1], world * (world - 1) / 2.0);
  EXPECT_EQ(values[2], 0.5 * world);
  EXPECT_TRUE(comm.any_rank(comm.rank() == world - 1));
  EXPECT_FALSE(comm.any_rank(false));
  comm.barrier();
}

// fp32 reduce-scatter (avg): out of place, then in place on the same data.
TEST(Collectives, ReduceScatterAvgFp32) {
  CommContext& comm = comm_context();
  const int world = comm.world_size(), rank = comm.rank();
  const std::vector<float> send_host = full_input(fp32_input, rank, world);
  std::vector<float> expected(kShard);
  for (size_t i = 0; i < kShard; ++i) {
    // The exact sum is an fp32 number; the mean is its fp32 division (exact for a power-of-two world).
    expected[i] = static_cast<float>(exact_sum(fp32_input, world, rank * kShard + i)) / static_cast<float>(world);
  }
  DeviceBuffer<float> send(send_host), recv(kShard);
  comm.reduce_scatter_avg(send.get(), recv.get(), kShard, comm.comm_stream());
  CUDA_CHECK(cudaStreamSynchronize(comm.comm_stream()));
  const std::vector<float> out_of_place = recv.download_raw();

  comm.reduce_scatter_avg(send.get(), send.get() + rank * kShard, kShard, comm.comm_stream());
  CUDA_CHECK(cudaStreamSynchronize(comm.comm_stream()));
  const std::vector<float> in_place = send.download_raw();
  for (size_t i = 0; i < kShard; ++i) {
    // Exact here; real NCCL may premultiply by 1/world instead, which differs by at most an ulp.
    const float tolerance = LLMC_IS_EMULATION ? 0.0f : std::abs(expected[i]) * 2.4e-7f;
    ASSERT_NEAR(out_of_place[i], expected[i], tolerance) << "element " << i;
    ASSERT_NEAR(in_place[rank * kShard + i], expected[i], tolerance) << "element " << i;
  }
  // The emulation's in-place call writes only this rank's part (NCCL documents no more).
  if (LLMC_IS_EMULATION) {
    for (size_t i = 0; i < send_host.size(); ++i) {
      if (i / kShard != static_cast<size_t>(rank)) {
        ASSERT_EQ(in_place[i], send_host[i]) << "element " << i;
      }
    }
  }
}

// bf16 reduce-scatter (avg): the fp32 sum of exact bf16 inputs, divided, rounded to bf16 once.
TEST(Collectives, ReduceScatterAvgBf16RoundsOnce) {
  CommContext& comm = comm_context();
  const int world = comm.world_size(), rank = comm.rank();
  const std::vector<__nv_bfloat16> send_host = to_bf16(full_input(bf16_input, rank, world));
  std::vector<float> expected(kShard);
  size_t differs_from_stepwise_rounding = 0;
  for (size_t i = 0; i < kShard; ++i) {
    const size_t index = rank * kShard + i;
    const double sum = exact_sum(bf16_input, world, index);  // exact in fp32 too (<= 12 bits)
    expected[i] = round_to_bf16(static_cast<float>(sum) / static_cast<float>(world));
    float stepwise = bf16_input(0, index);
    for (int r = 1; r < world; ++r) stepwise = round_to_bf16(stepwise + bf16_input(r, index));
    if (round_to_bf16(stepwise / static_cast<float>(world)) != expected[i]) ++differs_from_stepwise_rounding;
  }
  // Self-check: with 3+ ranks the pattern distinguishes rounding once from rounding per step.
  if (world >= 3) {
    EXPECT_GT(differs_from_stepwise_rounding, 0u);
  }

  DeviceBuffer<__nv_bfloat16> send(send_host), recv(kShard);
  comm.reduce_scatter_avg(send.get(), recv.get(), kShard, comm.comm_stream());
  comm.reduce_scatter_avg(send.get(), send.get() + rank * kShard, kShard, comm.comm_stream());
  CUDA_CHECK(cudaStreamSynchronize(comm.comm_stream()));
  const std::vector<__nv_bfloat16> out_of_place = recv.download_raw();
  const std::vector<__nv_bfloat16> in_place = send.download_raw();
  for (size_t i = 0; i < kShard; ++i) {
    // Real NCCL moves bf16 partial sums between ranks: up to one rounding per hop.
    const double tolerance = LLMC_IS_EMULATION ? 0.0 : (world - 1) * bf16_ulp(expected[i]);
    ASSERT_NEAR(__bfloat162float(out_of_place[i]), expected[i], tolerance) << "element " << i;
    ASSERT_NEAR(__bfloat162float(in_place[rank * kShard + i]), expected[i], tolerance) << "element " << i;
  }
}

TEST(Collectives, AllGatherFp32AndBf16InAndOutOfPlace) {
  CommContext& comm = comm_context();
  const int world = comm.world_size(), rank = comm.rank();
  const size_t total = kShard * static_cast<size_t>(world);
  std::vector<float> mine(kShard), expected(total);
  for (size_t i = 0; i < kShard; ++i) mine[i] = fp32_input(rank, i);
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < kShard; ++i) expected[r * kShard + i] = fp32_input(r, i);
  }
  DeviceBuffer<float> send(mine), gathered(total);
  comm.all_gather(send.get(), gathered.get(), kShard, comm.comm_stream());
  // In place: this rank's part already sits in its slot; the other slots hold garbage (-1).
  std::vector<float> in_place_host(total, -1.0f);
  std::copy(mine.begin(), mine.end(), in_place_host.begin() + rank * kShard);
  DeviceBuffer<float> in_place(in_place_host);
  comm.all_gather(in_place.get() + rank * kShard, in_place.get(), kShard, comm.comm_stream());

  DeviceBuffer<__nv_bfloat16> send_bf16(to_bf16(mine)), gathered_bf16(total);
  comm.all_gather(send_bf16.get(), gathered_bf16.get(), kShard, comm.comm_stream());
  CUDA_CHECK(cudaStreamSynchronize(comm.comm_stream()));

  EXPECT_EQ(gathered.download_raw(), expected);
  EXPECT_EQ(in_place.download_raw(), expected);
  const std::vector<__nv_bfloat16> got_bf16 = gathered_bf16.download_raw();
  for (size_t i = 0; i < total; ++i) {
    ASSERT_EQ(__bfloat162float(got_bf16[i]), round_to_bf16(expected[i])) << "element " << i;
  }
}

TEST(Collectives, AllReduceSumAndBroadcast) {
  CommContext& comm = comm_context();
  const int world = comm.world_size(), rank = comm.rank();
  const size_t count = 3001;
  std::vector<float> mine(count), expected(count);
  for (size_t i = 0; i < count; ++i) {
    mine[i] = fp32_input(rank, i);
    expected[i] = static_cast<float>(exact_sum(fp32_input, world, i));
  }
  DeviceBuffer<float> data(mine);
  comm.all_reduce_sum_float(data.get(), count, comm.comm_stream());
  CUDA_CHECK(cudaStreamSynchronize(comm.comm_stream()));
  EXPECT_EQ(data.download_raw(), expected);

  std::vector<float> rank0(count);
  for (size_t i = 0; i < count; ++i) rank0[i] = fp32_input(0, i);
  DeviceBuffer<float> broadcast(mine);
  comm.broadcast_from_rank0(broadcast.get(), count, comm.comm_stream());
  DeviceBuffer<__nv_bfloat16> broadcast_bf16(to_bf16(mine));
  comm.broadcast_from_rank0(broadcast_bf16.get(), count, comm.comm_stream());
  CUDA_CHECK(cudaStreamSynchronize(comm.comm_stream()));
  EXPECT_EQ(broadcast.download_raw(), rank0);
  const std::vector<__nv_bfloat16> got_bf16 = broadcast_bf16.download_raw();
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(__bfloat162float(got_bf16[i]), round_to_bf16(rank0[i]));
}

// Reduce (avg) in place to each root in turn: the root gets the mean (fp32 exact; bf16 rounded once), every
// other rank keeps its own values (NCCL writes recvbuff on the root only).
TEST(Collectives, ReduceAvgToEachRootInPlace) {
  CommContext& comm = comm_context();
  const int world = comm.world_size(), rank = comm.rank();
  const size_t count = 2003;
  std::vector<float> mine(count), mine_bf16_values(count);
  for (size_t i = 0; i < count; ++i) {
    mine[i] = fp32_input(rank, i);
    mine_bf16_values[i] = bf16_input(rank, i);
  }
  for (int root = 0; root < world; ++root) {
    DeviceBuffer<float> data(mine);
    DeviceBuffer<__nv_bfloat16> data_bf16(to_bf16(mine_bf16_values));
    comm.reduce_avg(data.get(), count, root, comm.comm_stream());
    comm.reduce_avg(data_bf16.get(), count, root, comm.comm_stream());
    CUDA_CHECK(cudaStreamSynchronize(comm.comm_stream()));
    const std::vector<float> got = data.download_raw();
    const std::vector<__nv_bfloat16> got_bf16 = data_bf16.download_raw();
    for (size_t i = 0; i < count; ++i) {
      if (rank != root) {
        ASSERT_EQ(got[i], mine[i]) << "root " << root << ", element " << i;
        ASSERT_EQ(__bfloat162float(got_bf16[i]), mine_bf16_values[i]) << "root " << root << ", element " << i;
        continue;
      }
      const float expected = static_cast<float>(exact_sum(fp32_input, world, i)) / static_cast<float>(world);
      const float expected_bf16 =
          round_to_bf16(static_cast<float>(exact_sum(bf16_input, world, i)) / static_cast<float>(world));
      // Exact in the emulation; real NCCL may premultiply (an ulp) and round bf16 partial sums per hop.
      const double tolerance = LLMC_IS_EMULATION ? 0.0 : std::abs(expected) * 2.4e-7;
      const double tolerance_bf16 = LLMC_IS_EMULATION ? 0.0 : (world - 1) * bf16_ulp(expected_bf16);
      ASSERT_NEAR(got[i], expected, tolerance) << "root " << root << ", element " << i;
      ASSERT_NEAR(__bfloat162float(got_bf16[i]), expected_bf16, tolerance_bf16) << "root " << root << ", element " << i;
    }
  }
}

// Raw NCCL calls the wrappers do not cover: max and int32 sum, with ncclGroupStart/End.
TEST(Collectives, MaxAndInt32Sum) {
  CommContext& comm = comm_context();
  const int world = comm.world_size(), rank = comm.rank();
  const size_t count = 517;
  std::vector<float> values(count), expected_max(count);
  std::vector<int32_t> ints(count * world), expected_sum(count);
  for (size_t i = 0; i < count; ++i) {
    values[i] = fp32_input(rank, i);
    expected_max[i] = fp32_input(0, i);
    for (int r = 1; r < world; ++r) expected_max[i] = std::max(expected_max[i], fp32_input(r, i));
  }
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<int32_t>(i * 3) - 1000 * rank;
  for (size_t i = 0; i < count; ++i) {
    int64_t sum = 0;
    for (int r = 0; r < world; ++r) sum += static_cast<int64_t>((rank * count + i) * 3) - 1000 * r;
    expected_sum[i] = static_cast<int32_t>(sum);
  }
  DeviceBuffer<float> max_data(values), max_out(count);
  DeviceBuffer<int32_t> int_data(ints), int_out(count);
  NCCL_CHECK(ncclGroupStart());
  NCCL_CHECK(ncclAllReduce(max_data.get(), max_out.get(), count, ncclFloat32, ncclMax, comm.nccl(), comm.comm_stream()));
  NCCL_CHECK(ncclReduceScatter(int_data.get(), int_out.get(), count, ncclInt32, ncclSum, comm.nccl(), comm.comm_stream()));
  NCCL_CHECK(ncclGroupEnd());
  CUDA_CHECK(cudaStreamSynchronize(comm.comm_stream()));
  EXPECT_EQ(max_out.download_raw(), expected_max);
  EXPECT_EQ(int_out.download_raw(), expected_sum);
}

// NCCL launches a group's collectives at ncclGroupEnd: an event recorded on the stream between a grouped call
// and ncclGroupEnd completes before the collective, which has not touched the data yet (the emulation
// defers the calls as NCCL does, so that a wait placed inside a group fails here as on a GPU).
TEST(Collectives, GroupedCallsStartAtGroupEnd) {
  CommContext& comm = comm_context();
  const int world = comm.world_size(), rank = comm.rank();
  const size_t count = 257;
  std::vector<float> mine(count), expected(count);
  for (size_t i = 0; i < count; ++i) {
    mine[i] = fp32_input(rank, i);
    expected[i] = static_cast<float>(exact_sum(fp32_input, world, i));
  }
  DeviceBuffer<float> data(mine);
  cudaEvent_t inside_group;
  CUDA_CHECK(cudaEventCreateWithFlags(&inside_group, cudaEventDisableTiming));
  NCCL_CHECK(ncclGroupStart());
  NCCL_CHECK(ncclAllReduce(data.get(), data.get(), count, ncclFloat32, ncclSum, comm.nccl(), comm.comm_stream()));
  CUDA_CHECK(cudaEventRecord(inside_group, comm.comm_stream()));
  CUDA_CHECK(cudaEventSynchronize(inside_group));  // done: nothing is ahead of it on the stream
  EXPECT_EQ(data.download_raw(), mine);
  NCCL_CHECK(ncclGroupEnd());
  CUDA_CHECK(cudaStreamSynchronize(comm.comm_stream()));
  EXPECT_EQ(data.download_raw(), expected);
  CUDA_CHECK(cudaEventDestroy(inside_group));
}

// An all-to-all of variable sizes from grouped sends and receives: rank r sends count(r, p) values to every
// rank p, itself included, all its sends posted before its receives (without the group that order waits for
// ever once messages are large: each send would wait for a receive its peer has not posted). Between ranks the
// counts are 24,576 values and more, past MPI's and NCCL's small-message protocols. Values are exact in bf16 and fp32.
TEST(Collectives, GroupedSendsAndReceivesAreAnAllToAll) {
  CommContext& comm = comm_context();
  const int world = comm.world_size(), rank = comm.rank();
  auto count = [](int from, int to) { return static_cast<size_t>(3 + 5 * from + 7 * to) << (from == to ? 4 : 13); };
  auto value = [](int from, int to, size_t i) { return std::ldexp(bf16_input(from, i), to); };
  std::vector<std::unique_ptr<DeviceBuffer<__nv_bfloat16>>> sent, received;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> sent32, received32;
  for (int peer = 0; peer < world; ++peer) {
    std::vector<float> values(count(rank, peer));
    for (size_t i = 0; i < values.size(); ++i) values[i] = value(rank, peer, i);
    sent.push_back(std::make_unique<DeviceBuffer<__nv_bfloat16>>(to_bf16(values)));
    sent32.push_back(std::make_unique<DeviceBuffer<float>>(values));
    received.push_back(std::make_unique<DeviceBuffer<__nv_bfloat16>>(count(peer, rank)));
    received32.push_back(std::make_unique<DeviceBuffer<float>>(count(peer, rank)));
  }
  comm.group_start();
  for (int peer = 0; peer < world; ++peer) {
    comm.send(sent[peer]->get(), count(rank, peer), peer, comm.comm_stream());
    comm.send(sent32[peer]->get(), count(rank, peer), peer, comm.comm_stream());
  }
  for (int peer = 0; peer < world; ++peer) {
    comm.recv(received[peer]->get(), count(peer, rank), peer, comm.comm_stream());
    comm.recv(received32[peer]->get(), count(peer, rank), peer, comm.comm_stream());
  }
  comm.group_end();
  CUDA_CHECK(cudaStreamSynchronize(comm.comm_stream()));
  for (int peer = 0; peer < world; ++peer) {
    const std::vector<__nv_bfloat16> got = received[peer]->download_raw();
    const std::vector<float> got32 = received32[peer]->download_raw();
    ASSERT_EQ(got.size(), count(peer, rank));
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(__bfloat162float(got[i]), value(peer, rank, i)) << "from rank " << peer << " at " << i;
      ASSERT_EQ(got32[i], value(peer, rank, i)) << "from rank " << peer << " at " << i;
    }
  }
}

// A collective captured into a CUDA graph runs at each launch, on the data the buffers hold then: two launches
// after two different inputs give the two sums.
TEST(Collectives, CapturedAllReduceRunsAtEveryLaunch) {
  CommContext& comm = comm_context();
  const int world = comm.world_size(), rank = comm.rank();
  constexpr size_t kCount = 4096;
  DeviceBuffer<float> data(kCount);
  cudaStream_t stream = comm.comm_stream();
  const CapturedGraph graph(stream, [&] { comm.all_reduce_sum_float(data.get(), kCount, stream); });
  for (int launch = 0; launch < 2; ++launch) {
    std::vector<float> mine(kCount);
    for (size_t i = 0; i < kCount; ++i) mine[i] = fp32_input(rank, i) * static_cast<float>(launch + 1);
    data.upload_raw(mine);
    graph.launch(stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<float> got = data.download_raw();
    for (size_t i = 0; i < kCount; ++i) {
      const double want = exact_sum(fp32_input, world, i) * (launch + 1);  // exact: small integers times 1 or 2
      ASSERT_EQ(got[i], static_cast<float>(want)) << "launch " << launch << ", element " << i;
    }
  }
}

// What real NCCL supports (fp16) or leaves undefined (bad overlap), the emulation refuses by name.
TEST(Collectives, EmulationRejectsWhatItCannotDoCorrectly) {
  if (!LLMC_IS_EMULATION) GTEST_SKIP() << "emulation-only behaviour";
  CommContext& comm = comm_context();
  const int world = comm.world_size(), rank = comm.rank();
  DeviceBuffer<float> buffer(4 * world + 4);
  EXPECT_EQ(ncclReduceScatter(buffer.get(), buffer.get() + 4 * world, 2, ncclFloat16, ncclSum, comm.nccl(),
                              comm.comm_stream()),
            ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm.nccl())).find("ncclFloat16"), std::string::npos)
      << ncclGetLastError(comm.nccl());
  EXPECT_EQ(ncclAllReduce(buffer.get(), buffer.get(), 4, ncclInt32, ncclAvg, comm.nccl(), comm.comm_stream()),
            ncclInvalidArgument);
  // Overlapping, but not the in-place layout (recv must be send + rank * count).
  EXPECT_EQ(ncclReduceScatter(buffer.get(), buffer.get() + rank * 4 + 1, 4, ncclFloat32, ncclSum, comm.nccl(),
                              comm.comm_stream()),
            ncclInvalidArgument);
  EXPECT_EQ(ncclReduce(buffer.get(), buffer.get(), 4, ncclFloat32, ncclAvg, world, comm.nccl(), comm.comm_stream()),
            ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm.nccl())).find("root"), std::string::npos)
      << ncclGetLastError(comm.nccl());
  EXPECT_EQ(ncclSend(buffer.get(), 4, ncclFloat32, world, comm.nccl(), comm.comm_stream()), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm.nccl())).find("peer"), std::string::npos)
      << ncclGetLastError(comm.nccl());
  // Host memory is not device memory.
  std::vector<float> host(4 * world);
  EXPECT_EQ(ncclRecv(host.data(), 4, ncclFloat32, rank, comm.nccl(), comm.comm_stream()), ncclInvalidArgument);
  EXPECT_EQ(ncclAllGather(host.data(), buffer.get(), 4, ncclFloat32, comm.nccl(), comm.comm_stream()),
            ncclInvalidArgument);
  // NCCL_CHECK turns it into an exception naming the call, the place and the reason.
  try {
    NCCL_CHECK(ncclAllReduce(buffer.get(), buffer.get(), 4, ncclFloat16, ncclMax, comm.nccl(), comm.comm_stream()));
    ADD_FAILURE() << "NCCL_CHECK did not throw";
  } catch (const llmc::CommError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("ncclAllReduce(buffer.get()"), std::string::npos) << message;
    EXPECT_NE(message.find("test_collectives.cu:"), std::string::npos) << message;
    EXPECT_NE(message.find("invalid argument"), std::string::npos) << message;
    EXPECT_NE(message.find("ncclFloat16"), std::string::npos) << message;
  }
}

using llmc::test::Gate;

float elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, from, to));
  return ms;
}

// The compute stream is held busy (by a gate only opened after the collective finished): the
// reduce-scatter on the comm stream must complete meanwhile, i.e. run concurrently with compute.
TEST(Streams, CollectiveRunsWhileComputeStreamIsBusy) {
  CommContext& comm = comm_context();
  const int world = comm.world_size(), rank = comm.rank();
  cudaStream_t compute;
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  cudaEvent_t compute_begin, compute_end, comm_begin, comm_end;
  for (cudaEvent_t* event : {&compute_begin, &compute_end, &comm_begin, &comm_end}) CUDA_CHECK(cudaEventCreate(event));
  DeviceBuffer<float> send(full_input(fp32_input, rank, world)), recv(kShard);
  Gate busy;

  CUDA_CHECK(cudaEventRecord(compute_begin, compute));
  CUDA_CHECK(cudaLaunchHostFunc(compute, Gate::wait_callback, &busy));  // the "long kernel"
  CUDA_CHECK(cudaEventRecord(compute_end, compute));
  CUDA_CHECK(cudaStreamWaitEvent(comm.comm_stream(), compute_begin, 0));  // comm starts after compute did
  CUDA_CHECK(cudaEventRecord(comm_begin, comm.comm_stream()));
  comm.reduce_scatter_avg(send.get(), recv.get(), kShard, comm.comm_stream());
  CUDA_CHECK(cudaEventRecord(comm_end, comm.comm_stream()));

  CUDA_CHECK(cudaEventSynchronize(comm_end));  // would hang if the collective waited for compute
  EXPECT_EQ(cudaEventQuery(compute_end), cudaErrorNotReady);
  busy.open();
  CUDA_CHECK(cudaStreamSynchronize(compute));
  // By timestamps: the collective lies inside the compute interval.
  EXPECT_GE(elapsed_ms(compute_begin, comm_begin), 0.0f);
  EXPECT_GT(elapsed_ms(comm_end, compute_end), 0.0f);
  const std::vector<float> got = recv.download_raw();
  for (size_t i = 0; i < kShard; ++i) {
    const float expected = static_cast<float>(exact_sum(fp32_input, world, rank * kShard + i)) / world;
    ASSERT_NEAR(got[i], expected, LLMC_IS_EMULATION ? 0.0f : std::abs(expected) * 2.4e-7f);
  }
  for (cudaEvent_t event : {compute_begin, compute_end, comm_begin, comm_end}) CUDA_CHECK(cudaEventDestroy(event));
  CUDA_CHECK(cudaStreamDestroy(compute));
}

// A consumer on the compute stream waits for the collective through an event: while the comm
// stream is held (before its collective), the consumer has not run; afterwards it sees the result.
TEST(Streams, EventWaitOrdersConsumerAfterCollective) {
  CommContext& comm = comm_context();
  const int world = comm.world_size(), rank = comm.rank();
  cudaStream_t compute;
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  cudaEvent_t reduced, consumed;
  CUDA_CHECK(cudaEventCreateWithFlags(&reduced, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&consumed, cudaEventDisableTiming));
  DeviceBuffer<float> send(full_input(fp32_input, rank, world));
  DeviceBuffer<float> recv(std::vector<float>(kShard, -7.0f));
  DeviceBuffer<float> consumer_copy(kShard);
  Gate hold_comm;

  CUDA_CHECK(cudaLaunchHostFunc(comm.comm_stream(), Gate::wait_callback, &hold_comm));
  comm.reduce_scatter_avg(send.get(), recv.get(), kShard, comm.comm_stream());
  CUDA_CHECK(cudaEventRecord(reduced, comm.comm_stream()));
  CUDA_CHECK(cudaStreamWaitEvent(compute, reduced, 0));
  CUDA_CHECK(cudaMemcpyAsync(consumer_copy.get(), recv.get(), kShard * sizeof(float), cudaMemcpyDeviceToDevice, compute));
  CUDA_CHECK(cudaEventRecord(consumed, compute));

  EXPECT_EQ(cudaEventQuery(consumed), cudaErrorNotReady);
  hold_comm.open();
  CUDA_CHECK(cudaStreamSynchronize(compute));
  const std::vector<float> got = consumer_copy.download_raw();
  for (size_t i = 0; i < kShard; ++i) {
    const float expected = static_cast<float>(exact_sum(fp32_input, world, rank * kShard + i)) / world;
    ASSERT_NEAR(got[i], expected, LLMC_IS_EMULATION ? 0.0f : std::abs(expected) * 2.4e-7f) << "element " << i;
  }
  CUDA_CHECK(cudaEventDestroy(reduced));
  CUDA_CHECK(cudaEventDestroy(consumed));
  CUDA_CHECK(cudaStreamDestroy(compute));
}

}  // namespace
