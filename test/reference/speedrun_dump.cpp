// Test helper: runs the reference speedrun model on one packed batch and dumps what an independent
// implementation (test/reference/check_speedrun_jax.py) needs to recompute it: meta.json (config,
// batch, windows, YaRN step, RoPE frequencies, tensor names and shapes, our loss), params.bin and
// grads.bin (float64, tensors in named_tensors order). Two cases: "random" (the record's init plus a
// perturbation of every tensor) and "fresh" (the record's init).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/base/atomic_file.h"
#include "llmc/base/file_io.h"
#include "llmc/base/normal_sampler.h"
#include "llmc/model/modded44/speedrun_config.h"
#include "llmc/model/modded44/yarn.h"
#include "test/reference/reference_speedrun.h"

namespace {

void write_doubles(const std::string& path, const std::vector<ref::NamedTensor>& tensors) {
  llmc::AtomicFileWriter out(path);
  for (const ref::NamedTensor& tensor : tensors) out.write(tensor.values->data(), tensor.values->size() * sizeof(double));
  out.commit();
}

struct Batch {
  int T = 64;
  std::vector<int> tokens, targets, cu_seqlens = {0, 5, 29, 50, 64, 64};
  Batch(int vocab, uint64_t seed) {
    uint64_t state = seed;
    for (int i = 0; i < 2 * T; i++) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      (i < T ? tokens : targets).push_back(static_cast<int>((state >> 33) % vocab));
    }
  }
};

void dump_case(const std::string& dir, const llmc::SpeedrunConfig& config, bool perturb, uint64_t seed) {
  // Windows of the record's schedule shape (short = long / 2 blocks), after one YaRN step 1 -> 2 blocks.
  const int old_long = 1, new_long = 2;
  llmc::Yarn yarn(config.head_dim);
  yarn.apply(old_long, new_long, config.window_block);
  const int window_long = new_long * config.window_block, window_short = new_long / 2 * config.window_block;

  ref::ReferenceSpeedrun model(config);
  model.set_rope(std::vector<double>(yarn.frequencies().begin(), yarn.frequencies().end()), yarn.attn_scale());
  model.params = ref::init_speedrun_params(config, seed);
  llmc::NormalSampler normal(seed + 1);
  if (perturb)
    for (ref::NamedTensor& tensor : ref::named_tensors(model.params, config))
      for (double& x : *tensor.values) x += (tensor.name == "scalars" ? 0.3 : 0.2) * normal.next();
  const Batch batch(config.vocab_size, seed + 2);
  model.zero_grad();
  const double loss = model.forward(batch.tokens.data(), batch.targets.data(), batch.cu_seqlens.data(),
                                    static_cast<int>(batch.cu_seqlens.size()), batch.T, window_short, window_long);
  model.backward();

  nlohmann::json meta;
  meta["config"] = {{"V", config.vocab_size},
                    {"L", config.num_blocks},
                    {"H", config.num_heads},
                    {"D", config.head_dim},
                    {"max_seq_len", config.max_seq_len},
                    {"window_block", config.window_block}};
  meta["T"] = batch.T;
  meta["tokens"] = batch.tokens;
  meta["targets"] = batch.targets;
  meta["cu_seqlens"] = batch.cu_seqlens;
  meta["yarn"] = {{"old_long_blocks", old_long}, {"new_long_blocks", new_long}};
  meta["window_short"] = window_short;
  meta["window_long"] = window_long;
  meta["attn_scale"] = yarn.attn_scale();
  meta["frequencies"] = std::vector<double>(yarn.frequencies().begin(), yarn.frequencies().end());
  meta["loss"] = loss;
  nlohmann::json tensors = nlohmann::json::array();
  for (const ref::NamedTensor& tensor : ref::named_tensors(model.params, config))
    tensors.push_back({{"name", tensor.name}, {"shape", tensor.shape}});
  meta["tensors"] = tensors;
  llmc::AtomicFileWriter meta_file(dir + "/meta.json");
  meta_file.write(meta.dump(1));
  meta_file.commit();
  write_doubles(dir + "/params.bin", ref::named_tensors(model.params, config));
  write_doubles(dir + "/grads.bin", ref::named_tensors(model.grads, config));
  std::printf("%s: reference loss %.12f\n", dir.c_str(), loss);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Dump reference speedrun-model results for an independent cross-check"};
  std::string out_dir;
  uint64_t seed = 21;
  app.add_option("out_dir", out_dir, "directory that receives random/ and fresh/ (created)")->required();
  app.add_option("--seed", seed, "random seed");
  CLI11_PARSE(app, argc, argv);
  try {
    const llmc::SpeedrunConfig config = llmc::speedrun_config_from_name("speedrun-tiny");
    for (const char* name : {"random", "fresh"}) {
      const std::string dir = out_dir + "/" + name;
      llmc::make_directories(dir, "dump directory");
      dump_case(dir, config, std::string(name) == "random", seed);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "speedrun_dump: %s\n", error.what());
    return 1;
  }
  return 0;
}
