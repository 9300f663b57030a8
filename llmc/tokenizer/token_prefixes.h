// The prefix table of the #89 recipe's prefix-token loss: for every token id, the id of its longest proper
// byte-prefix that is itself a GPT-2 token (docs/tokenizer.md#token-prefixes). Host-only.
#pragma once

#include <cstdint>
#include <vector>

#include "llmc/tokenizer/bpe_vocab.h"

namespace llmc {

// padded_vocab_size entries (at least the vocabulary's ordinary tokens): P[j] for each ordinary token j,
// -1 where no proper prefix is a token (the single bytes), for <|endoftext|> and for the padding ids.
// Throws std::invalid_argument when padded_vocab_size is smaller than the ordinary tokens.
std::vector<int32_t> token_prefix_table(const BpeVocab& vocab, int32_t padded_vocab_size);

}  // namespace llmc
