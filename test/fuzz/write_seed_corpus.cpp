// Writes the fuzz targets' seed corpus (test/fuzz/corpus/<target>/): small valid files made by the
// project's own writers, so that mutations start from inputs that pass the format checks, plus a few
// texts that reach the awkward paths (NUL bytes, invalid UTF-8, no newline, long lines, bad JSON lines).
// Run it again when a format changes: `build/write_seed_corpus test/fuzz/corpus`.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "llmc/data/shards.h"
#include "llmc/model/gpt2/gpt2_model_file.h"
#include "llmc/model/modded44/speedrun_model_file.h"
#include "llmc/checkpoint/manifest.h"
#include "llmc/checkpoint/state_file.h"

using namespace llmc;
namespace fs = std::filesystem;

namespace {
void write_text(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  if (!out) throw std::runtime_error(path.string() + ": write failed");
}

void shard_seeds(const fs::path& dir) {
  // Documents start with <|endoftext|> (50256), as tokenize_gpt2 writes them.
  std::vector<uint16_t> tokens;
  for (int document = 0; document < 5; document++) {
    tokens.push_back(50256);
    for (int i = 0; i < 3 + 2 * document; i++) tokens.push_back(static_cast<uint16_t>(100 * document + i));
  }
  write_shard((dir / "documents.bin").string(), tokens);
  write_shard((dir / "one_token.bin").string(), std::vector<uint16_t>{50256});
}

GPT2Config small_config() { return GPT2Config{3, 5, 8, 1, 1, 2}; }  // maxT, V, Vp, L, NH, C

void model_seeds(const fs::path& dir) {
  const GPT2Layout layout = make_param_layout(small_config(), 1);
  std::vector<float> params(layout.total_size, 0.0f);
  for (const TensorView& view : layout.tensors)
    for (size_t i = 0; i < view.numel; i++) params[view.offset + i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  write_gpt2_model_file((dir / "fp32.bin").string(), layout, params.data(), Gpt2FileDtype::kFp32);
  write_gpt2_model_file((dir / "bf16.bin").string(), layout, params.data(), Gpt2FileDtype::kBf16);
}

// The smallest speedrun shape the config allows (L even >= 8, D a multiple of 4, C >= 12).
SpeedrunConfig small_speedrun() { return SpeedrunConfig{8, 8, 1, 12, 8, 4}; }

void speedrun_model_seeds(const fs::path& dir) {
  const SpeedrunLayout layout = make_speedrun_layout(small_speedrun(), 1);
  std::vector<float> params(layout.total_size, 0.0f);
  for (const TensorView& view : layout.tensors)
    for (size_t i = 0; i < view.numel; i++) params[view.offset + i] = 0.125f * static_cast<float>(i % 5) - 0.25f;
  write_speedrun_model((dir / "fp32.bin").string(), layout, params.data(), SpeedrunFileDtype::kFp32);
  write_speedrun_model((dir / "reference_dtypes.bin").string(), layout, params.data(), SpeedrunFileDtype::kReference);
}

void state_seeds(const fs::path& dir) {
  TrainState state;
  state.step = 7;
  state.rank = 1;
  state.world_size = 2;
  state.model = gpt2_state_model(small_config());
  state.train_position = DataLoaderPosition{0, 1, 2};
  state.batch_size = 2;
  state.seq_len = 3;
  state.train_time_ms = 12.5;
  // ZeRO's three arrays of 6 floats each.
  const float scales[3] = {0.1f, 0.01f, 0.001f};
  for (int a = 0; a < 3; a++) {
    std::vector<float> values;
    for (int i = 0; i < 6; i++) values.push_back(scales[a] * static_cast<float>(i));
    NamedStateArray array{kLegacyZeroArrayNames[a], 4, std::vector<char>(values.size() * sizeof(float))};
    std::memcpy(array.bytes.data(), values.data(), array.bytes.size());
    state.arrays.push_back(std::move(array));
  }
  write_train_state((dir / "rank1_of_2.bin").string(), state);
  // The BOS loader's position (epoch, shard, document, micro-step) instead of the window loader's.
  TrainState bos = state;
  bos.train_loader = TrainLoaderKind::kBos;
  bos.train_position = DataLoaderPosition{};
  bos.bos_position = BosLoaderPosition{1, 2, 345, 0};
  bos.grad_accum = 4;
  write_train_state((dir / "bos_rank1_of_2.bin").string(), bos);
  state.model = speedrun_state_model(small_speedrun());
  write_train_state((dir / "speedrun_rank1_of_2.bin").string(), state);
  // The speedrun optimizer's state: named arrays of 2- and 4-byte elements instead of the three shards.
  state.optimizer = StateOptimizer::kSpeedrun;
  state.arrays.clear();
  state.arrays.push_back({"b0.muon0.master", 4, std::vector<char>(16, 1)});
  state.arrays.push_back({"b1.adam.saved_grads", 2, std::vector<char>(6, 2)});
  write_train_state((dir / "speedrun_optimizer_rank1_of_2.bin").string(), state);
}

void manifest_seeds(const fs::path& dir) {
  CheckpointManifest manifest;
  manifest.step = 100;
  manifest.world_size = 2;
  manifest.files = {{"ckpt_000100_model.bin", 1184, 0x0123456789abcdefull},
                    {"ckpt_000100_state_rank0.bin", 328, 42},
                    {"ckpt_000100_state_rank1.bin", 328, 0xfedcba9876543210ull}};
  write_manifest((dir / "two_ranks.json").string(), manifest);
}

void text_seeds(const fs::path& dir) {
  write_text(dir / "prose.txt",
             "In the beginning God created the heaven and the earth.\nAnd the earth was without form, and void.\n\n"
             "FIRST CITIZEN:\nBefore we proceed any further, hear me speak.\n");
  write_text(dir / "unicode.txt", "Caf\xc3\xa9 na\xc3\xafve \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e "
                                  "\xf0\x9f\x98\x80  \t 123,456.78 's 're 've\r\n<|endoftext|>\n");
  write_text(dir / "nul_bytes.txt", std::string("a\0b\n\0\0\nend", 10));
  write_text(dir / "invalid_utf8.txt", "valid start\n\xc3(\xff tail\n");
  write_text(dir / "no_newline.txt", "x");
  write_text(dir / "long_line.txt", std::string(4000, 'a') + "\n" + std::string(3000, ' ') + "b");
}

void jsonl_seeds(const fs::path& dir) {
  write_text(dir / "fineweb.jsonl", "{\"text\": \"Hello world.\\nSecond line.\", \"id\": \"<urn:1>\"}\n"
                                    "{\"id\": 2, \"text\": \"\\u00e9t\\u00e9 \\ud83d\\ude00\"}\n\n"
                                    "{\"text\": \"\"}\r\n");
  write_text(dir / "bad_lines.jsonl", "{\"text\": 5}\n[1, 2]\n{\"other\": \"x\"}\nnot json\n{\"text\": \"\\ud800\"}\n"
                                      "{\"text\": \"ok\"}\n");
  write_text(dir / "huge_line.jsonl", "{\"text\": \"" + std::string(65536, 'z') + "\"}\n");
  write_text(dir / "nul_in_line.jsonl", std::string("{\"text\": \"a\0b\"}\n", 16));
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (writes CORPUS_DIR/<target>/...)\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  const std::vector<std::pair<const char*, void (*)(const fs::path&)>> targets = {
      {"shard", shard_seeds}, {"model_file", model_seeds}, {"speedrun_model_file", speedrun_model_seeds},
      {"state_file", state_seeds},
      {"manifest", manifest_seeds}, {"text", text_seeds}, {"jsonl", jsonl_seeds}};
  try {
    for (const auto& [name, write] : targets) {
      fs::create_directories(root / name);
      write(root / name);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "write_seed_corpus: %s\n", error.what());
    return 1;
  }
  return 0;
}
