// The trainer's test hooks (see debug_hooks.h). Every dump file goes through the atomic writer, so a
// reader never sees half of one.
#include "llmc/train/debug_hooks.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <limits>
#include <stdexcept>

#include "llmc/base/atomic_file.h"
#include "llmc/base/file_io.h"

namespace llmc {

namespace {
constexpr const char* kNanAtStepVariable = "LLMC_DEBUG_NAN_AT_STEP";
constexpr const char* kDumpDirVariable = "LLMC_DEBUG_DUMP_DIR";

template <typename T>
void write_file(const std::string& path, const std::vector<T>& values) {
  AtomicFileWriter out(path);
  out.write(values.data(), values.size() * sizeof(T));
  out.commit();
}
}  // namespace

DebugHooks DebugHooks::from_environment() {
  DebugHooks hooks;
  if (const char* text = std::getenv(kNanAtStepVariable)) {
    char* end = nullptr;
    const long step = std::strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || step < 1 || step > std::numeric_limits<int>::max())
      throw std::invalid_argument(std::string(kNanAtStepVariable) + "='" + text + "': expected a step number >= 1");
    hooks.nan_at_step_ = static_cast<int>(step);
  }
  if (const char* dir = std::getenv(kDumpDirVariable)) hooks.dump_dir_ = dir;
  return hooks;
}

std::string DebugHooks::describe() const {
  std::string text;
  if (nan_at_step_ > 0) text += std::string(kNanAtStepVariable) + "=" + std::to_string(nan_at_step_);
  if (!dump_dir_.empty()) text += std::string(text.empty() ? "" : " ") + kDumpDirVariable + "=" + dump_dir_;
  return text;
}

std::string DebugHooks::prepare_model_dump() const {
  make_directories(dump_dir_, "dump directory");
  return dump_dir_ + "/model.bin";
}

void DebugHooks::dump_step(const std::vector<int>& inputs, const std::vector<int>& targets, double loss,
                           const std::vector<float>& grads, int batch_size, int seq_len,
                           const std::string& precision) const {
  write_file(dump_dir_ + "/inputs.bin", inputs);
  write_file(dump_dir_ + "/targets.bin", targets);
  write_file(dump_dir_ + "/grads.bin", grads);
  const nlohmann::json meta = {{"loss", loss}, {"B", batch_size}, {"T", seq_len}, {"precision", precision}};
  AtomicFileWriter out(dump_dir_ + "/meta.json");
  out.write(meta.dump() + "\n");
  out.commit();
}

double DebugHooks::loss_seen(int step, double loss) const {
  return step == nan_at_step_ ? std::numeric_limits<double>::quiet_NaN() : loss;
}

}  // namespace llmc
