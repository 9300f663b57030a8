// Open addressing with linear probing; the table doubles at half load until kMaxEntries, where it
// is cleared instead (simple, and rare: real text has far fewer distinct short pieces).
#include "llmc/tokenizer/piece_cache.h"

#include <cstring>

namespace llmc {

PieceCache::PieceCache() { clear_and_resize(size_t{1} << 14); }

void PieceCache::clear_and_resize(size_t capacity) {
  slots_.assign(capacity, Slot{0, 0, 0, 0, 0});
  mask_ = capacity - 1;
  entries_ = 0;
  keys_.clear();
  ids_.clear();
}

uint64_t PieceCache::hash_of(std::string_view piece) {
  // Multiply-xorshift over 8-byte words; quality is ample for a table that compares keys anyway.
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ (piece.size() * 0xC2B2AE3D27D4EB4FULL);
  size_t i = 0;
  for (; i + 8 <= piece.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, piece.data() + i, 8);
    h = (h ^ word) * 0xFF51AFD7ED558CCDULL;
    h ^= h >> 32;
  }
  if (i < piece.size()) {
    uint64_t word = 0;
    std::memcpy(&word, piece.data() + i, piece.size() - i);
    h = (h ^ word) * 0xFF51AFD7ED558CCDULL;
    h ^= h >> 32;
  }
  h *= 0xC4CEB9FE1A85EC53ULL;
  h ^= h >> 29;
  return h == 0 ? 1 : h;
}

const int32_t* PieceCache::find(std::string_view piece, uint64_t hash, uint32_t& count) const {
  for (size_t slot = hash & mask_;; slot = (slot + 1) & mask_) {
    const Slot& s = slots_[slot];
    if (s.hash == 0) return nullptr;
    if (s.hash == hash && s.key_bytes == piece.size() &&
        std::memcmp(keys_.data() + s.key_offset, piece.data(), piece.size()) == 0) {
      count = s.id_count;
      return ids_.data() + s.ids_offset;
    }
  }
}

void PieceCache::insert(std::string_view piece, uint64_t hash, const int32_t* ids, uint32_t count) {
  if (piece.size() > kMaxPieceBytes) return;
  if (entries_ >= kMaxEntries) {
    clear_and_resize(slots_.size());
  } else if ((entries_ + 1) * 2 > slots_.size()) {
    // Rehash into a table twice the size; keys and ids stay where they are.
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.size() * 2, Slot{0, 0, 0, 0, 0});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.hash == 0) continue;
      size_t slot = s.hash & mask_;
      while (slots_[slot].hash != 0) slot = (slot + 1) & mask_;
      slots_[slot] = s;
    }
  }
  size_t slot = hash & mask_;
  while (slots_[slot].hash != 0) slot = (slot + 1) & mask_;
  slots_[slot] = Slot{hash, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(ids_.size()),
                      static_cast<uint16_t>(piece.size()), static_cast<uint16_t>(count)};
  keys_.append(piece.data(), piece.size());
  ids_.insert(ids_.end(), ids, ids + count);
  ++entries_;
}

}  // namespace llmc
