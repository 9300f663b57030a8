// Model family dispatch for the generator (see load_decoder.h).
#include "llmc/generate/load_decoder.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/base/file_io.h"
#include "llmc/model/gpt2/gpt2_decoder.h"
#include "llmc/model/gpt2/gpt2_model_file.h"
#include "llmc/model/gpt2/gpt2_init.h"

namespace llmc {

namespace {

// The first int32 of a model file: each family's files start with their own magic number.
int32_t read_magic(const std::string& path) {
  const FileHandle file = open_file(path, "rb", "model file");
  int32_t magic = 0;
  if (std::fread(&magic, sizeof magic, 1, file.get()) != 1) throw FileError(path, "too short to be a model file");
  return magic;
}

std::unique_ptr<CausalDecoder> make_gpt2(const GPT2Layout& layout, const std::vector<float>& params, int max_chunk,
                                         cudaStream_t stream) {
  const int chunk = std::min(max_chunk, layout.config.max_seq_len);
  return std::make_unique<GPT2Decoder>(layout, params, chunk, stream);
}

}  // namespace

std::unique_ptr<CausalDecoder> load_decoder(const ModelSource& source, uint64_t init_seed, int max_chunk,
                                            cudaStream_t stream) {
  if (source.file.empty()) {
    const GPT2Layout layout = make_param_layout(config_from_name(source.preset), /*world_size=*/1);
    return make_gpt2(layout, init_gpt2_params(layout, init_seed), max_chunk, stream);
  }
  const int32_t magic = read_magic(source.file);
  if (magic == kGpt2ModelMagic) {
    GPT2Layout layout;
    const std::vector<float> params = load_gpt2_model_file(source.file, /*world_size=*/1, &layout);
    return make_gpt2(layout, params, max_chunk, stream);
  }
  throw FileError(source.file, "not a model file of a known family (GPT-2 llm.c files start with " +
                                    std::to_string(kGpt2ModelMagic) + ", this one with " + std::to_string(magic) + ")");
}

}  // namespace llmc
