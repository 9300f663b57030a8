// GPT-2 model shapes: the config struct, named presets ("d12" = GPT-2 124M, "tiny" for tests) and
// validation. Everything else (parameter layout, checkpoints, kernels) is sized from a GPT2Config.
#pragma once
#include <cstdint>
#include <string>

#include "llmc/checkpoint/state_file.h"

namespace llmc {

struct GPT2Config {
  int max_seq_len = 0;        // T: positions in wpe
  int vocab_size = 0;         // V: real tokens
  int padded_vocab_size = 0;  // Vp >= V: rows of wte, rounded up so the LM-head GEMM tiles evenly
  int num_layers = 0;         // L
  int num_heads = 0;          // NH
  int channels = 0;           // C
};

// Vocabulary padded up to a multiple of `multiple` (llm.c pads 50257 to 50304 with 128).
int padded_vocab(int vocab_size, int multiple = 128);

// Named presets:
//   "dN" (N = 1..64): GPT-2 shaped, L = N, NH = N, C = 64 N, T = 1024, V = 50257, Vp = 50304.
//                     d12 = GPT-2 124M, d24 = 350M, d36 = 774M, d48 = 1558M.
//   "tiny":  L = 2, NH = 4, C = 32, T = 16, V = 100, Vp = 128   (reference / gradient-check tests)
//   "small": L = 2, NH = 4, C = 64, T = 64, V = 300, Vp = 384   (kernel and emulation tests)
// Throws std::invalid_argument naming the preset when the name is unknown.
GPT2Config config_from_name(const std::string& name);

// Throws std::invalid_argument describing the first inconsistency: non-positive sizes,
// C % NH != 0, Vp < V, implausibly large sizes (L > 4096, C > 65536, T or Vp > 2^24).
void validate_config(const GPT2Config& config);

// "L=12 NH=12 C=768 T=1024 V=50257 Vp=50304", for logs and error messages.
std::string describe_config(const GPT2Config& config);

// Training FLOPs per token, the usual estimate (PaLM / llm.c style): 6 per parameter for forward +
// backward, plus 6*L*C*T for the attention score and value products. num_params counts the real
// (unpadded) parameters. For GPT-2 124M at T=1024 this is ~0.80 GFLOP per token.
double gpt2_training_flops_per_token(int64_t num_params, int num_layers, int channels, int seq_len);

// The shape as GPT-2's checkpoint state files record it (words: maxT, V, Vp, L, NH, C), and back.
StateModel gpt2_state_model(const GPT2Config& config);
GPT2Config gpt2_config_of(const StateModel& model);

}  // namespace llmc
