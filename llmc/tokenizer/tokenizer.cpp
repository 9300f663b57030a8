// BPE merging, the per-thread piece cache, and decode. Merge order follows tiktoken: repeatedly
// merge the adjacent pair of lowest rank, the leftmost one on ties. Short pieces (nearly all of
// them) use a flat array; long pieces use a heap over a linked list so that a megabyte of
// punctuation costs n log n, not n^2.
#include "llmc/tokenizer/tokenizer.h"

#include "llmc/tokenizer/piece_cache.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>

namespace llmc {
namespace {

constexpr int32_t kNoRank = std::numeric_limits<int32_t>::max();
// Pieces up to this many bytes merge in a flat array (quadratic but tiny); longer ones use the heap.
constexpr size_t kFlatMergeMaxBytes = 128;

// Open-addressing hash table (left id, right id) -> (rank, merged id). Built once, read-only after;
// std::unordered_map's node chasing costs noticeably more in the merge inner loop.
class PairTable {
 public:
  struct Entry {
    uint64_t key;
    int32_t rank;
    int32_t merged;
  };

  explicit PairTable(const std::vector<BpeMerge>& merges) {
    size_t capacity = 16;
    while (capacity < merges.size() * 2) capacity <<= 1;
    mask_ = capacity - 1;
    entries_.assign(capacity, Entry{kEmpty, kNoRank, -1});
    for (const BpeMerge& merge : merges) {
      Entry& slot = entries_[find_slot(key_of(merge.left, merge.right))];
      // A pair can only make one token (its concatenation); keep the lowest rank if listed twice.
      if (slot.key == kEmpty || merge.rank < slot.rank) {
        slot = Entry{key_of(merge.left, merge.right), merge.rank, merge.merged};
      }
    }
  }

  const Entry& lookup(int32_t left, int32_t right) const {
    return entries_[find_slot(key_of(left, right))];  // an empty slot has rank kNoRank
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t key_of(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  size_t find_slot(uint64_t key) const {
    size_t slot = static_cast<size_t>((key * 0x9E3779B97F4A7C15ULL) >> 20) & mask_;
    while (entries_[slot].key != kEmpty && entries_[slot].key != key) slot = (slot + 1) & mask_;
    return slot;
  }
  size_t mask_ = 0;
  std::vector<Entry> entries_;
};

struct HeapPair {
  int32_t rank;
  int32_t left;  // node index = start byte of the left part; smaller is further left
  int32_t right;
  int32_t left_id;
  int32_t right_id;
  bool operator>(const HeapPair& other) const {
    return rank != other.rank ? rank > other.rank : left > other.left;
  }
};

// Scratch buffers of the merges, reused from piece to piece.
struct MergeScratch {
  std::vector<int32_t> ids, merged, ranks, prev, next;
  std::vector<HeapPair> heap;
};

// Short pieces: ids[i] is part i; ranks[i]/merged[i] describe the pair (part i, part i+1). Quadratic,
// but a piece this short is cheaper to scan than to keep a heap for.
void merge_in_flat_array(const BpeVocab& vocab, const PairTable& pairs, std::string_view piece, MergeScratch& s,
                         std::vector<int32_t>& out) {
  const size_t n = piece.size();
  s.ids.resize(n);
  s.ranks.resize(n);
  s.merged.resize(n);
  for (size_t i = 0; i < n; ++i) s.ids[i] = vocab.byte_token[static_cast<unsigned char>(piece[i])];
  auto set_pair = [&](size_t i, size_t parts) {
    if (i + 1 < parts) {
      const PairTable::Entry& e = pairs.lookup(s.ids[i], s.ids[i + 1]);
      s.ranks[i] = e.rank;
      s.merged[i] = e.merged;
    } else {
      s.ranks[i] = kNoRank;
    }
  };
  size_t parts = n;
  for (size_t i = 0; i < parts; ++i) set_pair(i, parts);
  while (parts > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < parts; ++i) {
      if (s.ranks[i] < s.ranks[best]) best = i;
    }
    if (s.ranks[best] == kNoRank) break;
    s.ids[best] = s.merged[best];
    const size_t tail = parts - best - 2;
    std::memmove(&s.ids[best + 1], &s.ids[best + 2], tail * sizeof(int32_t));
    std::memmove(&s.ranks[best + 1], &s.ranks[best + 2], tail * sizeof(int32_t));
    std::memmove(&s.merged[best + 1], &s.merged[best + 2], tail * sizeof(int32_t));
    --parts;
    if (best > 0) set_pair(best - 1, parts);
    set_pair(best, parts);
  }
  out.insert(out.end(), s.ids.begin(), s.ids.begin() + parts);
}

// Long pieces: a linked list of parts (node = start byte) and a min-heap of candidate pairs; stale heap
// entries are recognised by comparing the recorded ids with the current ones.
void merge_with_heap(const BpeVocab& vocab, const PairTable& pairs, std::string_view piece, MergeScratch& s,
                     std::vector<int32_t>& out) {
  const size_t n = piece.size();
  s.ids.resize(n);
  s.prev.resize(n);
  s.next.resize(n);
  s.heap.clear();
  for (size_t i = 0; i < n; ++i) {
    s.ids[i] = vocab.byte_token[static_cast<unsigned char>(piece[i])];
    s.prev[i] = static_cast<int32_t>(i) - 1;
    s.next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  auto push_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const PairTable::Entry& e = pairs.lookup(s.ids[left], s.ids[right]);
    if (e.rank == kNoRank) return;
    s.heap.push_back(HeapPair{e.rank, left, right, s.ids[left], s.ids[right]});
    std::push_heap(s.heap.begin(), s.heap.end(), std::greater<HeapPair>());
  };
  for (size_t i = 0; i + 1 < n; ++i) push_pair(static_cast<int32_t>(i), static_cast<int32_t>(i + 1));
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), std::greater<HeapPair>());
    const HeapPair top = s.heap.back();
    s.heap.pop_back();
    // Dead nodes have their ids set to -1, so one comparison covers liveness and staleness.
    if (s.ids[top.left] != top.left_id || s.next[top.left] != top.right ||
        s.ids[top.right] != top.right_id) {
      continue;
    }
    s.ids[top.left] = pairs.lookup(top.left_id, top.right_id).merged;
    s.ids[top.right] = -1;
    const int32_t after = s.next[top.right];
    s.next[top.left] = after;
    if (after >= 0) s.prev[after] = top.left;
    push_pair(s.prev[top.left], top.left);
    push_pair(top.left, after);
  }
  for (int32_t node = 0; node >= 0; node = s.next[node]) out.push_back(s.ids[node]);
}

}  // namespace

struct Gpt2Tokenizer::Tables {
  BpeVocab vocab;
  PairTable pairs;
  Gpt2Pretokenizer pretokenizer;
  size_t longest_token_bytes = 0;
  explicit Tables(BpeVocab v) : vocab(std::move(v)), pairs(vocab.merges) {
    for (const std::string& bytes : vocab.token_bytes) {
      longest_token_bytes = std::max(longest_token_bytes, bytes.size());
    }
  }
};

struct EncodeContext::State {
  PretokenizerScratch regex_scratch;
  PieceCache cache;
  std::string key;  // reused lookup key for token_ids (no allocation once it has grown)
  MergeScratch merge;
  explicit State(const Gpt2Pretokenizer& p) : regex_scratch(p) {}
};

EncodeContext::EncodeContext(const Gpt2Tokenizer& tokenizer)
    : state_(std::make_unique<State>(tokenizer.tables_->pretokenizer)) {}
EncodeContext::~EncodeContext() = default;

Gpt2Tokenizer::Gpt2Tokenizer(BpeVocab vocab) : tables_(std::make_unique<Tables>(std::move(vocab))) {}
Gpt2Tokenizer Gpt2Tokenizer::from_directory(const std::string& vocab_dir) {
  return Gpt2Tokenizer(load_bpe_vocab_dir(vocab_dir));
}
Gpt2Tokenizer::~Gpt2Tokenizer() = default;
Gpt2Tokenizer::Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept = default;
Gpt2Tokenizer& Gpt2Tokenizer::operator=(Gpt2Tokenizer&&) noexcept = default;


void Gpt2Tokenizer::encode(EncodeContext& context, std::string_view text, std::vector<int32_t>& out) const {
  const size_t bad = first_invalid_utf8_byte(text);
  if (bad != kValidUtf8) throw InvalidUtf8Error(bad);
  encode_valid_utf8(context, text, out);
}

std::vector<int32_t> Gpt2Tokenizer::encode(EncodeContext& context, std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 16);
  encode(context, text, out);
  return out;
}

void Gpt2Tokenizer::encode_valid_utf8(EncodeContext& context, std::string_view text,
                                      std::vector<int32_t>& out) const {
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = tables_->pretokenizer.piece_end(context.state_->regex_scratch, text, start);
    encode_piece(context, text.substr(start, end - start), out);
    start = end;
  }
}

void Gpt2Tokenizer::encode_piece(EncodeContext& context, std::string_view piece,
                                 std::vector<int32_t>& out) const {
  const BpeVocab& vocab = tables_->vocab;
  const PairTable& pairs = tables_->pairs;
  EncodeContext::State& s = *context.state_;
  if (piece.size() == 1) {
    out.push_back(vocab.byte_token[static_cast<unsigned char>(piece[0])]);
    return;
  }
  const bool cacheable = piece.size() <= PieceCache::kMaxPieceBytes;
  const uint64_t hash = cacheable ? PieceCache::hash_of(piece) : 0;
  if (cacheable) {
    uint32_t count = 0;
    if (const int32_t* hit = s.cache.find(piece, hash, count)) {
      out.insert(out.end(), hit, hit + count);
      return;
    }
  }
  const bool could_be_token = piece.size() <= tables_->longest_token_bytes;
  if (could_be_token) s.key.assign(piece.data(), piece.size());
  const size_t out_start = out.size();
  const size_t n = piece.size();
  // A piece that is itself a token is that token (tiktoken's rule, and a shortcut).
  auto whole = could_be_token ? vocab.token_ids.find(s.key) : vocab.token_ids.end();
  if (whole != vocab.token_ids.end()) {
    out.push_back(whole->second);
  } else if (n <= kFlatMergeMaxBytes) {
    merge_in_flat_array(vocab, pairs, piece, s.merge, out);
  } else {
    merge_with_heap(vocab, pairs, piece, s.merge, out);
  }
  if (cacheable) {
    s.cache.insert(piece, hash, out.data() + out_start, static_cast<uint32_t>(out.size() - out_start));
  }
}

namespace {
template <typename Id>
std::string decode_ids(const BpeVocab& vocab, const Id* ids, size_t count) {
  std::string text;
  text.reserve(count * 4);
  for (size_t i = 0; i < count; ++i) {
    const int64_t id = static_cast<int64_t>(ids[i]);
    if (id >= 0 && id < kGpt2OrdinaryTokens) {
      text += vocab.token_bytes[id];
    } else if (id == kGpt2EndOfText) {
      text += "<|endoftext|>";
    } else {
      throw std::out_of_range("decode: token id " + std::to_string(id) + " at position " +
                              std::to_string(i) + " is outside the GPT-2 vocabulary [0, " +
                              std::to_string(kGpt2VocabSize) + ")");
    }
  }
  return text;
}
}  // namespace

std::string Gpt2Tokenizer::decode(const int32_t* ids, size_t count) const {
  return decode_ids(tables_->vocab, ids, count);
}
std::string Gpt2Tokenizer::decode(const uint16_t* ids, size_t count) const {
  return decode_ids(tables_->vocab, ids, count);
}

}  // namespace llmc
