// The ranks of a run as the code that must act on all of them at once sees them (writing one checkpoint
// from every rank, agreeing on a failure): rank, size, a barrier and a host-side all-gather. CommContext
// (llmc/dist/comm.h) is the implementation; tests use a single-rank stand-in. Plain C++, no CUDA or MPI.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>

namespace llmc {

class RankGroup {
 public:
  virtual ~RankGroup() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual void barrier() const = 0;
  // Every rank passes `bytes` bytes; `all` receives world_size() * bytes, rank r's at r * bytes.
  virtual void all_gather_bytes(const void* mine, size_t bytes, void* all) const = 0;
};

// An error every rank knows about, because the ranks agreed on it collectively (one rank's checkpoint
// write failed, and all of them learned which and why): all ranks can stop normally, with no MPI_Abort
// and no rank cut off in the middle of writing a file. what() is the cause, from rank failing_rank().
class AgreedError : public std::runtime_error {
 public:
  AgreedError(int failing_rank, const std::string& cause) : std::runtime_error(cause), failing_rank_(failing_rank) {}
  int failing_rank() const { return failing_rank_; }

 private:
  int failing_rank_;
};

}  // namespace llmc
