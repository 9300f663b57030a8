// The generator's decoder for a --model argument: the model registry (llmc/model/registry.h) says which
// family a preset or a model file is, and the family builds its KV-cache decoder.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "llmc/family/decoder.h"
#include "llmc/generate/model_source.h"

namespace llmc {

// max_chunk: the most tokens one device pass takes (prefill is split into such chunks); init_seed: the
// random weights of a preset (resolve_model_source checked the name). Throws FileError naming the file for
// an unknown or broken file, std::invalid_argument for a family without a decoder.
std::unique_ptr<CausalDecoder> load_decoder(const ModelSource& source, uint64_t init_seed, int max_chunk,
                                            cudaStream_t stream);

}  // namespace llmc
