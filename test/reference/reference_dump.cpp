// Test helper: runs the reference GPT-2 on a small model and dumps what an independent implementation
// (test/reference/check_reference_jax.py) needs to recompute it: the parameters as an llm.c fp32
// checkpoint, the tokens, and our loss, gradients and post-AdamW parameters (float64, llm.c order).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/model/gpt2/gpt2_model_file.h"
#include "llmc/model/gpt2/gpt2_init.h"
#include "test/reference/reference_gpt2.h"

namespace {

void write_file(const std::string& path, const void* data, size_t bytes) {
  FILE* out = std::fopen(path.c_str(), "wb");
  if (out == nullptr) throw std::runtime_error(path + ": cannot create");
  const bool ok = std::fwrite(data, 1, bytes, out) == bytes;
  if (std::fclose(out) != 0 || !ok) throw std::runtime_error(path + ": write failed");
}

// The flat layout-ordered buffer rearranged into llm.c's checkpoint order (kind by kind, layers stacked).
std::vector<double> in_llmc_order(const llmc::GPT2Layout& layout, const std::vector<double>& flat) {
  std::vector<double> ordered;
  for (int k = 0; k < llmc::kNumTensorKinds; k++) {
    const auto kind = static_cast<llmc::TensorKind>(k);
    const int copies = llmc::is_layer_tensor(kind) ? layout.config.num_layers : 1;
    for (int layer = 0; layer < copies; layer++) {
      const llmc::TensorView& view = layout.tensor(kind, llmc::is_layer_tensor(kind) ? layer : -1);
      ordered.insert(ordered.end(), flat.begin() + view.offset, flat.begin() + view.offset + view.numel);
    }
  }
  return ordered;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Dump reference GPT-2 results for an independent cross-check"};
  std::string out_dir;
  std::string preset = "tiny";
  int world_size = 3;
  int B = 2, T = 0;
  uint64_t seed = 17;
  app.add_option("out_dir", out_dir, "directory for model.bin, tokens.bin, reference.bin")->required();
  app.add_option("--model", preset, "model preset");
  app.add_option("--world-size", world_size, "layout world size (padding must not matter)");
  app.add_option("-B", B, "batch size");
  app.add_option("-T", T, "sequence length (default: the model's max)");
  app.add_option("--seed", seed, "random seed");
  CLI11_PARSE(app, argc, argv);
  try {
    const llmc::GPT2Layout layout = llmc::make_param_layout(llmc::config_from_name(preset), world_size);
    const llmc::GPT2Config& cfg = layout.config;
    if (T == 0) T = cfg.max_seq_len;
    // GPT-2 init plus a broad perturbation so every path carries signal; rounded to float so the
    // checkpoint holds exactly the values the double model uses.
    std::vector<float> params = llmc::init_gpt2_params(layout, seed);
    llmc::NormalSampler normal(seed + 1);
    for (const llmc::TensorView& view : layout.tensors) {
      const size_t real =
          llmc::gpt2_kind(view) == llmc::TensorKind::kWte ? static_cast<size_t>(cfg.vocab_size) * cfg.channels : view.numel;
      for (size_t i = 0; i < real; i++) params[view.offset + i] += static_cast<float>(0.2 * normal.next());
    }
    llmc::write_gpt2_model_file(out_dir + "/model.bin", layout, params.data(), llmc::Gpt2FileDtype::kFp32);

    std::vector<int32_t> tokens_file = {B, T};
    std::vector<int> tokens(static_cast<size_t>(B) * T), targets(static_cast<size_t>(B) * T);
    uint64_t state = seed;
    for (size_t i = 0; i < tokens.size() * 2; i++) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      (i < tokens.size() ? tokens[i] : targets[i - tokens.size()]) = static_cast<int>((state >> 33) % cfg.vocab_size);
    }
    tokens_file.insert(tokens_file.end(), tokens.begin(), tokens.end());
    tokens_file.insert(tokens_file.end(), targets.begin(), targets.end());
    write_file(out_dir + "/tokens.bin", tokens_file.data(), tokens_file.size() * sizeof(int32_t));

    ref::ReferenceGPT2 model(layout);
    model.set_params(params);
    model.zero_grad();
    const double loss = model.forward(tokens.data(), targets.data(), B, T);
    model.backward();
    ref::AdamWSettings settings;
    settings.lr = 1e-3;
    settings.weight_decay = 0.1;
    model.adamw_step(1, settings);
    std::vector<double> result = {loss};
    const std::vector<double> grads = in_llmc_order(layout, model.grads);
    const std::vector<double> updated = in_llmc_order(layout, model.params);
    result.insert(result.end(), grads.begin(), grads.end());
    result.insert(result.end(), updated.begin(), updated.end());
    write_file(out_dir + "/reference.bin", result.data(), result.size() * sizeof(double));
    std::printf("reference loss %.12f, %zu parameters\n", loss, grads.size());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "reference_dump: %s\n", error.what());
    return 1;
  }
  return 0;
}
