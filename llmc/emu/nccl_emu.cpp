// NCCL's C API for the emulated build, served by MPI. Each collective is checked when called, then
// enqueued on the issuing stream and executed by that stream's worker thread with MPI on a
// communicator private to the ncclComm, so it runs in stream order and concurrently with the
// other streams, as on a GPU. Declarations come from the real nccl.h; what is not defined here
// fails at link time, on purpose.
//
// Arithmetic: reductions of ncclFloat32 and ncclBfloat16 run in fp32 (MPI_FLOAT); bf16 inputs are
// widened exactly, and each result element is rounded to bf16 once, at the end. ncclAvg is the
// fp32 sum divided by the number of ranks. ncclInt32 supports sum, prod, max and min (not avg).
// Reduce writes the root's recvbuff only. All-gather, broadcast, send and recv move bytes, so every
// datatype works for them. The sends and receives of one group run together (NCCL's rule: a rank may
// send to and receive from its peers in any order inside a group); outside a group each one waits for its
// peer, as in NCCL. A receive must get exactly the count its peer sent.
//
// Test hook: LLMC_EMU_NCCL_DELAY_MS=<ms> (read once per communicator, at ncclCommInitRank) makes
// the stream worker sleep that long before each collective, so that a missing cross-stream wait
// on the collective's result shows up as a reliable race in the tests (test/train/test_multirank.py).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "llmc/emu/emulated_device.h"

// The opaque communicator handle declared by nccl.h.
struct ncclComm {
  MPI_Comm mpi_comm = MPI_COMM_NULL;  // private to this communicator: its traffic never mixes
  int rank = 0;
  int nranks = 0;
  std::mutex mutex;
  std::condition_variable changed;
  int pending = 0;  // collectives enqueued and not yet finished (destroy waits for them)
  int delay_ms = 0;  // LLMC_EMU_NCCL_DELAY_MS: sleep before each collective (a test hook)
};

namespace {

using llmc::emu::EmulatedDevice;
using llmc::emu::MemoryKind;

// One ncclSend or ncclRecv: bytes to or from `peer`.
struct PointToPoint {
  bool send = false;
  void* buffer = nullptr;
  size_t bytes = 0;
  int peer = 0;
};

// A call inside ncclGroupStart/End, held until the outermost ncclGroupEnd: a collective's work, or a send
// or receive (work empty), which the group end runs together with the others of its communicator and stream.
struct DeferredCall {
  const char* function;
  ncclComm* comm;
  cudaStream_t stream;
  std::function<void()> work;
  PointToPoint p2p;
};

// NCCL's last-error text, group nesting and a group's calls are per host thread, as in NCCL.
thread_local std::string last_error_text;
thread_local int group_depth = 0;
thread_local std::vector<DeferredCall> deferred_calls;

ncclResult_t fail(ncclResult_t code, const std::string& text) {
  last_error_text = text;
  return code;
}

const char* datatype_name(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: return "ncclInt8";
    case ncclUint8: return "ncclUint8";
    case ncclInt32: return "ncclInt32";
    case ncclUint32: return "ncclUint32";
    case ncclInt64: return "ncclInt64";
    case ncclUint64: return "ncclUint64";
    case ncclFloat16: return "ncclFloat16";
    case ncclFloat32: return "ncclFloat32";
    case ncclFloat64: return "ncclFloat64";
    case ncclBfloat16: return "ncclBfloat16";
    case ncclFloat8e4m3: return "ncclFloat8e4m3";
    case ncclFloat8e5m2: return "ncclFloat8e5m2";
    default: return "unknown datatype";
  }
}

const char* op_name(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return "ncclSum";
    case ncclProd: return "ncclProd";
    case ncclMax: return "ncclMax";
    case ncclMin: return "ncclMin";
    case ncclAvg: return "ncclAvg";
    default: return "a custom reduction op";
  }
}

// Bytes per element; 0 for an unknown datatype.
size_t datatype_size(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

// Checks a reduction's datatype and op; returns ncclSuccess or an error with the reason.
ncclResult_t check_reduction(const char* function, ncclDataType_t type, ncclRedOp_t op) {
  if (type != ncclFloat32 && type != ncclBfloat16 && type != ncclInt32) {
    return fail(ncclInvalidArgument, std::string(function) + ": datatype " + datatype_name(type) +
                                         " is not supported by the NCCL emulation (ncclFloat32, "
                                         "ncclBfloat16 and ncclInt32 are)");
  }
  if (op != ncclSum && op != ncclProd && op != ncclMax && op != ncclMin && op != ncclAvg) {
    return fail(ncclInvalidArgument, std::string(function) + ": " + op_name(op) +
                                         " is not supported by the NCCL emulation");
  }
  if (op == ncclAvg && type == ncclInt32) {
    return fail(ncclInvalidArgument, std::string(function) +
                                         ": ncclAvg on ncclInt32 is not supported by the NCCL emulation");
  }
  return ncclSuccess;
}

// A collective's buffer must lie inside one emulated device allocation, as NCCL needs device memory.
ncclResult_t check_device_buffer(const char* function, const char* which, const void* pointer,
                                 size_t bytes) {
  if (bytes == 0) return ncclSuccess;
  if (pointer == nullptr) return fail(ncclInvalidArgument, std::string(function) + ": " + which + " is NULL");
  MemoryKind kind;
  if (EmulatedDevice::instance().classify(pointer, bytes, &kind) != cudaSuccess) {
    return fail(ncclInvalidArgument, std::string(function) + ": " + which + " (" +
                                         std::to_string(bytes) + " bytes) runs past the end of its allocation");
  }
  if (kind != MemoryKind::kDevice) {
    return fail(ncclInvalidArgument, std::string(function) + ": " + which + " is not device memory");
  }
  return ncclSuccess;
}

bool ranges_overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

ncclResult_t check_comm(const char* function, ncclComm_t comm) {
  if (comm == nullptr) return fail(ncclInvalidArgument, std::string(function) + ": comm is NULL");
  return ncclSuccess;
}

// MPI takes int counts; the emulation does not split larger messages.
ncclResult_t check_mpi_count(const char* function, size_t count) {
  if (count > static_cast<size_t>(INT_MAX)) {
    return fail(ncclInvalidArgument, std::string(function) + ": count " + std::to_string(count) +
                                         " exceeds the NCCL emulation's limit (INT_MAX per rank)");
  }
  return ncclSuccess;
}

// The checks every reduction call starts with: the communicator, the datatype and op, the count.
ncclResult_t check_reduction_call(const char* function, ncclComm_t comm, ncclDataType_t type, ncclRedOp_t op,
                                  size_t count) {
  if (ncclResult_t r = check_comm(function, comm); r != ncclSuccess) return r;
  if (ncclResult_t r = check_reduction(function, type, op); r != ncclSuccess) return r;
  return check_mpi_count(function, count);
}

ncclResult_t check_root(const char* function, int root, const ncclComm* comm) {
  if (root < 0 || root >= comm->nranks) {
    return fail(ncclInvalidArgument, std::string(function) + ": root " + std::to_string(root) +
                                         " is not a rank of the communicator");
  }
  return ncclSuccess;
}

void mpi_or_throw(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  // Thrown on a stream worker: the emulation reports it and stops the process (mpirun then
  // stops the other ranks), as a GPU would turn it into a fatal asynchronous error.
  throw std::runtime_error(std::string("NCCL emulation: ") + call + " failed: " +
                           std::string(text, static_cast<size_t>(length)));
}

// Waits for a nonblocking MPI operation without spinning a whole core: ranks are oversubscribed
// on CI machines and the compute stream of this very rank needs the CPU.
void wait_politely(MPI_Request* request, const char* call) {
  for (int polls = 0;; ++polls) {
    int done = 0;
    mpi_or_throw(MPI_Test(request, &done, MPI_STATUS_IGNORE), call);
    if (done) return;
    if (polls < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

// Reductions run on "wide" elements: float for the floating types, int32 for ncclInt32.
template <class Wide>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <>
MPI_Datatype mpi_type<int32_t>() { return MPI_INT; }

MPI_Op mpi_op(ncclRedOp_t op) {
  switch (op) {
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
    default: return MPI_SUM;  // ncclSum, and ncclAvg before its division
  }
}

template <class Wide>
std::vector<Wide> widen(const void* source, size_t count, ncclDataType_t type) {
  std::vector<Wide> wide(count);
  if (type == ncclBfloat16) {
    const auto* bf16 = static_cast<const __nv_bfloat16*>(source);
    for (size_t i = 0; i < count; ++i) wide[i] = static_cast<Wide>(__bfloat162float(bf16[i]));
  } else {
    std::memcpy(wide.data(), source, count * sizeof(Wide));  // fp32 or int32: same width
  }
  return wide;
}

template <class Wide>
void narrow(std::vector<Wide>& wide, ncclRedOp_t op, int nranks, ncclDataType_t type, void* target) {
  if (op == ncclAvg) {
    for (Wide& x : wide) x /= static_cast<Wide>(nranks);
  }
  if (type == ncclBfloat16) {
    auto* bf16 = static_cast<__nv_bfloat16*>(target);
    for (size_t i = 0; i < wide.size(); ++i) bf16[i] = __float2bfloat16(static_cast<float>(wide[i]));
  } else {
    std::memcpy(target, wide.data(), wide.size() * sizeof(Wide));
  }
}

template <class Wide>
void run_reduce_scatter(const void* send, void* recv, size_t recv_count, ncclDataType_t type,
                        ncclRedOp_t op, ncclComm* comm) {
  // The whole input is read before any output is written, which makes in-place calls safe.
  std::vector<Wide> input = widen<Wide>(send, recv_count * static_cast<size_t>(comm->nranks), type);
  std::vector<Wide> output(recv_count);
  MPI_Request request;
  mpi_or_throw(MPI_Ireduce_scatter_block(input.data(), output.data(), static_cast<int>(recv_count),
                                         mpi_type<Wide>(), mpi_op(op), comm->mpi_comm, &request),
               "MPI_Ireduce_scatter_block");
  wait_politely(&request, "MPI_Ireduce_scatter_block");
  narrow(output, op, comm->nranks, type, recv);
}

template <class Wide>
void run_all_reduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                    ncclComm* comm) {
  std::vector<Wide> input = widen<Wide>(send, count, type);
  std::vector<Wide> output(count);
  MPI_Request request;
  mpi_or_throw(MPI_Iallreduce(input.data(), output.data(), static_cast<int>(count), mpi_type<Wide>(),
                              mpi_op(op), comm->mpi_comm, &request),
               "MPI_Iallreduce");
  wait_politely(&request, "MPI_Iallreduce");
  narrow(output, op, comm->nranks, type, recv);
}

// Only the root's recv is written; the other ranks' buffers stay as they were (NCCL writes recvbuff on
// the root alone), so a rank that reads a reduction it did not receive reads its own local values.
template <class Wide>
void run_reduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                ncclComm* comm) {
  std::vector<Wide> input = widen<Wide>(send, count, type);
  std::vector<Wide> output(comm->rank == root ? count : 0);
  MPI_Request request;
  mpi_or_throw(MPI_Ireduce(input.data(), output.data(), static_cast<int>(count), mpi_type<Wide>(), mpi_op(op), root,
                           comm->mpi_comm, &request),
               "MPI_Ireduce");
  wait_politely(&request, "MPI_Ireduce");
  if (comm->rank == root) narrow(output, op, comm->nranks, type, recv);
}

void run_all_gather(const void* send, void* recv, size_t send_bytes, ncclComm* comm) {
  const auto* send_bytes_begin = static_cast<const unsigned char*>(send);
  std::vector<unsigned char> input(send_bytes_begin, send_bytes_begin + send_bytes);
  std::vector<unsigned char> output(send_bytes * static_cast<size_t>(comm->nranks));
  MPI_Request request;
  mpi_or_throw(MPI_Iallgather(input.data(), static_cast<int>(send_bytes), MPI_BYTE, output.data(),
                              static_cast<int>(send_bytes), MPI_BYTE, comm->mpi_comm, &request),
               "MPI_Iallgather");
  wait_politely(&request, "MPI_Iallgather");
  std::memcpy(recv, output.data(), output.size());
}

void run_broadcast(const void* send, void* recv, size_t bytes, int root, ncclComm* comm) {
  std::vector<unsigned char> buffer(bytes);
  if (comm->rank == root) std::memcpy(buffer.data(), send, bytes);
  MPI_Request request;
  mpi_or_throw(MPI_Ibcast(buffer.data(), static_cast<int>(bytes), MPI_BYTE, root, comm->mpi_comm, &request),
               "MPI_Ibcast");
  wait_politely(&request, "MPI_Ibcast");
  std::memcpy(recv, buffer.data(), bytes);
}

// Posts every send and receive, then waits for all: none of them waits for another to start.
void run_point_to_point(const std::vector<PointToPoint>& ops, ncclComm* comm) {
  constexpr int kTag = 17;
  std::vector<MPI_Request> requests(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const PointToPoint& op = ops[i];
    const int bytes = static_cast<int>(op.bytes);
    if (op.send)
      // Synchronous mode: a send completes only once its receive has begun, as an NCCL send waits for its peer
      // (MPI would finish a small standard send eagerly, so an ungrouped send-before-receive on both ranks,
      // which hangs on a GPU, would pass here).
      mpi_or_throw(MPI_Issend(op.buffer, bytes, MPI_BYTE, op.peer, kTag, comm->mpi_comm, &requests[i]), "MPI_Issend");
    else
      mpi_or_throw(MPI_Irecv(op.buffer, bytes, MPI_BYTE, op.peer, kTag, comm->mpi_comm, &requests[i]), "MPI_Irecv");
  }
  std::vector<MPI_Status> statuses(ops.size());
  for (int polls = 0;; ++polls) {
    int done = 0;
    mpi_or_throw(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, statuses.data()),
                 "MPI_Testall (ncclSend/ncclRecv)");
    if (done) break;
    std::this_thread::sleep_for(std::chrono::microseconds(polls < 64 ? 0 : 50));
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].send) continue;
    int received = 0;
    MPI_Get_count(&statuses[i], MPI_BYTE, &received);
    if (static_cast<size_t>(received) != ops[i].bytes)
      throw std::runtime_error("NCCL emulation: ncclRecv of " + std::to_string(ops[i].bytes) + " bytes from rank " +
                               std::to_string(ops[i].peer) + " got " + std::to_string(received) +
                               " (the peer's ncclSend count differs)");
  }
}

void CUDART_CB run_host_task(void* task) {
  auto* work = static_cast<std::function<void()>*>(task);
  (*work)();
  delete work;
}

// Puts `work` on `stream` (cudaLaunchHostFunc: the stream's worker runs it in stream order).
ncclResult_t enqueue_now(const char* function, ncclComm* comm, cudaStream_t stream, std::function<void()> work) {
  // Into a capture (as NCCL does): a graph node that runs the collective at each replay. Not counted as pending:
  // destroying the communicator while a launch of the graph may still run is the program's error, as with NCCL.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess)
    return fail(ncclInvalidUsage, std::string(function) + ": cudaStreamIsCapturing failed on its stream");
  if (capture != cudaStreamCaptureStatusNone) {
    const cudaError_t code = EmulatedDevice::instance().enqueue(stream, [comm, work = std::move(work)] {
      if (comm->delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(comm->delay_ms));
      work();
    });
    if (code == cudaSuccess) return ncclSuccess;
    return fail(ncclInvalidUsage, std::string(function) + ": its capture refused it: " + cudaGetErrorString(code));
  }
  {
    std::lock_guard<std::mutex> lock(comm->mutex);
    ++comm->pending;
  }
  auto* task = new std::function<void()>([comm, work = std::move(work)] {
    if (comm->delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(comm->delay_ms));
    work();
    std::lock_guard<std::mutex> lock(comm->mutex);
    --comm->pending;
    comm->changed.notify_all();
  });
  const cudaError_t code = cudaLaunchHostFunc(stream, run_host_task, task);
  if (code != cudaSuccess) {
    delete task;
    std::lock_guard<std::mutex> lock(comm->mutex);
    --comm->pending;
    comm->changed.notify_all();
    return fail(ncclUnhandledCudaError, std::string(function) + ": cudaLaunchHostFunc failed: " +
                                            cudaGetErrorString(code));
  }
  return ncclSuccess;
}

// Enqueues `work` now, or inside a group at the outermost ncclGroupEnd: NCCL launches a group's operations
// only then, so work recorded on the stream between a grouped call and ncclGroupEnd (an event, a kernel)
// runs before the collective, here as on a GPU.
ncclResult_t enqueue(const char* function, ncclComm* comm, cudaStream_t stream, std::function<void()> work) {
  if (group_depth > 0) {
    deferred_calls.push_back({function, comm, stream, std::move(work), {}});
    return ncclSuccess;
  }
  return enqueue_now(function, comm, stream, std::move(work));
}

void wait_until_idle(ncclComm* comm) {
  std::unique_lock<std::mutex> lock(comm->mutex);
  comm->changed.wait(lock, [comm] { return comm->pending == 0; });
}

// Dispatches a reduction to its wide element type.
template <class Run>
void with_wide_type(ncclDataType_t type, Run run) {
  if (type == ncclInt32) {
    run(int32_t{});
  } else {
    run(float{});
  }
}

// ncclSend and ncclRecv: checked, then run alone (outside a group) or with the group's others.
ncclResult_t point_to_point(const char* function, bool send, const void* buffer, size_t count, ncclDataType_t datatype,
                            int peer, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(function, comm); r != ncclSuccess) return r;
  const size_t element = datatype_size(datatype);
  if (element == 0) {
    return fail(ncclInvalidArgument,
                std::string(function) + ": unknown datatype " + std::to_string(static_cast<int>(datatype)));
  }
  if (peer < 0 || peer >= comm->nranks) {
    return fail(ncclInvalidArgument,
                std::string(function) + ": peer " + std::to_string(peer) + " is not a rank of the communicator");
  }
  const size_t bytes = count * element;
  if (ncclResult_t r = check_mpi_count(function, bytes); r != ncclSuccess) return r;
  if (ncclResult_t r = check_device_buffer(function, send ? "sendbuff" : "recvbuff", buffer, bytes); r != ncclSuccess)
    return r;
  const PointToPoint op{send, const_cast<void*>(buffer), bytes, peer};
  if (group_depth > 0) {
    deferred_calls.push_back({function, comm, stream, nullptr, op});
    return ncclSuccess;
  }
  return enqueue_now(function, comm, stream, [op, comm] { run_point_to_point({op}, comm); });
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;  // the headers the emulation implements
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) { return last_error_text.c_str(); }

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  if (unique_id == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  std::memset(unique_id->internal, 0, sizeof(unique_id->internal));
  // A tag plus random bits: ranks sharing an id end up in the same MPI communicator.
  const char tag[] = "llmc-nccl-emu";
  std::memcpy(unique_id->internal, tag, sizeof(tag));
  std::random_device entropy;
  const uint64_t bits[2] = {(uint64_t{entropy()} << 32) ^ entropy() ^ static_cast<uint64_t>(getpid()),
                            (uint64_t{entropy()} << 32) ^ entropy()};
  std::memcpy(unique_id->internal + 16, bits, sizeof(bits));
  return ncclSuccess;
}

// Every rank of MPI_COMM_WORLD must call this (in the same order for each communicator):
// the emulation builds the communicator with MPI_Comm_split of MPI_COMM_WORLD.
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
  int mpi_ready = 0;
  MPI_Initialized(&mpi_ready);
  if (!mpi_ready) {
    return fail(ncclInvalidUsage, "ncclCommInitRank: the NCCL emulation needs MPI to be initialized first");
  }
  if (std::strncmp(comm_id.internal, "llmc-nccl-emu", 16) != 0) {
    return fail(ncclInvalidArgument, "ncclCommInitRank: commId was not made by ncclGetUniqueId");
  }
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return fail(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) +
                                         " is not in [0, nranks=" + std::to_string(nranks) + ")");
  }
  uint64_t bits[2];
  std::memcpy(bits, comm_id.internal + 16, sizeof(bits));
  const int color = static_cast<int>((bits[0] ^ bits[1]) & 0x3fffffff);
  MPI_Comm mpi_comm = MPI_COMM_NULL;
  if (MPI_Comm_split(MPI_COMM_WORLD, color, rank, &mpi_comm) != MPI_SUCCESS) {
    return fail(ncclSystemError, "ncclCommInitRank: MPI_Comm_split failed");
  }
  int mpi_size = 0, mpi_rank = 0;
  MPI_Comm_size(mpi_comm, &mpi_size);
  MPI_Comm_rank(mpi_comm, &mpi_rank);
  if (mpi_size != nranks || mpi_rank != rank) {
    MPI_Comm_free(&mpi_comm);
    return fail(ncclInvalidArgument, "ncclCommInitRank: called with nranks=" + std::to_string(nranks) +
                                         " rank=" + std::to_string(rank) + ", but " +
                                         std::to_string(mpi_size) + " processes share this id");
  }
  // Errors come back to the stream task, which reports them with the call's name.
  MPI_Comm_set_errhandler(mpi_comm, MPI_ERRORS_RETURN);
  auto* created = new ncclComm();
  created->mpi_comm = mpi_comm;
  created->rank = rank;
  created->nranks = nranks;
  if (const char* delay = std::getenv("LLMC_EMU_NCCL_DELAY_MS")) {
    char* end = nullptr;
    const long milliseconds = std::strtol(delay, &end, 10);
    if (end == delay || *end != '\0' || milliseconds < 0 || milliseconds > 60000) {
      MPI_Comm_free(&created->mpi_comm);
      delete created;
      return fail(ncclInvalidArgument, std::string("ncclCommInitRank: LLMC_EMU_NCCL_DELAY_MS='") + delay +
                                           "' is not a whole number of milliseconds in [0, 60000]");
    }
    created->delay_ms = static_cast<int>(milliseconds);
  }
  *comm = created;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (ncclResult_t r = check_comm("ncclCommFinalize", comm); r != ncclSuccess) return r;
  wait_until_idle(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;  // as NCCL
  wait_until_idle(comm);  // enqueued collectives still use the communicator
  MPI_Comm_free(&comm->mpi_comm);
  delete comm;
  return ncclSuccess;
}

// Without waiting and without MPI calls: pending collectives may be blocked on ranks that are gone,
// and the caller is typically a watchdog thread about to end the job with MPI_Abort, while another
// thread may be blocked inside MPI. So the communicator is leaked (the process is about to stop).
ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclSuccess; }

// Asynchronous failures stop the process in the emulation, so none is ever pending here.
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (ncclResult_t r = check_comm("ncclCommGetAsyncError", comm); r != ncclSuccess) return r;
  if (async_error == nullptr) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  *async_error = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (ncclResult_t r = check_comm("ncclCommCount", comm); r != ncclSuccess) return r;
  if (count == nullptr) return fail(ncclInvalidArgument, "ncclCommCount: count is NULL");
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (ncclResult_t r = check_comm("ncclCommUserRank", comm); r != ncclSuccess) return r;
  if (rank == nullptr) return fail(ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (ncclResult_t r = check_comm("ncclCommCuDevice", comm); r != ncclSuccess) return r;
  if (device == nullptr) return fail(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
  *device = 0;  // each process owns one emulated device
  return ncclSuccess;
}

// Calls inside a group are enqueued at the outermost ncclGroupEnd, in call order: a valid schedule for
// collectives, which the project only groups on one communicator.
ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd: not inside ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  std::vector<DeferredCall> calls;
  calls.swap(deferred_calls);
  for (size_t i = 0; i < calls.size(); ++i) {
    DeferredCall& call = calls[i];
    if (call.work) {
      if (ncclResult_t r = enqueue_now(call.function, call.comm, call.stream, std::move(call.work)); r != ncclSuccess)
        return r;
      continue;
    }
    if (call.function == nullptr) continue;  // a send or receive already gathered below
    // The group's sends and receives on this communicator and stream, run together where the first was called.
    std::vector<PointToPoint> ops;
    for (size_t j = i; j < calls.size(); ++j) {
      if (calls[j].work || calls[j].function == nullptr || calls[j].comm != call.comm || calls[j].stream != call.stream)
        continue;
      ops.push_back(calls[j].p2p);
      if (j > i) calls[j].function = nullptr;
    }
    ncclComm* comm = call.comm;
    if (ncclResult_t r =
            enqueue_now("ncclSend/ncclRecv", comm, call.stream, [ops, comm] { run_point_to_point(ops, comm); });
        r != ncclSuccess)
      return r;
  }
  return ncclSuccess;
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return point_to_point("ncclSend", true, sendbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return point_to_point("ncclRecv", false, recvbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  const char* function = "ncclReduceScatter";
  if (ncclResult_t r = check_reduction_call(function, comm, datatype, op, recvcount); r != ncclSuccess) return r;
  const size_t element = datatype_size(datatype);
  const size_t recv_bytes = recvcount * element;
  const size_t send_bytes = recv_bytes * static_cast<size_t>(comm->nranks);
  if (ncclResult_t r = check_device_buffer(function, "sendbuff", sendbuff, send_bytes); r != ncclSuccess) return r;
  if (ncclResult_t r = check_device_buffer(function, "recvbuff", recvbuff, recv_bytes); r != ncclSuccess) return r;
  const void* in_place_recv = static_cast<const unsigned char*>(sendbuff) + comm->rank * recv_bytes;
  if (ranges_overlap(sendbuff, send_bytes, recvbuff, recv_bytes) && recvbuff != in_place_recv) {
    return fail(ncclInvalidArgument, std::string(function) +
                                         ": buffers overlap but recvbuff != sendbuff + rank * recvcount "
                                         "(the only in-place layout NCCL defines)");
  }
  if (recvcount == 0) return ncclSuccess;
  return enqueue(function, comm, stream, [=] {
    with_wide_type(datatype, [&](auto wide) {
      run_reduce_scatter<decltype(wide)>(sendbuff, recvbuff, recvcount, datatype, op, comm);
    });
  });
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const char* function = "ncclAllReduce";
  if (ncclResult_t r = check_reduction_call(function, comm, datatype, op, count); r != ncclSuccess) return r;
  const size_t bytes = count * datatype_size(datatype);
  if (ncclResult_t r = check_device_buffer(function, "sendbuff", sendbuff, bytes); r != ncclSuccess) return r;
  if (ncclResult_t r = check_device_buffer(function, "recvbuff", recvbuff, bytes); r != ncclSuccess) return r;
  if (ranges_overlap(sendbuff, bytes, recvbuff, bytes) && sendbuff != recvbuff) {
    return fail(ncclInvalidArgument, std::string(function) + ": buffers overlap but are not identical");
  }
  if (count == 0) return ncclSuccess;
  return enqueue(function, comm, stream, [=] {
    with_wide_type(datatype, [&](auto wide) {
      run_all_reduce<decltype(wide)>(sendbuff, recvbuff, count, datatype, op, comm);
    });
  });
}

// recvbuff matters on the root only (it may be NULL elsewhere); in place when sendbuff == recvbuff there.
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  const char* function = "ncclReduce";
  if (ncclResult_t r = check_reduction_call(function, comm, datatype, op, count); r != ncclSuccess) return r;
  if (ncclResult_t r = check_root(function, root, comm); r != ncclSuccess) return r;
  const size_t bytes = count * datatype_size(datatype);
  if (ncclResult_t r = check_device_buffer(function, "sendbuff", sendbuff, bytes); r != ncclSuccess) return r;
  if (comm->rank == root) {
    if (ncclResult_t r = check_device_buffer(function, "recvbuff", recvbuff, bytes); r != ncclSuccess) return r;
    if (ranges_overlap(sendbuff, bytes, recvbuff, bytes) && sendbuff != recvbuff) {
      return fail(ncclInvalidArgument, std::string(function) + ": buffers overlap but are not identical");
    }
  }
  if (count == 0) return ncclSuccess;
  return enqueue(function, comm, stream, [=] {
    with_wide_type(datatype, [&](auto wide) {
      run_reduce<decltype(wide)>(sendbuff, recvbuff, count, datatype, op, root, comm);
    });
  });
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  const char* function = "ncclAllGather";
  if (ncclResult_t r = check_comm(function, comm); r != ncclSuccess) return r;
  const size_t element = datatype_size(datatype);
  if (element == 0) {
    return fail(ncclInvalidArgument, std::string(function) + ": unknown datatype " +
                                         std::to_string(static_cast<int>(datatype)));
  }
  const size_t send_bytes = sendcount * element;
  const size_t recv_bytes = send_bytes * static_cast<size_t>(comm->nranks);
  if (ncclResult_t r = check_mpi_count(function, send_bytes); r != ncclSuccess) return r;
  if (ncclResult_t r = check_device_buffer(function, "sendbuff", sendbuff, send_bytes); r != ncclSuccess) return r;
  if (ncclResult_t r = check_device_buffer(function, "recvbuff", recvbuff, recv_bytes); r != ncclSuccess) return r;
  const void* in_place_send = static_cast<const unsigned char*>(recvbuff) + comm->rank * send_bytes;
  if (ranges_overlap(sendbuff, send_bytes, recvbuff, recv_bytes) && sendbuff != in_place_send) {
    return fail(ncclInvalidArgument, std::string(function) +
                                         ": buffers overlap but sendbuff != recvbuff + rank * sendcount "
                                         "(the only in-place layout NCCL defines)");
  }
  if (sendcount == 0) return ncclSuccess;
  return enqueue(function, comm, stream, [=] { run_all_gather(sendbuff, recvbuff, send_bytes, comm); });
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  const char* function = "ncclBroadcast";
  if (ncclResult_t r = check_comm(function, comm); r != ncclSuccess) return r;
  const size_t element = datatype_size(datatype);
  if (element == 0) {
    return fail(ncclInvalidArgument, std::string(function) + ": unknown datatype " +
                                         std::to_string(static_cast<int>(datatype)));
  }
  if (ncclResult_t r = check_root(function, root, comm); r != ncclSuccess) return r;
  const size_t bytes = count * element;
  if (ncclResult_t r = check_mpi_count(function, bytes); r != ncclSuccess) return r;
  if (comm->rank == root) {
    if (ncclResult_t r = check_device_buffer(function, "sendbuff", sendbuff, bytes); r != ncclSuccess) return r;
  }
  if (ncclResult_t r = check_device_buffer(function, "recvbuff", recvbuff, bytes); r != ncclSuccess) return r;
  if (count == 0) return ncclSuccess;
  return enqueue(function, comm, stream, [=] { run_broadcast(sendbuff, recvbuff, bytes, root, comm); });
}

}  // extern "C"
