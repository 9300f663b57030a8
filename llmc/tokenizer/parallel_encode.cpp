// Chunking at safe cuts and a fork-join over chunks (llmc/base/parallel_for.h); results are concatenated in text order
// so the output does not depend on the number of threads.
#include "llmc/tokenizer/parallel_encode.h"

#include <algorithm>
#include <memory>

#include "llmc/base/parallel_for.h"

namespace llmc {
namespace {
bool printable_ascii_non_space(char c) { return c > 0x20 && c < 0x7F; }
}  // namespace

bool is_safe_cut(std::string_view text, size_t position) {
  return position >= 2 && position < text.size() && text[position - 1] == '\n' &&
         printable_ascii_non_space(text[position - 2]) && printable_ascii_non_space(text[position]);
}

std::vector<size_t> safe_chunk_boundaries(std::string_view text, size_t target_chunk_bytes) {
  std::vector<size_t> boundaries{0};
  const size_t target = std::max<size_t>(target_chunk_bytes, 1);
  // A cut sits just after a newline; the next chunk may end no earlier than cut + target.
  size_t search_from = target - 1;
  while (search_from < text.size()) {
    const size_t newline = text.find('\n', search_from);
    if (newline == std::string_view::npos) break;
    const size_t cut = newline + 1;
    if (is_safe_cut(text, cut)) {
      boundaries.push_back(cut);
      search_from = cut + target - 1;
    } else {
      search_from = newline + 1;
    }
  }
  boundaries.push_back(text.size());
  if (boundaries.size() >= 2 && boundaries[boundaries.size() - 2] == text.size()) boundaries.pop_back();
  return boundaries;
}

std::vector<int32_t> encode_parallel(const Gpt2Tokenizer& tokenizer, std::string_view text, int threads,
                                     size_t target_chunk_bytes) {
  const size_t bad = first_invalid_utf8_byte(text);
  if (bad != kValidUtf8) throw InvalidUtf8Error(bad);
  const std::vector<size_t> bounds = safe_chunk_boundaries(text, target_chunk_bytes);
  const size_t chunks = bounds.size() - 1;
  std::vector<std::vector<int32_t>> chunk_ids(chunks);
  std::vector<std::unique_ptr<EncodeContext>> contexts(static_cast<size_t>(std::max(threads, 1)));
  parallel_for(chunks, threads, [&](int worker, size_t c) {
    if (!contexts[worker]) contexts[worker] = std::make_unique<EncodeContext>(tokenizer);
    const std::string_view chunk = text.substr(bounds[c], bounds[c + 1] - bounds[c]);
    chunk_ids[c].reserve(chunk.size() / 3 + 16);
    tokenizer.encode_valid_utf8(*contexts[worker], chunk, chunk_ids[c]);
  });
  size_t total = 0;
  for (const auto& ids : chunk_ids) total += ids.size();
  std::vector<int32_t> out;
  out.reserve(total);
  for (const auto& ids : chunk_ids) out.insert(out.end(), ids.begin(), ids.end());
  return out;
}

}  // namespace llmc
