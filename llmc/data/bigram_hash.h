// The 2026-07-17 record's bigram hash, computed on the host with the batch (docs/data.md#bigram-hash): the
// row of the bigram embedding table each position reads, from its token and the one before it.
#pragma once

#include <cstdint>

namespace llmc {

constexpr int32_t kBigramRows = 377280;  // the record's bigram table; the hash is mod rows - 1
constexpr int32_t kBigramCurrentFactor = 36313;
constexpr int32_t kBigramPreviousFactor = 27191;

// For a table of `rows` rows (the record: kBigramRows), with m = rows - 1: hashes[0] = m (the table's last
// row); hashes[t] = ((36,313 tokens[t]) XOR (27,191 p)) mod m in int32 arithmetic, with p = tokens[t - 1] for
// t >= 2 and p = m for t = 1 (the record hashes in place, so position 1 sees position 0's hash as its previous
// token; 27,191 x 377,279 wraps to 1,668,658,697). Crosses documents. Tokens must be non-negative, rows at
// least 2; hashes may alias tokens, as in the record.
void bigram_hashes(int32_t* hashes, const int32_t* tokens, int count, int32_t rows);

}  // namespace llmc
