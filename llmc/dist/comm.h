// The communication context of one rank for data-parallel training: MPI bootstrap (rank, world
// size, node-local rank), one GPU per local rank, the NCCL communicator, a high-priority stream for
// collectives, host-side scalar reductions, stream-ordered collective wrappers and fatal handling.
// The same source serves both targets; in the emulated build NCCL is served by MPI (llmc/emu/nccl_emu.cpp).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cstddef>
#include <exception>
#include <string>

#include "llmc/dist/nccl_check.h"
#include "llmc/dist/rank_group.h"

namespace llmc {

// Prints "rank R: why" to stderr and stops every rank of the job (MPI_Abort with `exit_code`), so that
// no rank waits forever in a collective for one that failed. Usable before or without a CommContext
// (without MPI it exits this process with `exit_code`). Never returns.
[[noreturn]] void abort_all_ranks(const std::string& why, int exit_code = 1);

class CommContext;
// A program's top-level error handler. With several ranks: abort_all_ranks(why). With one rank (or
// without MPI) there is nobody to stop: it prints "rank 0: why" and returns the exit status 1, and the
// caller then destroys `comm` (if any) as usual, so MPI is finalized and no MPI_Abort banner follows.
// `comm` is null when the error came from the CommContext constructor.
int stop_after_error(const std::string& why, const CommContext* comm);
// The handler of an AgreedError (rank_group.h): every rank knows it, so none is aborted. Rank 0 prints
// "rank R: why" (R the failing rank); every rank returns the exit status 1 and finalizes normally.
int stop_after_agreed_error(const AgreedError& error, const CommContext& comm);

class CommContext : public RankGroup {
 public:
  // Initializes MPI when needed (MPI_THREAD_MULTIPLE: the emulated NCCL's stream threads and the
  // watchdog's abort call MPI beside the main thread), finds the node-local rank with
  // MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), selects GPU local_rank, creates the comm stream
  // (greatest priority, non-blocking) and the NCCL communicator (unique id from rank 0, broadcast
  // with MPI). Without mpirun this is rank 0 of 1 (MPI singleton). Throws CommError / CudaError.
  CommContext();
  // Waits for the comm stream, destroys the communicator, finalizes MPI if it began it. When
  // destroyed by a propagating exception it does none of that (it could hang on the other
  // ranks): catch the exception and call abort_all_ranks.
  ~CommContext() override;
  CommContext(const CommContext&) = delete;
  CommContext& operator=(const CommContext&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  bool is_main_rank() const { return rank_ == 0; }
  int device() const { return device_; }
  cudaStream_t comm_stream() const { return comm_stream_; }
  ncclComm_t nccl() const { return nccl_comm_; }

  // ---- host-side reductions of a few scalars (MPI, blocking, all ranks must call) ----
  double all_reduce_sum(double value) const;
  double all_reduce_mean(double value) const;
  double all_reduce_max(double value) const;
  void all_reduce_sum(double* values, int count) const;  // in place
  bool any_rank(bool flag) const;                        // logical or over ranks
  void barrier() const override;
  void all_gather_bytes(const void* mine, size_t bytes, void* all) const override;  // bytes < 2^31

  // For a watchdog thread while other threads may be blocked in NCCL or MPI: prints "rank R: why",
  // aborts the NCCL communicator (so no kernel keeps waiting for a peer) and ends every rank of the job
  // with `exit_code` (MPI_Abort). Never returns.
  [[noreturn]] void abort_job(const std::string& why, int exit_code) const;

  // ---- stream-ordered collectives on device buffers (NCCL; all ranks, same order) ----
  // The collectives enqueued between group_start() and group_end() start together at group_end (one
  // launch where there would be one per call; NCCL groups): record events after group_end, not between.
  void group_start() const;
  void group_end() const;
  // recv[i] = mean over ranks of send[rank * recv_count + i]; send holds world_size * recv_count
  // elements. In place when recv == send + rank * recv_count.
  void reduce_scatter_avg(const float* send, float* recv, size_t recv_count, cudaStream_t stream) const;
  void reduce_scatter_avg(const __nv_bfloat16* send, __nv_bfloat16* recv, size_t recv_count,
                          cudaStream_t stream) const;
  // recv[r * send_count + i] = send of rank r [i]; in place when send == recv + rank * send_count.
  void all_gather(const float* send, float* recv, size_t send_count, cudaStream_t stream) const;
  void all_gather(const __nv_bfloat16* send, __nv_bfloat16* recv, size_t send_count,
                  cudaStream_t stream) const;
  // data[i] = sum over ranks of data[i], in place.
  void all_reduce_sum_float(float* data, size_t count, cudaStream_t stream) const;
  // data[i] = mean over ranks of data[i], in place.
  void all_reduce_avg(float* data, size_t count, cudaStream_t stream) const;
  void all_reduce_avg(__nv_bfloat16* data, size_t count, cudaStream_t stream) const;
  // On rank `root`: data[i] = mean over ranks of data[i], in place; the other ranks' data is unchanged.
  void reduce_avg(float* data, size_t count, int root, cudaStream_t stream) const;
  void reduce_avg(__nv_bfloat16* data, size_t count, int root, cudaStream_t stream) const;
  // data on every rank = data of rank `root`, in place.
  void broadcast(float* data, size_t count, int root, cudaStream_t stream) const;
  void broadcast(__nv_bfloat16* data, size_t count, int root, cudaStream_t stream) const;
  // Point to point: `count` elements to / from rank `peer` (which calls the other with the same count). A
  // rank's sends and receives of one exchange go between group_start() and group_end(), so that none waits
  // for another (an all-to-all of variable sizes); a rank may send to itself.
  void send(const __nv_bfloat16* data, size_t count, int peer, cudaStream_t stream) const;
  void recv(__nv_bfloat16* data, size_t count, int peer, cudaStream_t stream) const;
  void send(const float* data, size_t count, int peer, cudaStream_t stream) const;
  void recv(float* data, size_t count, int peer, cudaStream_t stream) const;
  // data on every rank = data of rank 0 (e.g. initial parameters), in place.
  void broadcast_from_rank0(float* data, size_t count, cudaStream_t stream) const;
  void broadcast_from_rank0(__nv_bfloat16* data, size_t count, cudaStream_t stream) const;

 private:
  bool owns_mpi_ = false;  // this context called MPI_Init_thread, so it finalizes
  int uncaught_exceptions_at_construction_ = std::uncaught_exceptions();
  int rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  int device_ = 0;
  cudaStream_t comm_stream_ = nullptr;
  ncclComm_t nccl_comm_ = nullptr;
};

}  // namespace llmc
