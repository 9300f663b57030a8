// The one place that knows the model families the generator can run: it reads a model file's magic and
// builds the matching CausalDecoder. GPT-2 (llm.c model files, versions 3 and 5, and the dN presets with
// random weights) is the only family so far; the speedrun model joins here with its own file format.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "llmc/family/decoder.h"
#include "llmc/generate/model_source.h"

namespace llmc {

// max_chunk: the most tokens one device pass takes (prefill is split into such chunks); init_seed: the
// random weights of a preset. Throws std::runtime_error naming the file for an unknown or broken file.
std::unique_ptr<CausalDecoder> load_decoder(const ModelSource& source, uint64_t init_seed, int max_chunk,
                                            cudaStream_t stream);

}  // namespace llmc
