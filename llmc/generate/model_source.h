// What a --model argument of the generator names: a model file, a checkpoint prefix (PREFIX_model.bin),
// a run directory (its newest complete checkpoint), or a preset shape with random weights (for
// benchmarks). Resolved on the host before anything touches the device.
#pragma once

#include <string>

namespace llmc {

struct ModelSource {
  std::string file;    // the model file to read, or "" for a preset
  std::string preset;  // "d12", ... when the weights are random
  std::string label;   // what the logs say it is
};

// Throws std::runtime_error("--model X: ...") when X is none of those, or a run directory holds no
// complete checkpoint.
ModelSource resolve_model_source(const std::string& argument);

}  // namespace llmc
