// The BOS-aligned packing rule: shard indexing, dealing a step, gathering a sequence and its
// cu_seqlens. See document_packing.h; the rule is the speedrun reference's BOSFinder.next_batch.
#include "llmc/data/document_packing.h"

#include <algorithm>
#include <stdexcept>

#include "llmc/data/shards.h"
#include "llmc/base/file_io.h"

namespace llmc {
namespace {

void check_capacity(size_t entries, int cu_seqlens_length, int64_t T, const std::string& where) {
  if (entries > static_cast<size_t>(cu_seqlens_length)) {
    throw FileError(where, "a sequence of " + std::to_string(T) + " tokens holds " + std::to_string(entries - 1) +
                               " documents, more than cu_seqlens' " + std::to_string(cu_seqlens_length) +
                               " entries allow (raise the cu_seqlens length)");
  }
}

}  // namespace

IndexedShard read_indexed_shard(const std::string& path, int vocab_size) {
  IndexedShard shard;
  shard.path = path;
  shard.tokens = read_shard_tokens(path);
  for (size_t i = 0; i < shard.tokens.size(); ++i) {
    const uint16_t token = shard.tokens[i];
    if (token >= vocab_size) {
      throw FileError(path, "token at index " + std::to_string(i) + " has value " + std::to_string(token) +
                                ", not below vocab_size " + std::to_string(vocab_size));
    }
    if (token == kBosToken) shard.document_starts.push_back(static_cast<int64_t>(i));
  }
  if (shard.document_starts.empty()) {
    throw FileError(path, "no document start (token " + std::to_string(kBosToken) + ") in its " +
                              std::to_string(shard.tokens.size()) +
                              " tokens; the BOS-aligned loader needs documents that "
                              "begin with <|endoftext|>");
  }
  return shard;
}

bool deal_step(const IndexedShard& shard, int64_t first_document, int64_t T, int64_t max_document_tokens,
               int sequences, DealtStep* step) {
  const std::vector<int64_t>& starts = shard.document_starts;
  const auto documents = static_cast<int64_t>(starts.size());
  const auto shard_end = static_cast<int64_t>(shard.tokens.size());
  step->sequences.assign(static_cast<size_t>(sequences), {});
  int64_t document = first_document;
  for (auto& pieces : step->sequences) {
    int64_t length = 0;
    while (length <= T) {  // until the sequence holds T+1 tokens
      if (document >= documents) return false;
      const int64_t begin = starts[static_cast<size_t>(document)];
      const int64_t next_start = document + 1 < documents ? starts[static_cast<size_t>(document + 1)] : shard_end;
      const int64_t end = std::min({next_start, begin + max_document_tokens, begin + (T + 1 - length)});
      pieces.push_back(TokenRange{begin, end});
      length += end - begin;
      ++document;
    }
  }
  step->next_document = document;
  return true;
}

int default_cu_seqlens_length(int64_t T) {
  const int64_t documents = T / 300;
  return static_cast<int>(std::max<int64_t>(128, (documents + 127) / 128 * 128));
}

void pack_sequence(const IndexedShard& shard, const std::vector<TokenRange>& pieces, int64_t T,
                   int cu_seqlens_length, const std::string& where, PackedSequence* out) {
  check_capacity(pieces.size() + 1, cu_seqlens_length, T, where);
  out->inputs.resize(static_cast<size_t>(T));
  out->targets.resize(static_cast<size_t>(T));
  out->cu_seqlens.assign(static_cast<size_t>(cu_seqlens_length), static_cast<int32_t>(T));
  out->cu_seqlens[0] = 0;
  int64_t position = 0;  // in the T+1 tokens of the sequence
  for (size_t p = 0; p < pieces.size(); ++p) {
    for (int64_t i = pieces[p].begin; i < pieces[p].end; ++i, ++position) {
      const int32_t token = shard.tokens[static_cast<size_t>(i)];
      if (position < T) out->inputs[static_cast<size_t>(position)] = token;
      if (position > 0) out->targets[static_cast<size_t>(position - 1)] = token;
    }
    out->cu_seqlens[p + 1] = static_cast<int32_t>(std::min(position, T));
  }
  if (position != T + 1) throw FileError(where, "dealt " + std::to_string(position) + " tokens, not T+1");
  out->num_documents = static_cast<int>(pieces.size());
}

std::vector<int32_t> cu_seqlens_from_bos(const int32_t* inputs, int64_t T, int cu_seqlens_length,
                                         const std::string& where, int* num_documents) {
  std::vector<int32_t> cu{0};
  for (int64_t t = 0; t < T; ++t)
    if (inputs[t] == kBosToken) cu.push_back(static_cast<int32_t>(t));
  cu.push_back(static_cast<int32_t>(T));
  check_capacity(cu.size(), cu_seqlens_length, T, where);
  *num_documents = static_cast<int>(cu.size()) - 1;
  cu.resize(static_cast<size_t>(cu_seqlens_length), static_cast<int32_t>(T));
  return cu;
}

}  // namespace llmc
