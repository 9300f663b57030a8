// The fuzz targets' tokenizer (see tokenizer_fixture.h).
#include "test/fuzz/tokenizer_fixture.h"

namespace llmc::fuzz {

const Gpt2Tokenizer& gpt2_tokenizer() {
  static const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::from_directory(LLMC_FUZZ_VOCAB_DIR);
  return tokenizer;
}

}  // namespace llmc::fuzz
