// Shapes and block structure of the speedrun model (modded-nanogpt's 2025-10-31 record, see
// docs/speedrun_model.md): the config, the role of every block (attention, MLP, value embedding, window,
// U-net skip, backout) and where each entry of the 64-scalar vector lives.
#pragma once

#include <string>
#include <vector>

#include "llmc/checkpoint/state_file.h"

namespace llmc {

// Width of the slices x[t][0:12] that feed the smear gate and the attention output gates.
constexpr int kSpeedrunGateWidth = 12;
// Number of value-embedding tables (ve0, ve1, ve2).
constexpr int kSpeedrunValueEmbeds = 3;

struct SpeedrunConfig {
  int vocab_size = 0;    // V: rows of embed, ve0..2 and the head; every column takes part in the softmax
  int num_blocks = 0;    // L: blocks built (block 0 is empty), even, >= 8
  int num_heads = 0;     // H
  int head_dim = 0;      // D, a multiple of 4 (half-truncated RoPE rotates D/4 of the D/2 pairs)
  int max_seq_len = 0;   // tokens per rank and step: rows of the RoPE tables
  int window_block = 0;  // tokens per attention-window block (128 in the record)

  int channels() const { return num_heads * head_dim; }  // C
  int hidden() const { return 4 * channels(); }          // MLP width
};

// What block i does (docs/speedrun_model.md, "Structure"; for L != 12 the same rules scaled, see speedrun_structure).
struct SpeedrunBlock {
  bool attention = false;
  bool mlp = false;
  int value_embed = -1;      // 0..2: which ve table mixes into v; -1: none
  bool long_window = false;  // attention with the long window (else the short one)
  bool push_skip = false;    // its output is pushed on the U-net stack
  int pop_skip = -1;         // >= 0: before the block, x += sigmoid(skip_w[pop_skip]) * pop()
};

struct SpeedrunStructure {
  std::vector<SpeedrunBlock> blocks;  // L entries; blocks[0] does nothing
  int backout_block = 0;              // x -= backout_lambda * (output of this block) after the last block
};

// Record (L = 12): block 0 empty; attention in 1-6 and 8-11; MLP in 1-11; ve1, ve2 on blocks 1, 2 and
// ve0, ve1, ve2 on blocks 9, 10, 11; long window on blocks 4 and 11; outputs of blocks 1..5 pushed and
// popped before blocks 6..10 with skip weights 0..4; backout of block 8.
// Other even L >= 8: attention-free block 7L/12, long windows on L/3 and L-1, ve on 1, 2, L-3..L-1,
// pushes 1..L/2-1, pops L/2..L-2, backout 2L/3 (integer divisions; L = 12 gives the record).
// Throws std::invalid_argument for odd L or L < 8.
SpeedrunStructure speedrun_structure(int num_blocks);

// Index of each scalar in the fp32 scalar vector (docs/speedrun_model.md: [0:L) skip_w, [L:3L) block lambda
// pairs, [3L:5L) sa lambda pairs, [5L] smear_lambda, [5L+1] backout_lambda, then padding with 1s).
struct SpeedrunScalarIndex {
  int num_blocks;
  int skip_weight(int k) const { return k; }
  int block_lambda(int block, int j) const { return num_blocks + 2 * block + j; }   // j: 0 x, 1 x0
  int sa_lambda(int block, int j) const { return 3 * num_blocks + 2 * block + j; }  // j: 0 v, 1 ve
  int smear_lambda() const { return 5 * num_blocks; }
  int backout_lambda() const { return 5 * num_blocks + 1; }
  // 5L + 2 rounded up to a multiple of 8: 64 for L = 12 on any number of GPUs.
  int count() const { return (5 * num_blocks + 2 + 7) / 8 * 8; }
};

// Presets: "speedrun" (the record: V=50304, L=12, H=6, D=128, T=32768, window block 128) and
// "speedrun-tiny" (tests: V=96, L=12, H=2, D=16, T=64, window block 8). Throws std::invalid_argument.
SpeedrunConfig speedrun_config_from_name(const std::string& name);

// Throws std::invalid_argument naming the first problem: non-positive sizes, L odd or < 8, D not a
// multiple of 4, C < 12, implausibly large sizes.
void validate_speedrun_config(const SpeedrunConfig& config);

// "V=50304 L=12 H=6 D=128 C=768 T=32768 window_block=128", for logs and errors.
std::string describe_speedrun_config(const SpeedrunConfig& config);

// The shape as the family's checkpoint state files record it (words: V, L, H, D, T, window block), and back.
StateModel speedrun_state_model(const SpeedrunConfig& config);
SpeedrunConfig speedrun_config_of(const StateModel& model);

}  // namespace llmc
