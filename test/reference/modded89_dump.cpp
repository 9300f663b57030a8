// Test helper: runs the double-precision 2026-07-17 model (reference_modded89.h) on one packed batch of the
// tiny shape and dumps what an independent implementation (test/reference/check_modded89_jax.py) needs to
// recompute it: meta.json (config, batch, weights, prefix table, sign table, RoPE, windows, tensor names,
// shapes and offsets, our loss and objective) and params.bin, grads.bin (float64, the layout's buffer).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/base/atomic_file.h"
#include "llmc/base/file_io.h"
#include "llmc/base/normal_sampler.h"
#include "test/reference/reference_modded89.h"

namespace {

void write_doubles(const std::string& path, const std::vector<double>& values) {
  llmc::AtomicFileWriter out(path);
  out.write(values.data(), values.size() * sizeof(double));
  out.commit();
}

// Perturbed record init (every tensor off its init, zeros included), documents, three next-token weights
// and a prefix table; windows and RoPE of a later stage (YaRN-like frequencies, attention scale 0.12).
void dump(const std::string& dir, unsigned seed) {
  const llmc::Modded89Layout layout = llmc::make_modded89_layout(llmc::modded89_config_from_name("modded89-tiny"), 1);
  const llmc::Modded89Config& c = layout.config;
  ref::Modded89Reference model(layout);
  model.params = ref::init_modded89_params(layout, seed);
  llmc::NormalSampler normal(seed + 1);
  for (const llmc::TensorView& view : layout.tensors)
    for (size_t i = 0; i < view.numel; i++) model.params[view.offset + i] += 0.1 * normal.next();
  std::mt19937 rng(seed + 2);
  model.sign_rows = 7;
  for (int i = 0; i < model.sign_rows * c.channels(); i++) model.sign_table.push_back(rng() % 2 ? 1.0 : -1.0);
  std::vector<double> frequencies;
  for (int m = 0; m < c.rotary_pairs(); m++) frequencies.push_back(0.9 * std::pow(1.0 / 1024.0, m / 3.0));
  model.set_rope(frequencies, 0.12);
  model.set_windows(2 * c.window_block, 5 * c.window_block);
  std::uniform_int_distribution<int> token(0, c.vocab_size - 1), row(0, c.bigram_rows - 1);
  ref::Modded89Batch batch;
  for (int t = 0; t < c.max_seq_len; t++) {
    batch.tokens.push_back(token(rng));
    batch.targets.push_back(token(rng));
    batch.bigram_hashes.push_back(row(rng));
  }
  batch.cu_seqlens = {0, 11, 25, 50, c.max_seq_len};
  batch.weights.tokens = 3;
  batch.weights.next[1] = 0.5;
  batch.weights.next[2] = 0.25;
  batch.weights.prefix = 0.25;
  for (int v = 0; v < c.vocab_size; v++) batch.prefix_of.push_back(v % 4 == 0 ? -1 : token(rng));
  const double loss = model.forward(batch);
  model.backward();

  nlohmann::json meta;
  meta["config"] = {{"V", c.vocab_size},
                    {"H", c.num_heads},
                    {"D", c.head_dim},
                    {"T", c.max_seq_len},
                    {"bigram_rows", c.bigram_rows},
                    {"mudd_hidden", c.mudd_hidden},
                    {"dc_window", c.dc_window}};
  meta["tokens"] = batch.tokens;
  meta["targets"] = batch.targets;
  meta["cu_seqlens"] = batch.cu_seqlens;
  meta["bigram_hashes"] = batch.bigram_hashes;
  meta["next_weights"] = std::vector<double>(batch.weights.next, batch.weights.next + batch.weights.tokens);
  meta["prefix_weight"] = batch.weights.prefix;
  meta["prefix_of"] = batch.prefix_of;
  meta["sign_rows"] = model.sign_rows;
  meta["sign_table"] = model.sign_table;
  meta["frequencies"] = frequencies;
  meta["attn_scale"] = 0.12;
  meta["window_short"] = 2 * c.window_block;
  meta["window_long"] = 5 * c.window_block;
  meta["loss"] = loss;
  meta["objective"] = model.objective();
  nlohmann::json tensors = nlohmann::json::array();
  for (const llmc::TensorView& view : layout.tensors)
    tensors.push_back({{"name", view.name}, {"shape", view.shape}, {"offset", view.offset}});
  meta["tensors"] = tensors;
  meta["total_size"] = layout.total_size;
  llmc::make_directories(dir, "dump directory");
  llmc::AtomicFileWriter meta_file(dir + "/meta.json");
  meta_file.write(meta.dump(1));
  meta_file.commit();
  write_doubles(dir + "/params.bin", model.params);
  write_doubles(dir + "/grads.bin", model.grads);
  std::printf("%s: reference loss %.12f, objective %.12f\n", dir.c_str(), loss, model.objective());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Dump the double-precision 2026-07-17 model's results for an independent cross-check"};
  std::string out_dir;
  unsigned seed = 31;
  app.add_option("out_dir", out_dir, "directory to write (created)")->required();
  app.add_option("--seed", seed, "random seed");
  CLI11_PARSE(app, argc, argv);
  try {
    dump(out_dir, seed);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "modded89_dump: %s\n", error.what());
    return 1;
  }
  return 0;
}
