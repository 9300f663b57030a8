// The token prefix table (llmc/tokenizer/token_prefixes.h) on small hand-made vocabularies whose answers
// are written out by hand: the longest proper prefix, not the nearest token in byte order; bytes above
// 0x7f ordered as unsigned; -1 for single bytes and the padding. (Against tiktoken's whole GPT-2
// vocabulary: test_token_prefixes_tiktoken.py.)
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/tokenizer/token_prefixes.h"

namespace {

llmc::BpeVocab vocab_of(const std::vector<std::string>& tokens) {
  llmc::BpeVocab vocab;
  vocab.token_bytes = tokens;
  return vocab;
}

TEST(TokenPrefixes, LongestProperPrefixThatIsAToken) {
  //                      0    1    2     3      4       5      6     7
  const auto vocab = vocab_of({"a", "b", "ab", "abc", "abcd", "abd", "ac", "abx"});
  const std::vector<int32_t> table = llmc::token_prefix_table(vocab, 10);
  // "abd" follows "abcd" in byte order but its longest prefix is "ab"; "abx" likewise; "ac" -> "a".
  const std::vector<int32_t> expected = {-1, -1, 0, 2, 3, 2, 0, 2, -1, -1};
  EXPECT_EQ(table, expected);
}

TEST(TokenPrefixes, SkipsLengthsThatAreNoTokenAndOrdersBytesUnsigned) {
  const std::string high = "\xe2\x82";  // two bytes of a three-byte UTF-8 character, above 0x7f
  //                          0       1       2             3               4
  const auto vocab = vocab_of({"x", "xyzw", high, high + "\xac", std::string("\x7f")});
  const std::vector<int32_t> table = llmc::token_prefix_table(vocab, 5);
  // "xyzw": neither "xyz" nor "xy" is a token, "x" is; "\xe2\x82\xac" -> "\xe2\x82" (sorted after 0x7f).
  const std::vector<int32_t> expected = {-1, 0, -1, 2, -1};
  EXPECT_EQ(table, expected);
}

TEST(TokenPrefixes, RefusesAPaddedSizeBelowTheVocabulary) {
  EXPECT_THROW(llmc::token_prefix_table(vocab_of({"a", "ab"}), 1), std::invalid_argument);
}

}  // namespace
