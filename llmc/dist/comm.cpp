// The per-rank communication context (see comm.h): MPI bootstrap, GPU choice, NCCL communicator,
// comm stream, host-side reductions, collective wrappers and the stop-every-rank path.
#include "llmc/dist/comm.h"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "llmc/cuda/cuda_common.h"

namespace llmc {

namespace {

// Before MPI is up, the launcher's environment is the only source of the rank.
std::string rank_label_without_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(name)) return value;
  }
  return "0";
}

bool mpi_is_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

// "rank R: why" on stderr, R from MPI when it runs, from the launcher's environment otherwise.
void print_rank_error(const std::string& why) {
  std::string rank = rank_label_without_mpi();
  int world_rank = 0;
  if (mpi_is_running() && MPI_Comm_rank(MPI_COMM_WORLD, &world_rank) == MPI_SUCCESS) rank = std::to_string(world_rank);
  std::fprintf(stderr, "rank %s: %s\n", rank.c_str(), why.c_str());
  std::fflush(stderr);
}

// A process started without mpirun is an MPI singleton, and OpenMPI 4 starts its runtime daemon (orted) for it,
// which this program never uses (it spawns no processes): half a second at every start, and MPI_Init fails where
// orted is not installed (the GPU kit's machines, docs/gpu_check.md). OpenMPI's ess_singleton_isolated leaves the
// daemon out. Under mpirun the parameter does nothing; a value the user set wins. Called before MPI_Init; train_gpt2
// constructs its CommContext before it touches CUDA or starts a thread (setenv beside a thread that reads the
// environment would race).
void prefer_isolated_mpi_singleton() {
  if (setenv("OMPI_MCA_ess_singleton_isolated", "1", /*overwrite=*/0) != 0) {
    throw CommError(std::string("setenv(OMPI_MCA_ess_singleton_isolated) failed: ") + std::strerror(errno) + " (" +
                    __FILE__ + ":" + std::to_string(__LINE__) + ")");
  }
}

template <class Element>
ncclDataType_t nccl_type();
template <>
ncclDataType_t nccl_type<float>() { return ncclFloat32; }
template <>
ncclDataType_t nccl_type<__nv_bfloat16>() { return ncclBfloat16; }

}  // namespace

void abort_all_ranks(const std::string& why, int exit_code) {
  print_rank_error(why);
  // MPI_Abort makes the launcher kill every rank of the job: none is left blocked in a collective.
  if (mpi_is_running()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

int stop_after_error(const std::string& why, const CommContext* comm) {
  int world_size = 1;
  if (comm != nullptr) {
    world_size = comm->world_size();
  } else if (mpi_is_running() && MPI_Comm_size(MPI_COMM_WORLD, &world_size) != MPI_SUCCESS) {
    world_size = 2;  // unknown: stop everything, to be safe
  }
  if (world_size > 1) abort_all_ranks(why);
  print_rank_error(why);
  // A CommContext that failed to construct leaves MPI initialised; one rank has no peer to wait for.
  if (comm == nullptr && mpi_is_running()) MPI_REPORT(MPI_Finalize());
  return 1;
}

int stop_after_agreed_error(const AgreedError& error, const CommContext& comm) {
  if (comm.is_main_rank()) {
    std::fprintf(stderr, "rank %d: %s\n", error.failing_rank(), error.what());
    std::fflush(stderr);
  }
  return 1;
}

void CommContext::abort_job(const std::string& why, int exit_code) const {
  print_rank_error(why);
  if (nccl_comm_ != nullptr) NCCL_REPORT(ncclCommAbort(nccl_comm_));
  if (mpi_is_running()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

CommContext::CommContext() {
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  int thread_level = 0;
  if (!initialized) {
    // Works without mpirun too (an MPI singleton of one rank; checked with OpenMPI 4.1 as root).
    prefer_isolated_mpi_singleton();
    MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &thread_level));
    owns_mpi_ = true;
  } else {
    MPI_CHECK(MPI_Query_thread(&thread_level));
  }
  // The emulated NCCL calls MPI from stream worker threads, and the watchdog thread calls MPI_Abort,
  // while the main thread may be inside an MPI call.
  const int needed_level = MPI_THREAD_MULTIPLE;
  if (thread_level < needed_level) {
    throw CommError("MPI provides thread level " + std::to_string(thread_level) + ", this program needs " +
                    std::to_string(needed_level) + " (MPI_THREAD_MULTIPLE = " +
                    std::to_string(MPI_THREAD_MULTIPLE) + ")");
  }
  // MPI_CHECK can only report errors that come back.
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));

  // Ranks sharing memory are on one node; host names can be ambiguous (aliases, containers).
  MPI_Comm node_comm = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_comm));
  MPI_CHECK(MPI_Comm_rank(node_comm, &local_rank_));
  MPI_CHECK(MPI_Comm_size(node_comm, &local_size_));
  MPI_CHECK(MPI_Comm_free(&node_comm));

#if defined(LLMC_EMULATION)
  device_ = 0;  // every process has its own emulated device
#else
  int device_count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&device_count));
  if (local_size_ > device_count) {
    throw CommError(std::to_string(local_size_) + " ranks run on this node but only " +
                    std::to_string(device_count) +
                    " GPUs are visible: start at most one rank per GPU");
  }
  device_ = local_rank_;
#endif
  CUDA_CHECK(cudaSetDevice(device_));

  // Greatest priority: collectives get scheduled ahead of compute kernels that are waiting.
  int least_priority = 0, greatest_priority = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
  CUDA_CHECK(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, greatest_priority));

  ncclUniqueId unique_id{};
  if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&unique_id));
  MPI_CHECK(MPI_Bcast(&unique_id, static_cast<int>(sizeof(unique_id)), MPI_BYTE, 0, MPI_COMM_WORLD));
  NCCL_CHECK(ncclCommInitRank(&nccl_comm_, world_size_, unique_id, rank_));
}

CommContext::~CommContext() {
  // Destroyed by an exception: other ranks may be blocked in a collective with this one, so the
  // collective teardown (waiting for the comm stream, MPI_Finalize) could hang forever. Leave it
  // to the handler, which is expected to call abort_all_ranks.
  if (std::uncaught_exceptions() > uncaught_exceptions_at_construction_) return;
  if (comm_stream_ != nullptr) CUDA_REPORT(cudaStreamSynchronize(comm_stream_));
  if (nccl_comm_ != nullptr) NCCL_REPORT(ncclCommDestroy(nccl_comm_));
  if (comm_stream_ != nullptr) CUDA_REPORT(cudaStreamDestroy(comm_stream_));
  if (owns_mpi_ && mpi_is_running()) MPI_REPORT(MPI_Finalize());
}

// ---- host-side reductions ----------------------------------------------------------------------

double CommContext::all_reduce_sum(double value) const {
  double sum = 0.0;
  MPI_CHECK(MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  return sum;
}

double CommContext::all_reduce_mean(double value) const { return all_reduce_sum(value) / world_size_; }

double CommContext::all_reduce_max(double value) const {
  double result = 0.0;
  MPI_CHECK(MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  return result;
}

void CommContext::all_reduce_sum(double* values, int count) const {
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
}

bool CommContext::any_rank(bool flag) const {
  int local = flag ? 1 : 0, any = 0;
  MPI_CHECK(MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD));
  return any != 0;
}

void CommContext::barrier() const { MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); }

void CommContext::all_gather_bytes(const void* mine, size_t bytes, void* all) const {
  if (bytes > static_cast<size_t>(INT_MAX)) throw CommError("all_gather_bytes: " + std::to_string(bytes) + " bytes");
  const int count = static_cast<int>(bytes);
  MPI_CHECK(MPI_Allgather(mine, count, MPI_BYTE, all, count, MPI_BYTE, MPI_COMM_WORLD));
}

// ---- stream-ordered collectives ----------------------------------------------------------------

void CommContext::reduce_scatter_avg(const float* send, float* recv, size_t recv_count,
                                     cudaStream_t stream) const {
  NCCL_CHECK(ncclReduceScatter(send, recv, recv_count, nccl_type<float>(), ncclAvg, nccl_comm_, stream));
}

void CommContext::reduce_scatter_avg(const __nv_bfloat16* send, __nv_bfloat16* recv, size_t recv_count,
                                     cudaStream_t stream) const {
  NCCL_CHECK(ncclReduceScatter(send, recv, recv_count, nccl_type<__nv_bfloat16>(), ncclAvg, nccl_comm_,
                               stream));
}

void CommContext::all_gather(const float* send, float* recv, size_t send_count, cudaStream_t stream) const {
  NCCL_CHECK(ncclAllGather(send, recv, send_count, nccl_type<float>(), nccl_comm_, stream));
}

void CommContext::all_gather(const __nv_bfloat16* send, __nv_bfloat16* recv, size_t send_count,
                             cudaStream_t stream) const {
  NCCL_CHECK(ncclAllGather(send, recv, send_count, nccl_type<__nv_bfloat16>(), nccl_comm_, stream));
}

void CommContext::all_reduce_sum_float(float* data, size_t count, cudaStream_t stream) const {
  NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, nccl_comm_, stream));
}

void CommContext::all_reduce_avg(float* data, size_t count, cudaStream_t stream) const {
  NCCL_CHECK(ncclAllReduce(data, data, count, nccl_type<float>(), ncclAvg, nccl_comm_, stream));
}

void CommContext::all_reduce_avg(__nv_bfloat16* data, size_t count, cudaStream_t stream) const {
  NCCL_CHECK(ncclAllReduce(data, data, count, nccl_type<__nv_bfloat16>(), ncclAvg, nccl_comm_, stream));
}

void CommContext::group_start() const { NCCL_CHECK(ncclGroupStart()); }

void CommContext::group_end() const { NCCL_CHECK(ncclGroupEnd()); }

void CommContext::reduce_avg(float* data, size_t count, int root, cudaStream_t stream) const {
  NCCL_CHECK(ncclReduce(data, data, count, nccl_type<float>(), ncclAvg, root, nccl_comm_, stream));
}

void CommContext::reduce_avg(__nv_bfloat16* data, size_t count, int root, cudaStream_t stream) const {
  NCCL_CHECK(ncclReduce(data, data, count, nccl_type<__nv_bfloat16>(), ncclAvg, root, nccl_comm_, stream));
}

void CommContext::broadcast(float* data, size_t count, int root, cudaStream_t stream) const {
  NCCL_CHECK(ncclBroadcast(data, data, count, nccl_type<float>(), root, nccl_comm_, stream));
}

void CommContext::broadcast(__nv_bfloat16* data, size_t count, int root, cudaStream_t stream) const {
  NCCL_CHECK(ncclBroadcast(data, data, count, nccl_type<__nv_bfloat16>(), root, nccl_comm_, stream));
}

void CommContext::send(const __nv_bfloat16* data, size_t count, int peer, cudaStream_t stream) const {
  NCCL_CHECK(ncclSend(data, count, nccl_type<__nv_bfloat16>(), peer, nccl_comm_, stream));
}

void CommContext::recv(__nv_bfloat16* data, size_t count, int peer, cudaStream_t stream) const {
  NCCL_CHECK(ncclRecv(data, count, nccl_type<__nv_bfloat16>(), peer, nccl_comm_, stream));
}

void CommContext::send(const float* data, size_t count, int peer, cudaStream_t stream) const {
  NCCL_CHECK(ncclSend(data, count, nccl_type<float>(), peer, nccl_comm_, stream));
}

void CommContext::recv(float* data, size_t count, int peer, cudaStream_t stream) const {
  NCCL_CHECK(ncclRecv(data, count, nccl_type<float>(), peer, nccl_comm_, stream));
}

void CommContext::broadcast_from_rank0(float* data, size_t count, cudaStream_t stream) const {
  NCCL_CHECK(ncclBroadcast(data, data, count, nccl_type<float>(), 0, nccl_comm_, stream));
}

void CommContext::broadcast_from_rank0(__nv_bfloat16* data, size_t count, cudaStream_t stream) const {
  NCCL_CHECK(ncclBroadcast(data, data, count, nccl_type<__nv_bfloat16>(), 0, nccl_comm_, stream));
}

}  // namespace llmc
