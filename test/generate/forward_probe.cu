// Test helper for the Hugging Face oracle (check_hf_transformers.py): runs one model file over a token
// sequence through both of our forwards -- the training model (llmc/model/gpt2/gpt2.h: logits and mean loss
// of predicting tokens[1..n) from tokens[0..n-1)) and the KV-cache decoder (the same positions' logits)
// -- and writes them for Python to compare.
//
//   forward_probe --model FILE --tokens 1,2,3,... --out DIR
//   -> DIR/train_logits.bin, DIR/decoder_logits.bin ((n-1) x V float32 each), DIR/meta.json
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/base/command_line.h"
#include "llmc/cuda/cuda_common.h"
#include "llmc/model/gpt2/gpt2.h"
#include "llmc/model/gpt2/gpt2_decoder.h"
#include "llmc/model/gpt2/gpt2_model_file.h"

using namespace llmc;

namespace {

void write_floats(const std::string& path, const std::vector<float>& values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()), std::streamsize(values.size() * sizeof(float)));
  if (!out) throw std::runtime_error(path + ": cannot write");
}

std::vector<int> parse_tokens(const std::string& list) {
  std::vector<int> tokens;
  std::stringstream stream(list);
  for (std::string item; std::getline(stream, item, ',');) tokens.push_back(std::stoi(item));
  if (tokens.size() < 2) throw std::invalid_argument("--tokens: at least two tokens");
  return tokens;
}

int run(const std::string& model_file, const std::vector<int>& tokens, const std::string& out_dir) {
  GPT2Layout layout;
  const std::vector<float> params = load_gpt2_model_file(model_file, 1, &layout);
  const GPT2Config& cfg = layout.config;
  const int T = static_cast<int>(tokens.size()) - 1, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));

  GPT2 model(cfg, 1, 1, T, 1, stream);
  model.upload_params(params);
  model.forward(tokens.data(), tokens.data() + 1, 0, /*compute_dlogits=*/false, 0.0f);
  const double loss = model.mean_loss(1);
  const std::vector<float> padded = model.download_logits();
  std::vector<float> train_logits(static_cast<size_t>(T) * V);
  for (int t = 0; t < T; t++)
    std::copy_n(padded.begin() + static_cast<size_t>(t) * Vp, V, train_logits.begin() + static_cast<size_t>(t) * V);

  GPT2Decoder decoder(layout, params, 7, stream);  // chunks of 7: the prefill crosses chunk boundaries
  std::vector<float> decoder_logits;
  decoder.forward(tokens.data(), T, decoder_logits, /*all_positions=*/true);

  write_floats(out_dir + "/train_logits.bin", train_logits);
  write_floats(out_dir + "/decoder_logits.bin", decoder_logits);
  const nlohmann::json meta = {{"loss", loss}, {"T", T}, {"V", V}, {"precision", kPrecisionName}};
  std::ofstream(out_dir + "/meta.json") << meta << "\n";
  return 0;  // (the stream lives until exit: the model and decoder synchronise it when they are destroyed)
}

}  // namespace

int main(int argc, char** argv) {
  llmc::CommandLine app{"forward_probe: our two forwards' logits and loss for one token sequence"};
  std::string model_file, token_list, out_dir;
  app.required("--model", model_file, "model file");
  app.required("--tokens", token_list, "comma-separated token ids (n >= 2)");
  app.required("--out", out_dir, "existing output directory");
  if (const int exit_status = app.parse(argc, argv); exit_status >= 0) return exit_status;
  try {
    return run(model_file, parse_tokens(token_list), out_dir);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "forward_probe: %s\n", error.what());
    return 1;
  }
}
