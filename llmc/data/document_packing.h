// Packing whole documents into fixed-length sequences, the speedrun's BOS-aligned rule
// (docs/bos_loader.md): a shard indexed by its document starts (token 50256), the dealing of one
// step's sequences from consecutive documents, and a dealt sequence gathered into inputs, targets and
// the padded cu_seqlens the window attention takes. Pure functions of the shard: the loaders build on them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace llmc {

constexpr uint16_t kBosToken = 50256;  // <|endoftext|>: every document starts with it

// A shard's tokens and the positions of its BOS tokens (document starts), validated.
struct IndexedShard {
  std::string path;
  std::vector<uint16_t> tokens;
  std::vector<int64_t> document_starts;
};

// Reads a shard, checks every token is below vocab_size and that it holds at least one BOS.
// Throws std::runtime_error("<path>: <problem>").
IndexedShard read_indexed_shard(const std::string& path, int vocab_size);

// Tokens [begin, end) of a shard.
struct TokenRange {
  int64_t begin;
  int64_t end;
};

// One step dealt: sequences[s] lists the document pieces of sequence s (each sequence T+1 tokens),
// next_document is the index of the first document the step did not touch.
struct DealtStep {
  std::vector<std::vector<TokenRange>> sequences;
  int64_t next_document = 0;
};

// Deals `sequences` sequences of T+1 tokens from documents first_document.. of the shard, in order:
// sequence 0 takes consecutive documents until it holds exactly T+1 tokens, then sequence 1, ...
// Each document is cut to its first max_document_tokens tokens (the rest is dropped) and a
// sequence's last document is cut to fill it (its rest is dropped too). A document runs from its BOS
// to the next BOS or the shard's end. Returns false, leaving *step unspecified, when the shard's
// documents run out first (the step is then dealt from the next shard).
bool deal_step(const IndexedShard& shard, int64_t first_document, int64_t T, int64_t max_document_tokens,
               int sequences, DealtStep* step);

// A sequence ready for a model: inputs = tokens[0, T), targets = tokens[1, T], and
// cu_seqlens = [0, document ends ..., T] padded with T to a fixed length (the window attention's
// layout; the last document ends at T since the T+1-th token is only a target).
struct PackedSequence {
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
  std::vector<int32_t> cu_seqlens;
  int num_documents = 0;  // documents in inputs (cu_seqlens entries used, minus one)
};

// The reference's cu_seqlens length for T tokens: T / 300 (median documents are ~400 tokens)
// rounded up to a multiple of 128; 128 for T = 32,768, 896 for the validation's 262,144.
int default_cu_seqlens_length(int64_t T);

// Gathers the pieces (T+1 tokens in all) into *out. Throws std::runtime_error naming `where` if the
// documents do not fit cu_seqlens_length - 1 entries.
void pack_sequence(const IndexedShard& shard, const std::vector<TokenRange>& pieces, int64_t T,
                   int cu_seqlens_length, const std::string& where, PackedSequence* out);

// cu_seqlens of T tokens split at every BOS position (validation: documents are not aligned to the
// sequence, the first one may have begun before it). Throws like pack_sequence.
std::vector<int32_t> cu_seqlens_from_bos(const int32_t* inputs, int64_t T, int cu_seqlens_length,
                                         const std::string& where, int* num_documents);

}  // namespace llmc
