// The 2026-07-17 record's model shapes, presets and layer structure (see modded89_config.h).
#include "llmc/model/modded89/modded89_config.h"

#include <cstdint>
#include <stdexcept>

namespace llmc {

namespace {

constexpr int kPreGate = 0, kPostGate = 1;

Modded89Config make_config(int V, int H, int D, int T, int window_block, int bigram_rows, int mudd_hidden,
                           int dc_window) {
  Modded89Config c;
  c.vocab_size = V;
  c.num_heads = H;
  c.head_dim = D;
  c.max_seq_len = T;
  c.window_block = window_block;
  c.bigram_rows = bigram_rows;
  c.mudd_hidden = mudd_hidden;
  c.dc_window = dc_window;
  return c;
}

}  // namespace

Modded89Structure modded89_structure() {
  Modded89Structure s;
  for (int i = 0; i < kModded89Layers; i++) {
    Modded89Layer& layer = s.layers[static_cast<size_t>(i)];
    layer.attention = i != 6;
    layer.paired_heads = i == 0 || i == 2 || i == 5 || i == 9;
    layer.long_window = layer.key_offset = i == 3 || i == 10;
    layer.reads_layer7 = i >= 8;
  }
  const int value_embed_layers[] = {1, 2, 8, 9};
  for (int j = 0; j < 4; j++) s.layers[static_cast<size_t>(value_embed_layers[j])].value_embed = j;
  s.layers[1].xsa = {kPreGate, 0};
  s.layers[3].xsa = {kPreGate, 6};
  s.layers[4].xsa = {kPostGate, 0};
  s.layers[7].xsa = {kPostGate, 6};
  s.layers[3].output_gate = {kPreGate, 12};
  s.layers[10].output_gate = {kPostGate, 12};
  for (int k = 0; k < 4; k++) {  // layers 0..3 from the pre gate
    s.layers[static_cast<size_t>(k)].x0_gate = {kPreGate, 18 + 2 * k};
    s.layers[static_cast<size_t>(k)].bigram_gate = {kPreGate, 19 + 2 * k};
  }
  const int post_gate_layers[] = {4, 5, 7, 8, 9};
  for (int k = 0; k < 5; k++) {
    s.layers[static_cast<size_t>(post_gate_layers[k])].x0_gate = {kPostGate, 18 + 2 * k};
    s.layers[static_cast<size_t>(post_gate_layers[k])].bigram_gate = {kPostGate, 19 + 2 * k};
  }
  s.skip_gate = {kPostGate, 28};
  s.layers[10].dc = true;
  s.layers[10].mudd = true;
  return s;
}

Modded89Config modded89_config_from_name(const std::string& name) {
  if (name == "modded89") return make_config(50304, 6, 128, 49152, 128, 377280, 64, 112);
  if (name == "modded89-small") return make_config(50304, 2, 32, 768, 32, 377280, 8, 28);
  if (name == "modded89-tiny") return make_config(96, 2, 16, 64, 8, 61, 8, 12);
  throw std::invalid_argument("unknown model preset '" + name +
                              "' (expected 'modded89', 'modded89-small' or 'modded89-tiny')");
}

void validate_modded89_config(const Modded89Config& c) {
  const std::string where = "invalid modded89 model config (" + describe_modded89_config(c) + "): ";
  if (c.vocab_size <= 0 || c.num_heads <= 0 || c.head_dim <= 0 || c.max_seq_len <= 0 || c.window_block <= 0 ||
      c.bigram_rows <= 1 || c.mudd_hidden <= 0 || c.dc_window <= 0)
    throw std::invalid_argument(where + "sizes must be positive (the bigram table at least 2 rows)");
  if (c.num_heads % 2 != 0) throw std::invalid_argument(where + "num_heads must be even (paired-head layers)");
  if (c.head_dim % 4 != 0) throw std::invalid_argument(where + "head_dim must be a multiple of 4 (the rotary)");
  if (c.channels() < 12) throw std::invalid_argument(where + "channels must be >= 12 (the smear gate reads x[0:12])");
  if (c.num_heads > 1024 || c.head_dim > 1024 || c.max_seq_len > (1 << 24) || c.vocab_size > (1 << 24) ||
      c.bigram_rows > (1 << 24) || c.mudd_hidden > 4096 || c.dc_window > 128)
    throw std::invalid_argument(where +
                                "implausibly large (H, D <= 1024; V, T, bigram rows <= 2^24; DC window <= 128)");
}

// Also describes invalid configs, so C is computed in 64 bits.
std::string describe_modded89_config(const Modded89Config& c) {
  return "V=" + std::to_string(c.vocab_size) + " H=" + std::to_string(c.num_heads) +
         " D=" + std::to_string(c.head_dim) + " C=" + std::to_string(int64_t{c.num_heads} * c.head_dim) +
         " T=" + std::to_string(c.max_seq_len) + " window_block=" + std::to_string(c.window_block) +
         " bigram=" + std::to_string(c.bigram_rows) + " mudd=" + std::to_string(c.mudd_hidden) +
         " dc_window=" + std::to_string(c.dc_window);
}

// Two sizes share a word as high * radix + low; validate_modded89_config keeps each low part below its radix.
constexpr int64_t kHeadDimRadix = 4096;  // D <= 1024
constexpr int64_t kDcWindowRadix = 256;  // DC window <= 128

StateModel modded89_state_model(const Modded89Config& c) {
  return StateModel{ModelFamilyId::kModded89,
                    {c.vocab_size, c.num_heads * kHeadDimRadix + c.head_dim, c.max_seq_len, c.window_block,
                     c.mudd_hidden * kDcWindowRadix + c.dc_window, c.bigram_rows}};
}

Modded89Config modded89_config_of(const StateModel& model) {
  const auto& w = model.shape;
  Modded89Config c;
  c.vocab_size = static_cast<int>(w[0]);
  c.num_heads = static_cast<int>(w[1] / kHeadDimRadix);
  c.head_dim = static_cast<int>(w[1] % kHeadDimRadix);
  c.max_seq_len = static_cast<int>(w[2]);
  c.window_block = static_cast<int>(w[3]);
  c.mudd_hidden = static_cast<int>(w[4] / kDcWindowRadix);
  c.dc_window = static_cast<int>(w[4] % kDcWindowRadix);
  c.bigram_rows = static_cast<int>(w[5]);
  return c;
}

}  // namespace llmc
