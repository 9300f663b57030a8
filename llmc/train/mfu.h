// Model FLOPs utilisation: the bf16 dense peak of known GPUs and the figure (each model family counts its
// own FLOPs per token: TrainableModel::flops_per_token). Unknown GPUs (and the emulated device) have no
// peak, so MFU is reported as "n/a", never guessed.
#pragma once
#include <optional>
#include <string>

namespace llmc {

// Dense bf16 tensor-core peak in FLOP/s, from the vendors' data sheets, matched on the device name
// (H100 SXM / H200: 989.4e12, H100 PCIe: 756e12, A100: 312e12). nullopt for anything else.
std::optional<double> bf16_peak_flops(const std::string& device_name);

// "41.3%" or "n/a" (no peak known, or a non-bf16 build).
std::string format_mfu(double flops_per_second, std::optional<double> peak_flops);

}  // namespace llmc
