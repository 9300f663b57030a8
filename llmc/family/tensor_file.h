// The tensor payload of a family's model file: the layout's tensors one after another in a given order, each
// in fp32 or in its reference dtype (bf16 tensors as bf16, round to nearest even), without the layout's
// padding. The speedrun families' files (llmc/model/modded44/, llmc/model/modded89/) put their own header
// in front of it; this file writes, reads and sizes what follows the header.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "llmc/base/atomic_file.h"
#include "llmc/family/param_layout.h"

namespace llmc {

// The dtype word of such a file's header.
enum class TensorFileDtype : int32_t {
  kFp32 = 0,       // every tensor fp32
  kReference = 1,  // each tensor in its reference dtype (TensorView::reference_dtype)
};

// Bytes of the payload: fp32 tensors 4 per element, bf16 tensors 2 when reference_dtypes.
int64_t tensor_payload_bytes(const ParamLayout& layout, bool reference_dtypes);

// Writes tensors `order` (indices into layout.tensors) of `params` (layout order).
void write_tensor_payload(AtomicFileWriter& out, const ParamLayout& layout, const std::vector<int>& order,
                          const float* params, bool reference_dtypes);

// Reads the payload from `in` (positioned after the header) into `params`, a layout.total_size buffer in
// layout order; bf16 values widen exactly. Throws FileError(path, "read failed in tensor <name> ...").
void read_tensor_payload(std::FILE* in, const std::string& path, const ParamLayout& layout,
                         const std::vector<int>& order, bool reference_dtypes, float* params);

// Throws FileError unless the file at `path` holds exactly header_bytes + payload_bytes: "truncated model
// file: N bytes, the header (<what>) needs M" or "model file has N trailing bytes after the parameters of
// <what>".
void check_model_file_size(const std::string& path, int64_t header_bytes, int64_t payload_bytes,
                           const std::string& what);

}  // namespace llmc
