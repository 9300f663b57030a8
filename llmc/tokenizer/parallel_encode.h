// Encoding one long text on several threads with exactly the tokens a single thread would give.
// The text is cut only at "safe" points where GPT-2's regex is known to end one piece and start
// the next no matter what surrounds the cut, so each chunk can be encoded on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "llmc/tokenizer/tokenizer.h"

namespace llmc {

// True when `position` (0 < position < text.size()) is a safe cut: text[position-2] is a printable
// ASCII non-space, text[position-1] is '\n', text[position] is a printable ASCII non-space.
// Why it is safe: no regex piece can span a non-space followed by '\n' except the '\n' itself, so
// a piece starts at the '\n'; a lone '\n' before a non-space is the piece "\n" whether the text
// ends after it or not; and the pattern has no lookbehind, so what follows is cut the same way.
bool is_safe_cut(std::string_view text, size_t position);

// Chunk boundaries [0, b1, ..., text.size()]: each chunk is at least `target_chunk_bytes` long
// (the cut is the first safe point at or after the target) except the last.
std::vector<size_t> safe_chunk_boundaries(std::string_view text, size_t target_chunk_bytes);

// Encodes `text` on `threads` threads (each with its own EncodeContext); same result as
// tokenizer.encode. Throws InvalidUtf8Error with the offset in `text`.
std::vector<int32_t> encode_parallel(const Gpt2Tokenizer& tokenizer, std::string_view text, int threads,
                                     size_t target_chunk_bytes = 1 << 20);

}  // namespace llmc
