// Per-thread cache of BPE results: piece bytes -> token ids. Natural text repeats a few tens of
// thousands of distinct words, so after warm-up nearly every piece is a cache hit; an open-addressing
// table with the keys and ids in flat arrays keeps a hit to one hash and one or two cache lines
// (std::unordered_map<std::string> spent most of the encode time in node chasing).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace llmc {

class PieceCache {
 public:
  PieceCache();

  // The cached ids of `piece` (and their count), or nullptr when absent.
  const int32_t* find(std::string_view piece, uint64_t hash, uint32_t& count) const;
  // Adds `piece` -> ids (the caller found it absent). Starts afresh past kMaxEntries so that memory
  // stays bounded on endless input of distinct pieces.
  void insert(std::string_view piece, uint64_t hash, const int32_t* ids, uint32_t count);

  static uint64_t hash_of(std::string_view piece);
  static constexpr size_t kMaxPieceBytes = 64;  // longer pieces are rare; not worth caching
  static constexpr size_t kMaxEntries = size_t{1} << 19;

 private:
  struct Slot {
    uint64_t hash;  // 0 marks an empty slot (hash_of never returns 0)
    uint32_t key_offset;
    uint32_t ids_offset;
    uint16_t key_bytes;
    uint16_t id_count;
  };
  void clear_and_resize(size_t capacity);
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t entries_ = 0;
  std::string keys_;
  std::vector<int32_t> ids_;
};

}  // namespace llmc
