// The attention state of a 2026-07-17 model: its windows and the YaRN changes its RoPE went through since the
// record's start (SPEEDRUN89.md section 2). A trained model ends in the schedule's last state, which its model
// file keeps so that generation attends as the model was trained (docs/model.md#model-files-of-the-2026-07-17-family).
#pragma once

#include <string>
#include <vector>

#include "llmc/model/modded89/modded89_config.h"

namespace llmc {

// One YaRN update: the long window went from old_blocks to new_blocks (in config.window_block tokens).
struct YarnChange {
  int old_blocks = 0, new_blocks = 0;
  bool operator==(const YarnChange& other) const {
    return old_blocks == other.old_blocks && new_blocks == other.new_blocks;
  }
};

struct Modded89AttentionState {
  int short_window = 0, long_window = 0;  // tokens
  std::vector<YarnChange> yarn_changes;   // in the order applied, from the record's initial RoPE
  bool operator==(const Modded89AttentionState& other) const {
    return short_window == other.short_window && long_window == other.long_window &&
           yarn_changes == other.yarn_changes;
  }
};

// The record's first state: short 1 block, long 3 blocks, no YaRN change.
inline Modded89AttentionState modded89_first_attention_state(const Modded89Config& config) {
  return Modded89AttentionState{config.window_block, 3 * config.window_block, {}};
}

// "short 768 long 1664 tokens, YaRN 3->7 7->11 11->13 blocks" (the log's and generate_gpt2's model line).
inline std::string describe_attention_state(const Modded89AttentionState& state) {
  std::string text = "short " + std::to_string(state.short_window) + " long " + std::to_string(state.long_window) +
                     " tokens, YaRN";
  if (state.yarn_changes.empty()) return text + " none";
  for (const YarnChange& change : state.yarn_changes)
    text += " " + std::to_string(change.old_blocks) + "->" + std::to_string(change.new_blocks);
  return text + " blocks";
}

}  // namespace llmc
