// Cleanup (destructors, error paths) must not throw, so a failed release there is reported and the
// release goes on: one line on stderr naming the call, the source location and the library's error
// text. CUDA_REPORT, NCCL_REPORT, MPI_REPORT and CUBLAS_REPORT (beside the matching *_CHECK macros)
// all print through this.
#pragma once

#include <cstdio>

namespace llmc {

inline void report_cleanup_failure(const char* call, const char* file, int line, const char* error) {
  std::fprintf(stderr, "%s failed at %s:%d (during cleanup, carrying on): %s\n", call, file, line, error);
}

}  // namespace llmc
