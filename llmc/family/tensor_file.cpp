// The tensor payload of the speedrun families' model files (see tensor_file.h).
#include "llmc/family/tensor_file.h"

#include <sys/stat.h>

#include "llmc/base/bf16_bits.h"
#include "llmc/base/file_io.h"

namespace llmc {

namespace {

bool stored_as_bf16(const TensorView& view, bool reference_dtypes) {
  return reference_dtypes && view.reference_dtype == ParamDtype::kBf16;
}

}  // namespace

int64_t tensor_payload_bytes(const ParamLayout& layout, bool reference_dtypes) {
  int64_t bytes = 0;
  for (const TensorView& view : layout.tensors)
    bytes += static_cast<int64_t>(view.numel) * (stored_as_bf16(view, reference_dtypes) ? 2 : 4);
  return bytes;
}

void write_tensor_payload(AtomicFileWriter& out, const ParamLayout& layout, const std::vector<int>& order,
                          const float* params, bool reference_dtypes) {
  std::vector<uint16_t> staging;
  for (int index : order) {
    const TensorView& view = layout.tensors[static_cast<size_t>(index)];
    const float* src = params + view.offset;
    if (stored_as_bf16(view, reference_dtypes)) {
      staging.resize(view.numel);
      for (size_t i = 0; i < view.numel; i++) staging[i] = float_to_bf16_bits(src[i]);
      out.write(staging.data(), view.numel * sizeof(uint16_t));
    } else {
      out.write(src, view.numel * sizeof(float));
    }
  }
}

void read_tensor_payload(std::FILE* in, const std::string& path, const ParamLayout& layout,
                         const std::vector<int>& order, bool reference_dtypes, float* params) {
  std::vector<uint16_t> staging;
  for (int index : order) {
    const TensorView& view = layout.tensors[static_cast<size_t>(index)];
    float* dst = params + view.offset;
    size_t got;
    if (stored_as_bf16(view, reference_dtypes)) {
      staging.resize(view.numel);
      got = std::fread(staging.data(), sizeof(uint16_t), view.numel, in);
      for (size_t i = 0; i < got; i++) dst[i] = bf16_bits_to_float(staging[i]);
    } else {
      got = std::fread(dst, sizeof(float), view.numel, in);
    }
    if (got != view.numel) throw FileError(path, "read failed in tensor " + view.name + " (file changed or I/O error)");
  }
}

void check_model_file_size(const std::string& path, int64_t header_bytes, int64_t payload_bytes,
                           const std::string& what) {
  struct stat file_stat;
  if (::stat(path.c_str(), &file_stat) != 0) throw_errno_file_error(path, "cannot stat model file");
  const int64_t expected = header_bytes + payload_bytes, actual = file_stat.st_size;
  if (actual < expected)
    throw FileError(path, "truncated model file: " + std::to_string(actual) + " bytes, the header (" + what +
                              ") needs " + std::to_string(expected));
  if (actual > expected)
    throw FileError(path, "model file has " + std::to_string(actual - expected) +
                              " trailing bytes after the parameters of " + what);
}

}  // namespace llmc
