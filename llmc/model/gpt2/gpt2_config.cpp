// GPT-2 model shapes: named presets and validation (see model_config.h).
#include "llmc/model/gpt2/gpt2_config.h"

#include <cstdlib>
#include <stdexcept>

namespace llmc {

int padded_vocab(int vocab_size, int multiple) {
  if (vocab_size <= 0 || multiple <= 0)
    throw std::invalid_argument("padded_vocab: vocab_size and multiple must be positive");
  return (vocab_size + multiple - 1) / multiple * multiple;
}

namespace {

GPT2Config make_config(int num_layers, int num_heads, int channels, int max_seq_len, int vocab_size) {
  GPT2Config config;
  config.num_layers = num_layers;
  config.num_heads = num_heads;
  config.channels = channels;
  config.max_seq_len = max_seq_len;
  config.vocab_size = vocab_size;
  config.padded_vocab_size = padded_vocab(vocab_size);
  return config;
}

}  // namespace

GPT2Config config_from_name(const std::string& name) {
  if (name == "tiny") return make_config(2, 4, 32, 16, 100);
  if (name == "small") return make_config(2, 4, 64, 64, 300);
  if (name.size() >= 2 && name[0] == 'd') {
    const std::string digits = name.substr(1);
    bool all_digits = digits.size() <= 2;
    for (char ch : digits) all_digits = all_digits && ch >= '0' && ch <= '9';
    if (all_digits) {
      const int depth = std::atoi(digits.c_str());
      if (depth >= 1 && depth <= 64) return make_config(depth, depth, 64 * depth, 1024, 50257);
    }
  }
  throw std::invalid_argument("unknown model preset '" + name +
                              "' (expected dN with N in 1..64, e.g. d12, or 'tiny' or 'small')");
}

void validate_config(const GPT2Config& c) {
  const std::string where = "invalid model config (" + describe_config(c) + "): ";
  if (c.num_layers <= 0) throw std::invalid_argument(where + "num_layers must be positive");
  if (c.num_heads <= 0) throw std::invalid_argument(where + "num_heads must be positive");
  if (c.channels <= 0) throw std::invalid_argument(where + "channels must be positive");
  if (c.max_seq_len <= 0) throw std::invalid_argument(where + "max_seq_len must be positive");
  if (c.vocab_size <= 0) throw std::invalid_argument(where + "vocab_size must be positive");
  // Upper bounds far above any real GPT-2, so that a corrupt checkpoint header cannot overflow the
  // 64-bit parameter count computed from it.
  if (c.num_layers > 4096 || c.channels > 65536 || c.max_seq_len > (1 << 24) || c.padded_vocab_size > (1 << 24))
    throw std::invalid_argument(where + "implausibly large (limits: L <= 4096, C <= 65536, T and Vp <= 2^24)");
  if (c.channels % c.num_heads != 0)
    throw std::invalid_argument(where + "channels must be a multiple of num_heads");
  if (c.padded_vocab_size < c.vocab_size)
    throw std::invalid_argument(where + "padded_vocab_size must be >= vocab_size");
}

std::string describe_config(const GPT2Config& c) {
  return "L=" + std::to_string(c.num_layers) + " NH=" + std::to_string(c.num_heads) +
         " C=" + std::to_string(c.channels) + " T=" + std::to_string(c.max_seq_len) +
         " V=" + std::to_string(c.vocab_size) + " Vp=" + std::to_string(c.padded_vocab_size);
}

double gpt2_training_flops_per_token(int64_t num_params, int num_layers, int channels, int seq_len) {
  return 6.0 * static_cast<double>(num_params) + 6.0 * static_cast<double>(num_layers) * channels * seq_len;
}

StateModel gpt2_state_model(const GPT2Config& c) {
  return StateModel{ModelFamilyId::kGPT2,
                    {c.max_seq_len, c.vocab_size, c.padded_vocab_size, c.num_layers, c.num_heads, c.channels}};
}

GPT2Config gpt2_config_of(const StateModel& model) {
  const auto& w = model.shape;
  return GPT2Config{static_cast<int>(w[0]), static_cast<int>(w[1]), static_cast<int>(w[2]),
                    static_cast<int>(w[3]), static_cast<int>(w[4]), static_cast<int>(w[5])};
}

}  // namespace llmc
