// The trainer's samples (--sample-every, --sample-tokens, --sample-prompt): rank 0 continues a prompt
// with the model being trained, through any CausalDecoder (the trainer hands it one that reads the live
// parameter buffer), and returns the text as log lines. Seeded the same every time, so successive
// samples differ only by what the model learnt.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "llmc/family/decoder.h"
#include "llmc/tokenizer/tokenizer.h"

namespace llmc {

class TrainingSamples {
 public:
  // Loads the tokenizer from vocab_dir and encodes the prompt ("" starts from <|endoftext|>). Throws
  // std::invalid_argument naming --sample-every when the model's vocabulary is not GPT-2's, and
  // --sample-prompt when the prompt is not UTF-8 or leaves no room in the context.
  TrainingSamples(std::unique_ptr<CausalDecoder> decoder, const std::string& vocab_dir, const std::string& prompt,
                  int tokens, uint64_t seed);

  // "# sample step:N ..." followed by the text, each of its lines as "# | line". The caller makes sure
  // the parameters are complete (all updates applied) in the decoder's stream order.
  std::vector<std::string> sample(int step);

 private:
  std::string quoted_prompt() const;

  std::unique_ptr<CausalDecoder> decoder_;
  Gpt2Tokenizer tokenizer_;
  std::string prompt_text_;
  std::vector<int32_t> prompt_;
  int tokens_;
  uint64_t seed_;
};

}  // namespace llmc
