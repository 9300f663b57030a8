// The generator's decoder, by the model registry (see load_decoder.h).
#include "llmc/generate/load_decoder.h"

#include "llmc/model/registry.h"

namespace llmc {

std::unique_ptr<CausalDecoder> load_decoder(const ModelSource& source, uint64_t init_seed, int max_chunk,
                                            cudaStream_t stream) {
  ModelStart start = locate_model(source.file.empty() ? source.preset : source.file, "", /*world_size=*/1);
  if (start.params.empty()) start.params = start.family->init_params(init_seed, /*world_size=*/1);
  return start.family->make_decoder(start.params, max_chunk, stream);
}

}  // namespace llmc
