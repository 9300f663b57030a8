// The token prefix table (see token_prefixes.h): the tokens in byte order, with a stack of the tokens that
// prefix the current one.
#include "llmc/tokenizer/token_prefixes.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace llmc {

namespace {

bool is_prefix(const std::string& prefix, const std::string& of) {
  return prefix.size() < of.size() && of.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

std::vector<int32_t> token_prefix_table(const BpeVocab& vocab, int32_t padded_vocab_size) {
  const int32_t ordinary = static_cast<int32_t>(vocab.token_bytes.size());
  if (padded_vocab_size < ordinary)
    throw std::invalid_argument("token_prefix_table: padded vocabulary of " + std::to_string(padded_vocab_size) +
                                " is smaller than the " + std::to_string(ordinary) + " tokens");
  // In byte order (std::string compares as unsigned bytes) every token's prefixes come before it, and every
  // token between a prefix p and the token also starts with p: so popping the stack until its top prefixes
  // the token leaves the token's longest prefix on top, and all its shorter ones below.
  std::vector<int32_t> order(static_cast<size_t>(ordinary));
  for (int32_t id = 0; id < ordinary; id++) order[static_cast<size_t>(id)] = id;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return vocab.token_bytes[static_cast<size_t>(a)] < vocab.token_bytes[static_cast<size_t>(b)];
  });
  std::vector<int32_t> table(static_cast<size_t>(padded_vocab_size), -1);
  std::vector<int32_t> prefixes;
  for (const int32_t id : order) {
    const std::string& bytes = vocab.token_bytes[static_cast<size_t>(id)];
    while (!prefixes.empty() && !is_prefix(vocab.token_bytes[static_cast<size_t>(prefixes.back())], bytes))
      prefixes.pop_back();
    if (!prefixes.empty()) table[static_cast<size_t>(id)] = prefixes.back();
    prefixes.push_back(id);
  }
  return table;
}

}  // namespace llmc
