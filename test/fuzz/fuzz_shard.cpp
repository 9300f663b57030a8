// Fuzz target: a token shard (llmc/data/shards.h) as the trainer meets it -- the header and tokens, a
// write/read round trip of what was read, then both training loaders over it (GPT-2 windows, and the
// speedrun's BOS-aligned packing), a few batches each, every token checked against the vocabulary.
#include <cstdint>
#include <vector>

#include "llmc/data/bos_loader.h"
#include "llmc/data/dataloader.h"
#include "llmc/data/shards.h"
#include "test/fuzz/fuzz_support.h"

using namespace llmc;
using llmc::fuzz::finding;
using llmc::fuzz::reads_cleanly;

namespace {
constexpr int kVocab = 50257;

void check_tokens(const std::vector<int32_t>& tokens, const char* what) {
  for (int32_t token : tokens)
    if (token < 0 || token >= kVocab) finding(std::string(what) + " holds token " + std::to_string(token));
}

void run_window_loader(const std::string& path) {
  DataLoaderConfig config;
  config.pattern = path;
  config.batch_size = 1;
  config.seq_len = 4;
  config.vocab_size = kVocab;
  DataLoader loader(config);
  std::vector<int32_t> inputs(4), targets(4);
  for (int batch = 0; batch < 3; batch++) {
    loader.next_batch(inputs.data(), targets.data());
    check_tokens(inputs, "a window loader batch");
    check_tokens(targets, "a window loader batch");
  }
}

void run_bos_loader(const std::string& path) {
  BosLoaderConfig config;
  config.pattern = path;
  config.seq_len = 8;
  config.max_document_tokens = 4;
  config.vocab_size = kVocab;
  BosLoader loader(config);
  PackedSequence sequence;
  for (int step = 0; step < 3; step++) {
    loader.next(&sequence);
    check_tokens(sequence.inputs, "a BOS loader sequence");
    if (sequence.inputs.size() != 8 || sequence.targets.size() != 8) finding("a BOS loader sequence of the wrong size");
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::InputFile input(data, size, "_shard.bin");
  std::vector<uint16_t> tokens;
  if (!reads_cleanly([&] { tokens = read_shard_tokens(input.path()); }, input.path())) return 0;
  if (static_cast<int64_t>(tokens.size()) != read_shard_header(input.path()).num_tokens)
    finding("read_shard_tokens and read_shard_header disagree on the count");
  write_shard(input.copy(), tokens);
  if (read_shard_tokens(input.copy()) != tokens) finding("a shard round trip changed the tokens");
  reads_cleanly([&] { run_window_loader(input.path()); }, input.path());
  reads_cleanly([&] { run_bos_loader(input.path()); }, input.path());
  return 0;
}
