// Model FLOPs utilisation: FLOPs per token of GPT-2 training and the bf16 dense peak of known GPUs.
// Unknown GPUs (and the emulated device) have no peak, so MFU is reported as "n/a", never guessed.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace llmc {

// The usual estimate (PaLM / llm.c style): 6 FLOPs per parameter per token for forward + backward,
// plus 6*L*C*T for the attention score and value products. num_params counts the real (unpadded)
// parameters. For GPT-2 124M at T=1024 this is ~0.80 GFLOP per token.
double training_flops_per_token(int64_t num_params, int num_layers, int channels, int seq_len);

// Dense bf16 tensor-core peak in FLOP/s, from the vendors' data sheets, matched on the device name
// (H100 SXM / H200: 989.4e12, H100 PCIe: 756e12, A100: 312e12). nullopt for anything else.
std::optional<double> bf16_peak_flops(const std::string& device_name);

// "41.3%" or "n/a" (no peak known, or a non-bf16 build).
std::string format_mfu(double flops_per_second, std::optional<double> peak_flops);

}  // namespace llmc
