// A tiny multi-rank program for the fatal-error test: every rank writes its process id to
// DIR/pid_<rank>, then rank 1 fails to open a shard that does not exist while the other ranks wait
// in a reduce-scatter that rank 1 will never join. main() handles the failure the way train_gpt2
// does (catch, abort_all_ranks), so every rank must stop, non-zero, within seconds.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include <unistd.h>

#include "llmc/dist/comm.h"
#include "llmc/cuda/cuda_common.h"

namespace {

void open_shard_or_throw(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) throw std::runtime_error("cannot open shard " + path + ": " + std::strerror(errno));
  std::fclose(file);
}

void run(const std::string& directory) {
  llmc::CommContext comm;
  const std::string pid_path = directory + "/pid_" + std::to_string(comm.rank());
  std::FILE* pid_file = std::fopen(pid_path.c_str(), "w");
  if (pid_file == nullptr) throw std::runtime_error("cannot write " + pid_path + ": " + std::strerror(errno));
  std::fprintf(pid_file, "%d\n", static_cast<int>(getpid()));
  std::fclose(pid_file);
  comm.barrier();  // every pid file exists before anything fails

  if (comm.rank() == 1) open_shard_or_throw(directory + "/missing_shard_000001.bin");
  const size_t shard = 1024;
  float* buffer = nullptr;
  CUDA_CHECK(cudaMalloc(&buffer, shard * comm.world_size() * sizeof(float)));
  comm.reduce_scatter_avg(buffer, buffer + comm.rank() * shard, shard, comm.comm_stream());
  CUDA_CHECK(cudaStreamSynchronize(comm.comm_stream()));  // never returns without rank 1
  throw std::logic_error("the reduce-scatter completed without rank 1");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  try {
    run(argv[1]);
  } catch (const std::exception& error) {
    llmc::abort_all_ranks(error.what());
  }
  return 0;
}
