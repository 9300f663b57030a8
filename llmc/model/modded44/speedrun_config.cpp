// Speedrun model shapes, presets and block structure (see speedrun_config.h).
#include "llmc/model/modded44/speedrun_config.h"

#include <cstdint>
#include <stdexcept>

namespace llmc {

SpeedrunStructure speedrun_structure(int L) {
  if (L < 8 || L % 2 != 0)
    throw std::invalid_argument("speedrun structure: num_blocks must be even and >= 8, got " + std::to_string(L));
  SpeedrunStructure structure;
  structure.blocks.resize(L);
  const int half = L / 2;
  const int attention_free = 7 * L / 12;
  for (int i = 1; i < L; i++) {
    SpeedrunBlock& block = structure.blocks[i];
    block.attention = i != attention_free;
    block.mlp = true;
    block.long_window = i == L / 3 || i == L - 1;
    block.push_skip = i < half;
    if (i >= half && i < L - 1) block.pop_skip = i - half;
  }
  // The ve schedule ". 1 2 ... 0 1 2": two tables after the empty block 0, all three on the last blocks.
  structure.blocks[1].value_embed = 1;
  structure.blocks[2].value_embed = 2;
  structure.blocks[L - 3].value_embed = 0;
  structure.blocks[L - 2].value_embed = 1;
  structure.blocks[L - 1].value_embed = 2;
  structure.backout_block = 2 * L / 3;
  return structure;
}

namespace {

SpeedrunConfig make_config(int V, int L, int H, int D, int T, int window_block) {
  SpeedrunConfig config;
  config.vocab_size = V;
  config.num_blocks = L;
  config.num_heads = H;
  config.head_dim = D;
  config.max_seq_len = T;
  config.window_block = window_block;
  return config;
}

}  // namespace

SpeedrunConfig speedrun_config_from_name(const std::string& name) {
  if (name == "speedrun") return make_config(50304, 12, 6, 128, 32768, 128);
  if (name == "speedrun-tiny") return make_config(96, 12, 2, 16, 64, 8);
  throw std::invalid_argument("unknown speedrun model preset '" + name + "' (expected 'speedrun' or 'speedrun-tiny')");
}

void validate_speedrun_config(const SpeedrunConfig& c) {
  const std::string where = "invalid speedrun model config (" + describe_speedrun_config(c) + "): ";
  if (c.vocab_size <= 0 || c.num_heads <= 0 || c.head_dim <= 0 || c.max_seq_len <= 0 || c.window_block <= 0)
    throw std::invalid_argument(where + "sizes must be positive");
  if (c.num_blocks < 8 || c.num_blocks % 2 != 0)
    throw std::invalid_argument(where + "num_blocks must be even and >= 8");
  if (c.head_dim % 4 != 0)
    throw std::invalid_argument(where + "head_dim must be a multiple of 4 (half-truncated RoPE)");
  if (c.num_blocks > 1024 || c.num_heads > 1024 || c.head_dim > 1024 || c.max_seq_len > (1 << 24) ||
      c.vocab_size > (1 << 24) || c.window_block > (1 << 24))
    throw std::invalid_argument(where + "implausibly large (limits: L, H, D <= 1024; V, T <= 2^24)");
  if (c.channels() < kSpeedrunGateWidth)
    throw std::invalid_argument(where + "channels must be >= " + std::to_string(kSpeedrunGateWidth) +
                                " (the gates read x[0:12])");
}

// Also describes invalid configs (validate_speedrun_config's message starts with it, before any check), so
// C is computed in 64 bits: H x D of a corrupt file's header overflows an int.
std::string describe_speedrun_config(const SpeedrunConfig& c) {
  return "V=" + std::to_string(c.vocab_size) + " L=" + std::to_string(c.num_blocks) +
         " H=" + std::to_string(c.num_heads) + " D=" + std::to_string(c.head_dim) +
         " C=" + std::to_string(int64_t{c.num_heads} * c.head_dim) + " T=" + std::to_string(c.max_seq_len) +
         " window_block=" + std::to_string(c.window_block);
}

StateModel speedrun_state_model(const SpeedrunConfig& c) {
  return StateModel{ModelFamilyId::kSpeedrun,
                    {c.vocab_size, c.num_blocks, c.num_heads, c.head_dim, c.max_seq_len, c.window_block}};
}

SpeedrunConfig speedrun_config_of(const StateModel& model) {
  const auto& w = model.shape;
  return SpeedrunConfig{static_cast<int>(w[0]), static_cast<int>(w[1]), static_cast<int>(w[2]),
                        static_cast<int>(w[3]), static_cast<int>(w[4]), static_cast<int>(w[5])};
}

}  // namespace llmc
