// Shapes and layer structure of the 2026-07-17 record's model (docs/recipes.md#the-2026-07-17-model-being-ported): the
// config, what each of the 11 layers does (attention variant, value embedding, gates), and which column of
// which gate MLP output feeds each per-token gate. The model itself is being ported part by part.
#pragma once

#include <array>
#include <string>

#include "llmc/checkpoint/state_file.h"

namespace llmc {

constexpr int kModded89Layers = 11;
constexpr int kModded89ValueEmbeds = 5;   // tables in one [5V, C] parameter
constexpr int kModded89GateInputs = 6;    // the value-embedding gate reads xn[0:6] and ve[0:6]
constexpr int kModded89MuddColumns = 14;  // MUDD0's outputs (MUDD1 uses the first 5)
constexpr int kModded89GateColumns = 41;  // the post gate's outputs (the pre gate uses the first 26)
constexpr int kModded89DcW1Column = 29;   // the post gate's H columns of DC's first mixing weights
constexpr int kModded89DcW2Column = 35;   // and of its second
constexpr int kModded89SmearLambda = 22;  // in the scalar vector (after the 11 layers' sa lambda pairs)
constexpr int kModded89SkipLambda = 23;

struct Modded89Config {
  int vocab_size = 0;    // V (every column in the softmax)
  int num_heads = 0;     // H, even (the paired layers view H heads of T rows as H/2 heads of 2T rows)
  int head_dim = 0;      // D, a multiple of 4 (the rotary turns D/4 adjacent pairs)
  int max_seq_len = 0;   // T: tokens per rank and step at most
  int window_block = 0;  // tokens per window block (128)
  int bigram_rows = 0;   // rows of the bigram table (377,280)
  int mudd_hidden = 0;   // hidden width of the MUDD and gate MLPs (64)
  int dc_window = 0;     // keys of the DC correction (112)

  int channels() const { return num_heads * head_dim; }  // C
  int mlp_hidden() const { return 4 * channels(); }
  int rotary_pairs() const { return head_dim / 4; }
};

// Where a per-token gate comes from: column `column` of gate MLP `gate` (0: the pre gate G0, from x0; 1:
// the post gate G1, from the residual before layer 4), or none.
struct GateColumn {
  int gate = -1;
  int column = -1;
  bool present() const { return gate >= 0; }
};

struct Modded89Layer {
  bool attention = false;
  bool paired_heads = false;  // the interleaved [2T, H/2, D] view, positions 2t + h % 2
  bool long_window = false;
  bool key_offset = false;    // k's stationary half from the previous row
  bool reads_layer7 = false;  // attention input is norm(output of layer 7)
  int value_embed = -1;       // gated value-embedding table 0..3 (layer 10's table 4 comes through MUDD)
  GateColumn xsa;             // first of H strength columns; absent: no XSA
  GateColumn output_gate;     // first of H linear gate columns; absent: no output gate
  GateColumn x0_gate;         // x += g x0 after the attention
  GateColumn bigram_gate;     // x += g b after the attention (layer 0: x = x0 + g b before the loop)
  bool dc = false;            // the DC correction on its attention
  bool mudd = false;          // layer 10: MUDD0's dense connections around it
};

struct Modded89Structure {
  std::array<Modded89Layer, kModded89Layers> layers;
  int skip_from = 3, skip_to = 6;  // x += sigmoid(skip_lambda) G1[28] cache3 at layer 6
  GateColumn skip_gate;
  int post_gate_layer = 4;  // G1 is computed from x before this layer
};

// The record's structure (SPEEDRUN89.md sections 1-2): attention in every layer but 6; paired heads in 0, 2,
// 5, 9; long window and key offset in 3, 10; XSA in 1, 3, 4, 7; output gates in 3, 10; gated value
// embeddings in 1, 2, 8, 9; DC in 10; layers 8-10 read layer 7's output; G0 columns 0-5 / 6-11 XSA of
// layers 1 / 3, 12-17 layer 3's output gate, 18 + 2k / 19 + 2k the x0 / bigram gates of layers 0..3; G1
// columns 0-5 / 6-11 XSA of layers 4 / 7, 12-17 layer 10's output gate, 18 + 2k / 19 + 2k the gates of
// layers 4, 5, 7, 8, 9, 28 the skip gate, 29-34 / 35-40 the DC weights (layer 10's x0 and bigram terms come
// from MUDD0).
Modded89Structure modded89_structure();

// Presets: "modded89" (the record: V 50,304, H 6, D 128, T 49,152, window block 128, bigram 377,280 rows,
// MUDD width 64, DC window 112), "modded89-small" (the recipe comparison, docs/recipe_comparison.md: GPT-2's
// padded vocabulary and the record's bigram table at C 64: H 2, D 32, T 768, window block 32, MUDD width 8, DC
// window 28, the record's 112 / 128 of a block) and "modded89-tiny" (tests: V 96, H 2, D 16, T 64, window block 8, bigram
// 61 rows, MUDD width 8, DC window 12). Throws std::invalid_argument naming the presets.
Modded89Config modded89_config_from_name(const std::string& name);

// Throws std::invalid_argument naming the first problem (non-positive sizes, H odd, D not a multiple of 4,
// C below the gates' inputs, implausibly large sizes).
void validate_modded89_config(const Modded89Config& config);

// "V=50304 H=6 D=128 C=768 T=49152 window_block=128 bigram=377280 mudd=64 dc_window=112".
std::string describe_modded89_config(const Modded89Config& config);

// The model as a checkpoint's state file records it, in six words of at most 2^24: V, H 4096 + D, T, window
// block, MUDD width 256 + DC window, bigram rows (the validated limits keep each packed word in range).
StateModel modded89_state_model(const Modded89Config& config);
Modded89Config modded89_config_of(const StateModel& model);

}  // namespace llmc
