// The bigram hash (see bigram_hash.h): int32 products that wrap as the record's int32 tensors do.
#include "llmc/data/bigram_hash.h"

#include <stdexcept>
#include <string>

namespace llmc {

namespace {

// a * b with int32 wrap-around (defined here through uint32, where C++ leaves signed overflow undefined).
int32_t wrapping_product(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) * static_cast<uint32_t>(b));
}

// Python's (and torch's) modulus: the result has the divisor's sign.
int32_t floor_mod(int32_t value, int32_t divisor) {
  const int32_t r = value % divisor;
  return r < 0 ? r + divisor : r;
}

}  // namespace

void bigram_hashes(int32_t* hashes, const int32_t* tokens, int count, int32_t rows) {
  if (rows < 2)
    throw std::invalid_argument("bigram_hashes: the table needs at least 2 rows, got " + std::to_string(rows));
  const int32_t modulus = rows - 1;
  int32_t previous = 0;
  for (int t = 0; t < count; t++) {
    const int32_t token = tokens[t];  // read before hashes[t] (which may be the same int) is written
    if (token < 0)
      throw std::invalid_argument("bigram_hashes: negative token " + std::to_string(token) + " at " +
                                  std::to_string(t));
    const int32_t hash = t == 0 ? modulus
                                : floor_mod(wrapping_product(kBigramCurrentFactor, token) ^
                                                wrapping_product(kBigramPreviousFactor, t == 1 ? modulus : previous),
                                            modulus);
    previous = token;
    hashes[t] = hash;
  }
}

}  // namespace llmc
