// The bf16 peak table behind the MFU figure of the step log (see mfu.h).
#include "llmc/train/mfu.h"

#include <cstdio>

namespace llmc {

std::optional<double> bf16_peak_flops(const std::string& device_name) {
  auto has = [&](const char* part) { return device_name.find(part) != std::string::npos; };
  if (has("H200")) return 989.4e12;
  if (has("H100")) return has("PCIe") ? 756.0e12 : 989.4e12;
  if (has("A100")) return 312.0e12;
  return std::nullopt;
}

std::string format_mfu(double flops_per_second, std::optional<double> peak_flops) {
  if (!peak_flops || *peak_flops <= 0.0 || flops_per_second < 0.0) return "n/a";
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", 100.0 * flops_per_second / *peak_flops);
  return text;
}

}  // namespace llmc
