// Checked NCCL and MPI calls for both targets (real NCCL on GPUs; NCCL-over-MPI in the emulated
// build): NCCL_CHECK(call) and MPI_CHECK(call) throw llmc::CommError naming the call, the source
// location and the library's error string, so a caller can report it and stop every rank.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

#include "llmc/base/cleanup_report.h"

namespace llmc {

// Thrown for every failed NCCL or MPI call made through the macros below.
class CommError : public std::runtime_error {
 public:
  explicit CommError(const std::string& message) : std::runtime_error(message) {}
};

[[noreturn]] inline void throw_nccl_error(ncclResult_t code, const char* call, const char* file,
                                          int line) {
  std::string message = std::string("NCCL error ") + ncclGetErrorString(code) + " in " + call +
                        " at " + file + ":" + std::to_string(line);
  // NCCL keeps a human-readable explanation of the last failure (argument checks in particular).
  const char* detail = ncclGetLastError(nullptr);
  if (detail != nullptr && detail[0] != '\0') message += ": " + std::string(detail);
  throw CommError(message);
}

inline void nccl_check(ncclResult_t code, const char* call, const char* file, int line) {
  if (code != ncclSuccess) throw_nccl_error(code, call, file, line);
}

inline void nccl_report(ncclResult_t code, const char* call, const char* file, int line) {
  if (code != ncclSuccess) report_cleanup_failure(call, file, line, ncclGetErrorString(code));
}

// Only meaningful for communicators whose error handler is MPI_ERRORS_RETURN (CommContext sets it
// on MPI_COMM_WORLD); with MPI's default handler a failing call aborts before returning.
[[noreturn]] inline void throw_mpi_error(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  throw CommError(std::string("MPI error ") + std::to_string(code) + " (" +
                  std::string(text, static_cast<size_t>(length)) + ") in " + call + " at " + file +
                  ":" + std::to_string(line));
}

inline void mpi_check(int code, const char* call, const char* file, int line) {
  if (code != MPI_SUCCESS) throw_mpi_error(code, call, file, line);
}

inline void mpi_report(int code, const char* call, const char* file, int line) {
  if (code != MPI_SUCCESS) report_cleanup_failure(call, file, line, ("MPI error " + std::to_string(code)).c_str());
}

}  // namespace llmc

#define NCCL_CHECK(call) ::llmc::nccl_check((call), #call, __FILE__, __LINE__)
#define MPI_CHECK(call) ::llmc::mpi_check((call), #call, __FILE__, __LINE__)
// For destructors: report a failure (llmc/base/cleanup_report.h) instead of throwing.
#define NCCL_REPORT(call) ::llmc::nccl_report((call), #call, __FILE__, __LINE__)
#define MPI_REPORT(call) ::llmc::mpi_report((call), #call, __FILE__, __LINE__)
