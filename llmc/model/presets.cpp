// The presets of every model family, on the host (see presets.h).
#include "llmc/model/presets.h"

#include <stdexcept>

#include "llmc/model/gpt2/gpt2_config.h"

namespace llmc {

bool is_speedrun_preset(const std::string& name) { return name == "speedrun" || name == "speedrun-tiny"; }

bool is_modded89_preset(const std::string& name) { return name == "modded89" || name == "modded89-small" || name == "modded89-tiny"; }

bool is_model_preset(const std::string& name) {
  if (is_speedrun_preset(name) || is_modded89_preset(name)) return true;
  try {
    (void)config_from_name(name);
    return true;
  } catch (const std::invalid_argument&) {
    return false;
  }
}

}  // namespace llmc
