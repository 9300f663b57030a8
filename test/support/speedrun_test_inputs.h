// The speedrun model's test inputs shared by the model and training tests: the record's init made fully
// nonzero and rounded to floatX, the layout's flat buffer of it, random packed batches, and the reference
// set up with the device model's RoPE tables.
#pragma once

#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "llmc/base/bf16_bits.h"
#include "llmc/cuda/precision.h"
#include "llmc/model/modded44/speedrun_layout.h"
#include "llmc/model/modded44/speedrun_model.h"
#include "test/reference/reference_speedrun.h"

namespace llmc::test {

constexpr int kSpeedrunTestBos = 3;  // the test vocabularies' document separator

inline double round_to_floatx(double x) {
  return std::is_same<floatX, float>::value
             ? static_cast<double>(static_cast<float>(x))
             : static_cast<double>(bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(x))));
}

// The record's init with the zero-initialised tensors (W_o, W_proj, head, gates) and the scalars made
// random, so every path carries gradient; every value rounded to what the device holds (floatX).
inline ref::SpeedrunParams test_params(const SpeedrunConfig& config, uint64_t seed) {
  ref::SpeedrunParams params = ref::init_speedrun_params(config, seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<double> small(-0.2, 0.2), scalar(-0.6, 0.6);
  const size_t C = static_cast<size_t>(config.channels());
  for (ref::NamedTensor& tensor : ref::named_tensors(params, config)) {
    std::vector<double>& values = *tensor.values;
    const bool qkvo = tensor.name.find("qkvo") != std::string::npos;
    for (size_t i = 0; i < values.size(); i++) {
      if (tensor.name == "scalars")
        values[i] += scalar(rng);
      else if (tensor.name == "head" || tensor.name.find("gate") != std::string::npos ||
               tensor.name.find("proj") != std::string::npos || (qkvo && i >= 3 * C * C))
        values[i] = small(rng);
      values[i] = round_to_floatx(values[i]);
    }
  }
  return params;
}

inline std::vector<float> to_layout(const SpeedrunLayout& layout, ref::SpeedrunParams& params) {
  std::vector<float> buffer(layout.total_size, 0.0f);
  for (const ref::NamedTensor& tensor : ref::named_tensors(params, layout.config)) {
    const TensorView& view = layout.find(tensor.name);
    for (size_t i = 0; i < view.numel; i++) buffer[view.offset + i] = static_cast<float>((*tensor.values)[i]);
  }
  return buffer;
}

struct SpeedrunBatch {
  std::vector<int> inputs, targets, cu_seqlens;
};

// Random tokens with a few document starts (kSpeedrunTestBos); cu_seqlens as the model derives them.
inline SpeedrunBatch random_batch(int T, int V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> token(0, V - 1);
  SpeedrunBatch batch;
  for (int t = 0; t < T; t++) {
    int input = token(rng);
    if (input == kSpeedrunTestBos) input = kSpeedrunTestBos + 1;
    if (t > 0 && rng() % 9 == 0) input = kSpeedrunTestBos;
    batch.inputs.push_back(input);
    batch.targets.push_back(token(rng));
  }
  batch.cu_seqlens.push_back(0);
  for (int t = 1; t < T; t++)
    if (batch.inputs[static_cast<size_t>(t)] == kSpeedrunTestBos) batch.cu_seqlens.push_back(t);
  batch.cu_seqlens.push_back(T);
  return batch;
}

// A reference with the device model's RoPE tables (widened) and attention scale.
inline void use_model_rope(ref::ReferenceSpeedrun& reference, const SpeedrunModel& model) {
  std::vector<float> cos_table, sin_table;
  model.download_rope_tables(cos_table, sin_table);
  reference.set_rope_tables(std::vector<double>(cos_table.begin(), cos_table.end()),
                            std::vector<double>(sin_table.begin(), sin_table.end()), model.attn_scale());
}

inline double reference_forward(ref::ReferenceSpeedrun& reference, const SpeedrunModel& model, const SpeedrunBatch& batch) {
  return reference.forward(batch.inputs.data(), batch.targets.data(), batch.cu_seqlens.data(),
                           static_cast<int>(batch.cu_seqlens.size()), model.seq_len(), model.short_window_tokens(),
                           model.long_window_tokens());
}

}  // namespace llmc::test
