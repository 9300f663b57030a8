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

// The step line's throughput figures from a step's duration: tokens/s over all ranks and the MFU of one rank.
class ThroughputMeter {
 public:
  ThroughputMeter(double tokens_per_step, double flops_per_token, int world_size, std::optional<double> peak_flops)
      : tokens_per_step_(tokens_per_step),
        flops_per_token_(flops_per_token),
        world_size_(world_size),
        peak_flops_(peak_flops) {}
  // tokens_fraction: the step's share of the tokens per step (a stage of --batch-schedule).
  double tokens_per_second(double step_ms, double tokens_fraction = 1.0) const {
    return tokens_per_step_ * tokens_fraction / (step_ms / 1000.0);
  }
  std::string mfu(double step_ms, double tokens_fraction = 1.0) const {
    return format_mfu(flops_per_token_ * tokens_per_second(step_ms, tokens_fraction) / world_size_, peak_flops_);
  }

 private:
  double tokens_per_step_, flops_per_token_;
  int world_size_;
  std::optional<double> peak_flops_;
};

}  // namespace llmc
