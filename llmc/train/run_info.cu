// Collects the build's git commit and the device/driver/runtime versions (see run_info.h).
#include "llmc/train/run_info.h"

#include "llmc/cuda/cuda_common.h"
#include "llmc/train/build_commit.h"

namespace llmc {

namespace {
std::string cuda_version_string(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}
}  // namespace

RunInfo collect_run_info() {
  RunInfo info;
  info.git_commit = build_commit();
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp properties;
  CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  info.device_name = properties.name;
  int driver = 0, runtime = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  info.driver_version = cuda_version_string(driver);
  info.runtime_version = cuda_version_string(runtime);
  return info;
}

}  // namespace llmc
