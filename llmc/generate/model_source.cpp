// Resolution of the generator's --model argument (see model_source.h).
#include "llmc/generate/model_source.h"

#include <sys/stat.h>

#include <stdexcept>

#include "llmc/base/file_io.h"
#include "llmc/checkpoint/checkpoint_dir.h"
#include "llmc/model/presets.h"

namespace llmc {

namespace {
bool is_directory(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}
}  // namespace

ModelSource resolve_model_source(const std::string& argument) {
  ModelSource source;
  if (is_regular_file(argument)) {
    source.file = source.label = argument;
  } else if (is_regular_file(checkpoint_model_path(argument))) {
    source.file = source.label = checkpoint_model_path(argument);
  } else if (is_directory(argument)) {
    const std::string prefix = latest_checkpoint_prefix(argument);
    if (prefix.empty())
      throw std::runtime_error("--model " + argument + ": directory without a complete checkpoint (ckpt_*_manifest.json)");
    source.file = source.label = checkpoint_model_path(prefix);
  } else {
    if (!is_model_preset(argument))
      throw std::runtime_error("--model " + argument + ": not a model file, checkpoint prefix (" +
                               checkpoint_model_path(argument) + "), run directory or preset (dN, tiny, small)");
    source.preset = argument;
    source.label = argument + " (random weights)";
  }
  return source;
}

}  // namespace llmc
