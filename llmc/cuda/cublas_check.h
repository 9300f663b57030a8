// Checked cuBLASLt calls, the sibling of CUDA_CHECK (in the emulated build against the CPU cuBLASLt of
// llmc/emu/cublaslt.cpp): CUBLAS_CHECK(call) throws llmc::CublasError naming the call, the source location
// and cuBLAS' status string; CUBLAS_REPORT(call) is for destructors.
#pragma once

#include <cublasLt.h>

#include <stdexcept>
#include <string>

#include "llmc/base/cleanup_report.h"

namespace llmc {

class CublasError : public std::runtime_error {
 public:
  CublasError(cublasStatus_t status, const std::string& message) : std::runtime_error(message), status_(status) {}
  cublasStatus_t status() const { return status_; }

 private:
  cublasStatus_t status_;
};

inline void cublas_check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw CublasError(status, std::string("cuBLAS error ") + cublasLtGetStatusName(status) + " (" +
                                cublasLtGetStatusString(status) + ") in " + call + " at " + file + ":" +
                                std::to_string(line));
}

inline void cublas_report(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) report_cleanup_failure(call, file, line, cublasLtGetStatusString(status));
}

}  // namespace llmc

#define CUBLAS_CHECK(call) ::llmc::cublas_check((call), #call, __FILE__, __LINE__)
#define CUBLAS_REPORT(call) ::llmc::cublas_report((call), #call, __FILE__, __LINE__)
