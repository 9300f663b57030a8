// The presets of every model family, known on the host (no CUDA), so that a --model argument can be
// checked before anything touches the device; the registry (registry.h) builds their families.
#pragma once
#include <string>

namespace llmc {

// Whether `name` is a preset of some family: dN (N in 1..64), tiny, small (GPT-2); speedrun, speedrun-tiny (the
// 2025-10-31 record); modded89, modded89-small, modded89-tiny (the 2026-07-17 record).
bool is_model_preset(const std::string& name);
bool is_speedrun_preset(const std::string& name);  // speedrun, speedrun-tiny
bool is_modded89_preset(const std::string& name);  // modded89, modded89-small, modded89-tiny

}  // namespace llmc
