// The bigram hash (llmc/data/bigram_hash.h): positions 0 and 1 with the values the record's int32 arithmetic
// gives (worked out with numpy int32: 27,191 x 377,279 wraps to 1,668,658,697, which is 330,959 mod 377,279),
// and every position of a long random sequence against a second formula written here in int64 with explicit
// wrap-around; hashing in place gives the same.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "llmc/data/bigram_hash.h"

namespace {

TEST(BigramHash, FirstPositionsAsTheRecordComputesThem) {
  const std::vector<int32_t> tokens = {50256, 0, 5, 7};
  std::vector<int32_t> hashes(tokens.size());
  llmc::bigram_hashes(hashes.data(), tokens.data(), static_cast<int>(tokens.size()), llmc::kBigramRows);
  EXPECT_EQ(hashes[0], 377279);
  EXPECT_EQ(hashes[1], 330959);  // (0 XOR 1,668,658,697) mod 377,279
  const std::vector<int32_t> more = {50256, 5, 7};
  llmc::bigram_hashes(hashes.data(), more.data(), 3, llmc::kBigramRows);
  EXPECT_EQ(hashes[1], 67643);   // (36,313 x 5 XOR 1,668,658,697) mod 377,279
  EXPECT_EQ(hashes[2], 127996);  // (36,313 x 7 XOR 27,191 x 5) mod 377,279
}

// int32 multiplication as a two's-complement machine does it, through int64.
int64_t int32_wrap(int64_t value) {
  value &= 0xffffffffLL;
  return value >= 0x80000000LL ? value - 0x100000000LL : value;
}

TEST(BigramHash, EveryPositionMatchesAnInt64FormulaAndInPlaceAgrees) {
  std::mt19937 rng(377);
  std::uniform_int_distribution<int32_t> token(0, 50303);
  std::vector<int32_t> tokens(4096);
  for (int32_t& t : tokens) t = token(rng);
  std::vector<int32_t> hashes(tokens.size());
  llmc::bigram_hashes(hashes.data(), tokens.data(), static_cast<int>(tokens.size()), llmc::kBigramRows);
  for (size_t t = 1; t < tokens.size(); t++) {
    const int64_t previous = t == 1 ? 377279 : tokens[t - 1];
    const int64_t mixed = int32_wrap(36313LL * tokens[t]) ^ int32_wrap(27191LL * previous);
    const int64_t expected = ((mixed % 377279) + 377279) % 377279;
    ASSERT_EQ(hashes[t], expected) << "position " << t;
    ASSERT_LT(hashes[t], llmc::kBigramRows);
  }
  std::vector<int32_t> in_place = tokens;
  llmc::bigram_hashes(in_place.data(), in_place.data(), static_cast<int>(in_place.size()), llmc::kBigramRows);
  EXPECT_EQ(in_place, hashes);
}

TEST(BigramHash, RefusesNegativeTokens) {
  const std::vector<int32_t> tokens = {1, -2};
  std::vector<int32_t> hashes(2);
  EXPECT_THROW(llmc::bigram_hashes(hashes.data(), tokens.data(), 2, llmc::kBigramRows), std::invalid_argument);
  EXPECT_THROW(llmc::bigram_hashes(hashes.data(), tokens.data(), 1, 1), std::invalid_argument);
}

}  // namespace
