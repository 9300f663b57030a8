// Per-rank batches from token shards: shard walking, deterministic shuffling, the prefetch thread
// and the validation loader. Batch production is a pure function of (position, config, shard files),
// which is what makes prefetch on/off and seek()-resume give identical batches.
#include "llmc/data/dataloader.h"

#include <algorithm>
#include <future>
#include <stdexcept>
#include <utility>

#include "llmc/base/file_io.h"

namespace llmc {
namespace {

// SplitMix64 step: a well-mixed 64-bit sequence from any state, used to seed and drive the shuffle.
uint64_t splitmix64(uint64_t& state) {
  state += 0x9E3779B97F4A7C15ull;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, bound) without modulo bias: reject the top partial block of the 64-bit range.
uint64_t uniform_below(uint64_t& state, uint64_t bound) {
  const uint64_t limit = (UINT64_MAX / bound) * bound;
  uint64_t r;
  do {
    r = splitmix64(state);
  } while (r >= limit);
  return r % bound;
}

std::string position_text(const DataLoaderPosition& p) {
  return "(epoch " + std::to_string(p.epoch) + ", shard " + std::to_string(p.shard_order_index) + ", batch " +
         std::to_string(p.batch_in_shard) + ")";
}

// Window order within a shard uses stream (epoch, file + 1); stream (epoch, 0) orders the shards.
constexpr uint64_t kShardOrderStream = 0;

}  // namespace

std::vector<int64_t> deterministic_permutation(int64_t count, uint64_t seed, uint64_t stream_a, uint64_t stream_b) {
  std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(count, 0)));
  for (int64_t i = 0; i < count; ++i) order[static_cast<size_t>(i)] = i;
  // Mix the three key words through the generator so that nearby keys give unrelated streams.
  uint64_t state = seed;
  state = splitmix64(state) ^ stream_a;
  state = splitmix64(state) ^ stream_b;
  splitmix64(state);
  for (int64_t i = count - 1; i > 0; --i) {  // Fisher-Yates
    const auto j = static_cast<int64_t>(uniform_below(state, static_cast<uint64_t>(i + 1)));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

// One batch handed from the prefetch thread to the caller, guarded by `mutex`.
struct DataLoader::PrefetchSlot {
  std::mutex mutex;
  std::condition_variable changed;
  bool full = false;
  bool stop = false;
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
  DataLoaderPosition position_after;
  std::exception_ptr error;
};

DataLoader::DataLoader(const DataLoaderConfig& config) : config_(config) {
  auto require = [&](bool holds, const std::string& problem) {
    if (!holds) throw FileError(config_.pattern, problem);
  };
  require(config_.batch_size > 0, "batch size B must be positive, got " + std::to_string(config_.batch_size));
  require(config_.seq_len > 0, "sequence length T must be positive, got " + std::to_string(config_.seq_len));
  require(config_.world_size > 0, "world_size must be positive, got " + std::to_string(config_.world_size));
  require(config_.rank >= 0 && config_.rank < config_.world_size,
          "rank " + std::to_string(config_.rank) + " is outside 0.." + std::to_string(config_.world_size - 1));
  require(config_.vocab_size > 0, "vocab_size must be positive, got " + std::to_string(config_.vocab_size));

  const int64_t global_windows = int64_t{config_.world_size} * config_.batch_size;
  const int64_t tokens_needed = global_windows * config_.seq_len + 1;
  for (const std::string& path : glob_shards(config_.pattern)) {
    ShardInfo info = read_shard_header(path);
    if (windows_in_shard(info.num_tokens, config_.seq_len) < global_windows) {
      throw FileError(path, "shard too small: it has " + std::to_string(info.num_tokens) +
                                " tokens but one global batch (world_size*B*T+1 = " + std::to_string(config_.world_size) + "*" +
                                std::to_string(config_.batch_size) + "*" + std::to_string(config_.seq_len) + "+1) needs " +
                                std::to_string(tokens_needed));
    }
    shards_.push_back(std::move(info));
  }
  if (config_.prefetch) start_prefetch(DataLoaderPosition{});
}

DataLoader::~DataLoader() { stop_prefetch(); }

int64_t DataLoader::batches_in_shard(int64_t shard_file_index) const {
  const int64_t global_windows = int64_t{config_.world_size} * config_.batch_size;
  return windows_in_shard(shards_.at(static_cast<size_t>(shard_file_index)).num_tokens, config_.seq_len) /
         global_windows;
}

int64_t DataLoader::batches_per_epoch() const {
  int64_t total = 0;
  for (size_t i = 0; i < shards_.size(); ++i) total += batches_in_shard(static_cast<int64_t>(i));
  return total;
}

int64_t DataLoader::shard_file_at(int64_t epoch, int64_t shard_order_index) const {
  if (!config_.shuffle) return shard_order_index;
  const auto order = deterministic_permutation(static_cast<int64_t>(shards_.size()), config_.seed,
                                               static_cast<uint64_t>(epoch), kShardOrderStream);
  return order[static_cast<size_t>(shard_order_index)];
}

// Reads shard file `file` whole and checks every token against the vocabulary (any thread).
std::vector<uint16_t> DataLoader::load_validated_shard(int64_t file) const {
  const ShardInfo& info = shards_[static_cast<size_t>(file)];
  std::vector<uint16_t> tokens = read_shard_tokens(info.path);
  if (static_cast<int64_t>(tokens.size()) != info.num_tokens) {
    throw FileError(info.path, "shard changed since it was opened: header now says " + std::to_string(tokens.size()) +
                                   " tokens, was " + std::to_string(info.num_tokens));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= config_.vocab_size) {
      throw FileError(info.path, "token at index " + std::to_string(i) + " (byte offset " +
                                     std::to_string(shard_token_byte_offset(static_cast<int64_t>(i))) + ") has value " +
                                     std::to_string(tokens[i]) + ", not below vocab_size " +
                                     std::to_string(config_.vocab_size));
    }
  }
  return tokens;
}

// Makes cursor.tokens / cursor.window_order match cursor.position, loading a shard if needed. With prefetch,
// the shard that follows is then read on a background thread, so that crossing into it costs nothing
// when the current shard lasts longer than one read; its errors surface when it is reached.
void DataLoader::load_shard_for(Cursor& cursor) const {
  const DataLoaderPosition& p = cursor.position;
  const int64_t file = shard_file_at(p.epoch, p.shard_order_index);
  if (file != cursor.loaded_shard_file) {
    const bool preloaded = cursor.next_shard.valid() && cursor.next_shard_file == file;
    cursor.tokens = preloaded ? cursor.next_shard.get() : load_validated_shard(file);
    cursor.next_shard = std::future<std::vector<uint16_t>>();  // waits for a preload that went unused
    cursor.loaded_shard_file = file;
    cursor.loaded_epoch = -1;  // window order belongs to the previous shard
    const bool last = p.shard_order_index + 1 == static_cast<int64_t>(shards_.size());
    const int64_t next_file = shard_file_at(last ? p.epoch + 1 : p.epoch, last ? 0 : p.shard_order_index + 1);
    if (config_.prefetch && next_file != file) {
      cursor.next_shard_file = next_file;
      cursor.next_shard = std::async(std::launch::async, [this, next_file] { return load_validated_shard(next_file); });
    }
  }
  if (config_.shuffle && cursor.loaded_epoch != p.epoch) {
    cursor.window_order = deterministic_permutation(windows_in_shard(static_cast<int64_t>(cursor.tokens.size()),
                                                                     config_.seq_len),
                                                    config_.seed, static_cast<uint64_t>(p.epoch),
                                                    static_cast<uint64_t>(file) + 1);
  }
  cursor.loaded_epoch = p.epoch;
}

void DataLoader::produce_batch(Cursor& cursor, int32_t* inputs, int32_t* targets) const {
  load_shard_for(cursor);
  const int64_t B = config_.batch_size;
  const int64_t T = config_.seq_len;
  const int64_t global_windows = int64_t{config_.world_size} * B;
  const int64_t first_slot = cursor.position.batch_in_shard * global_windows + int64_t{config_.rank} * B;
  for (int64_t row = 0; row < B; ++row) {
    const int64_t slot = first_slot + row;
    const int64_t window = config_.shuffle ? cursor.window_order[static_cast<size_t>(slot)] : slot;
    const uint16_t* source = cursor.tokens.data() + window_first_token(window, T);
    for (int64_t t = 0; t < T; ++t) {
      inputs[row * T + t] = source[t];
      targets[row * T + t] = source[t + 1];
    }
  }
  // Advance: next batch in this shard, else next shard, else next epoch.
  DataLoaderPosition& p = cursor.position;
  if (++p.batch_in_shard >= batches_in_shard(cursor.loaded_shard_file)) {
    p.batch_in_shard = 0;
    if (++p.shard_order_index >= static_cast<int64_t>(shards_.size())) {
      p.shard_order_index = 0;
      ++p.epoch;
    }
  }
}

void DataLoader::next_batch(int32_t* inputs, int32_t* targets) {
  if (!slot_) {
    produce_batch(cursor_, inputs, targets);
    returned_position_ = cursor_.position;
    return;
  }
  std::unique_lock<std::mutex> lock(slot_->mutex);
  slot_->changed.wait(lock, [&] { return slot_->full; });
  if (slot_->error) std::rethrow_exception(slot_->error);  // slot stays full: every later call rethrows too
  std::copy(slot_->inputs.begin(), slot_->inputs.end(), inputs);
  std::copy(slot_->targets.begin(), slot_->targets.end(), targets);
  returned_position_ = slot_->position_after;
  slot_->full = false;
  lock.unlock();
  slot_->changed.notify_all();
}

DataLoaderPosition DataLoader::position() const { return returned_position_; }

void DataLoader::seek(const DataLoaderPosition& position) {
  const int64_t num_shards = static_cast<int64_t>(shards_.size());
  if (position.epoch < 0 || position.shard_order_index < 0 || position.shard_order_index >= num_shards) {
    throw FileError(config_.pattern,
                               "cannot seek to " + position_text(position) + ": there are " + std::to_string(num_shards) + " shards");
  }
  const int64_t file = shard_file_at(position.epoch, position.shard_order_index);
  if (position.batch_in_shard < 0 || position.batch_in_shard >= batches_in_shard(file)) {
    throw FileError(shards_[static_cast<size_t>(file)].path,
                               "cannot seek to " + position_text(position) + ": this shard has " +
                                   std::to_string(batches_in_shard(file)) + " global batches for this B, T and world_size");
  }
  stop_prefetch();
  cursor_.position = position;
  returned_position_ = position;
  if (config_.prefetch) start_prefetch(position);
}

DataLoaderPosition DataLoader::position_at_tokens(int64_t epoch, int64_t shard_order_index,
                                                 int64_t tokens_into_shard) const {
  const int64_t num_shards = static_cast<int64_t>(shards_.size());
  DataLoaderPosition position{epoch, shard_order_index, 0};
  if (epoch < 0 || shard_order_index < 0 || shard_order_index >= num_shards || tokens_into_shard < 0) {
    throw FileError(config_.pattern, "cannot continue at token " + std::to_string(tokens_into_shard) + " of " +
                                         position_text(position) + ": there are " + std::to_string(num_shards) +
                                         " shards");
  }
  const int64_t tokens_per_batch = int64_t{config_.world_size} * config_.batch_size * config_.seq_len;
  // Rounded up, so that no window is seen twice.
  position.batch_in_shard = tokens_into_shard / tokens_per_batch + (tokens_into_shard % tokens_per_batch != 0);
  if (position.batch_in_shard >= batches_in_shard(shard_file_at(epoch, shard_order_index))) {
    position.batch_in_shard = 0;
    if (++position.shard_order_index == num_shards) {
      position.shard_order_index = 0;
      ++position.epoch;
    }
  }
  return position;
}

void DataLoader::start_prefetch(const DataLoaderPosition& from) {
  cursor_.position = from;
  slot_ = std::make_unique<PrefetchSlot>();
  slot_->inputs.resize(static_cast<size_t>(tokens_per_rank_batch()));
  slot_->targets.resize(static_cast<size_t>(tokens_per_rank_batch()));
  worker_ = std::thread(&DataLoader::prefetch_loop, this);
}

void DataLoader::stop_prefetch() {
  if (!slot_) return;
  {
    std::lock_guard<std::mutex> lock(slot_->mutex);
    slot_->stop = true;
  }
  slot_->changed.notify_all();
  if (worker_.joinable()) worker_.join();
  slot_.reset();
}

// The worker owns cursor_ while it runs; it builds one batch ahead into local buffers, then swaps
// them into the slot once the caller has taken the previous one.
void DataLoader::prefetch_loop() {
  std::vector<int32_t> inputs(static_cast<size_t>(tokens_per_rank_batch()));
  std::vector<int32_t> targets(static_cast<size_t>(tokens_per_rank_batch()));
  for (;;) {
    std::exception_ptr error;
    try {
      produce_batch(cursor_, inputs.data(), targets.data());
    } catch (...) {
      error = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(slot_->mutex);
    slot_->changed.wait(lock, [&] { return slot_->stop || !slot_->full; });
    if (slot_->stop) return;
    std::swap(slot_->inputs, inputs);
    std::swap(slot_->targets, targets);
    slot_->position_after = cursor_.position;
    slot_->error = error;
    slot_->full = true;
    lock.unlock();
    slot_->changed.notify_all();
    if (error) return;
  }
}

DataLoaderConfig ValLoader::loader_config(const ValLoaderConfig& config) {
  DataLoaderConfig loader;
  loader.pattern = config.pattern;
  loader.batch_size = config.batch_size;
  loader.seq_len = config.seq_len;
  loader.rank = config.rank;
  loader.world_size = config.world_size;
  loader.vocab_size = config.vocab_size;
  loader.shuffle = false;
  loader.prefetch = config.prefetch;
  const int64_t tokens_per_step = int64_t{config.world_size} * config.batch_size * config.seq_len;
  if (tokens_per_step <= 0) {
    throw FileError(config.pattern, "validation needs positive world_size, B and T (got " + std::to_string(config.world_size) +
                                        ", " + std::to_string(config.batch_size) + ", " + std::to_string(config.seq_len) + ")");
  }
  if (config.val_tokens <= 0 || config.val_tokens % tokens_per_step != 0) {
    throw FileError(config.pattern, "val_tokens " + std::to_string(config.val_tokens) +
                                        " must be a positive multiple of world_size*B*T = " + std::to_string(tokens_per_step));
  }
  return loader;
}

ValLoader::ValLoader(const ValLoaderConfig& config)
    : num_steps_(0), loader_(loader_config(config)) {
  const int64_t tokens_per_step = int64_t{config.world_size} * config.batch_size * config.seq_len;
  num_steps_ = config.val_tokens / tokens_per_step;
  const int64_t available = loader_.batches_per_epoch();
  if (available < num_steps_) {
    throw FileError(config.pattern, "val_tokens " + std::to_string(config.val_tokens) + " needs " + std::to_string(num_steps_) +
                                        " steps of world_size*B*T = " + std::to_string(tokens_per_step) +
                                        " tokens, but the val shards hold only " + std::to_string(available));
  }
}

void ValLoader::next_batch(int32_t* inputs, int32_t* targets) {
  if (steps_taken_ >= num_steps_) {
    throw std::logic_error("validation loader: all " + std::to_string(num_steps_) +
                           " steps were already read; call reset() first");
  }
  loader_.next_batch(inputs, targets);
  ++steps_taken_;
}

void ValLoader::reset() {
  loader_.reset();
  steps_taken_ = 0;
}

}  // namespace llmc
