// What a log header records about the run's environment: the git commit the binary was built from and
// the device, driver and CUDA runtime it runs on (the emulated build names its emulated device).
#pragma once
#include <string>

namespace llmc {

struct RunInfo {
  std::string git_commit;       // build_commit(): "unknown" outside a git checkout
  std::string device_name;
  std::string driver_version;   // "13.0"
  std::string runtime_version;
};

RunInfo collect_run_info();

}  // namespace llmc
