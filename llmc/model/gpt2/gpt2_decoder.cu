// GPT-2 decoding with a KV cache (see gpt2_decoder.h): the same layer order as the training forward
// (llmc/model/gpt2/gpt2.cu), over the new tokens only, with attention over the cache instead of the sequence.
#include "llmc/model/gpt2/gpt2_decoder.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/encoder.cuh"
#include "llmc/kernels/kv_cache.cuh"
#include "llmc/kernels/layernorm.cuh"
#include "llmc/kernels/matmul.cuh"
#include "llmc/cuda/device_arena.h"
#include "llmc/model/gpt2/gpt2_config.h"

namespace llmc {

// Activations for up to max_chunk new tokens (rows), the KV cache of every layer, and the parameter
// copy when the decoder owns one. Rows of `logits` = max_chunk (all positions) at most.
struct GPT2Decoder::Buffers {
  DeviceArena arena;
  floatX* owned_params = nullptr;
  floatX* cache = nullptr;  // L x kv_cache_layer_elements(maxT, C)
  int* tokens = nullptr;
  floatX *residual, *residual2, *ln, *qkv, *atty, *attproj, *fch_pre, *fch_gelu, *fcproj, *logits;
  std::vector<floatX> host_logits;
  MatmulContext matmul;
};

GPT2Decoder::GPT2Decoder(const GPT2Layout& layout, int max_chunk, cudaStream_t stream, bool own_params)
    : layout_(layout), max_chunk_(max_chunk), stream_(stream), buffers_(std::make_unique<Buffers>()) {
  const GPT2Config& cfg = layout_.config;
  if (max_chunk < 1 || max_chunk > cfg.max_seq_len)
    throw std::invalid_argument("GPT2Decoder: max_chunk " + std::to_string(max_chunk) + " outside [1, " +
                                std::to_string(cfg.max_seq_len) + "]");
  const size_t C = cfg.channels, rows = static_cast<size_t>(max_chunk);
  Buffers& b = *buffers_;
  DeviceArena& arena = b.arena;
  if (own_params) arena.request(&b.owned_params, layout_.total_size);
  arena.request(&b.cache, static_cast<size_t>(cfg.num_layers) * kv_cache_layer_elements(cfg.max_seq_len, cfg.channels));
  arena.request(&b.tokens, rows);
  for (floatX** narrow : {&b.residual, &b.residual2, &b.ln, &b.atty, &b.attproj, &b.fcproj})
    arena.request(narrow, rows * C);
  arena.request(&b.qkv, rows * 3 * C);
  arena.request(&b.fch_pre, rows * 4 * C);
  arena.request(&b.fch_gelu, rows * 4 * C);
  arena.request(&b.logits, rows * cfg.padded_vocab_size);
  arena.allocate("the decoder (KV cache of " + std::to_string(cfg.max_seq_len) + " positions, activations for " +
                 std::to_string(max_chunk) + " tokens)");
  params_ = b.owned_params;
}

GPT2Decoder::GPT2Decoder(const GPT2Layout& layout, const std::vector<float>& host_params, int max_chunk,
                         cudaStream_t stream)
    : GPT2Decoder(layout, max_chunk, stream, /*own_params=*/true) {
  if (host_params.size() != layout_.total_size)
    throw std::invalid_argument("GPT2Decoder: " + std::to_string(host_params.size()) + " parameters for a layout of " +
                                std::to_string(layout_.total_size));
  std::vector<floatX> converted(host_params.size());
  for (size_t i = 0; i < host_params.size(); i++) converted[i] = from_float<floatX>(host_params[i]);
  CUDA_CHECK(cudaMemcpyAsync(buffers_->owned_params, converted.data(), converted.size() * sizeof(floatX),
                             cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

GPT2Decoder::GPT2Decoder(const GPT2Layout& layout, const floatX* device_params, int max_chunk, cudaStream_t stream)
    : GPT2Decoder(layout, max_chunk, stream, /*own_params=*/false) {
  params_ = device_params;
}

GPT2Decoder::~GPT2Decoder() {
  // The arena frees the memory; work still queued on the stream must not outlive it.
  CUDA_REPORT(cudaStreamSynchronize(stream_));
}

std::string GPT2Decoder::describe() const {
  return std::string("GPT-2 ") + describe_config(layout_.config) + " " + kPrecisionName;
}

size_t GPT2Decoder::device_bytes() const { return buffers_->arena.bytes(); }

void GPT2Decoder::forward(const int32_t* tokens, int n, std::vector<float>& logits, bool all_positions) {
  const int V = vocab_size();
  check_decoder_tokens(tokens, n, position_, max_positions(), V);
  logits.resize(static_cast<size_t>(all_positions ? n : 1) * V);
  for (int done = 0; done < n;) {
    const int chunk = std::min(max_chunk_, n - done);
    const bool last_chunk = done + chunk == n;
    float* out = all_positions ? logits.data() + static_cast<size_t>(done) * V : (last_chunk ? logits.data() : nullptr);
    forward_chunk(tokens + done, chunk, all_positions, out);
    done += chunk;
  }
}

// Appends `n` <= max_chunk tokens at position_ and writes the logits of every row (all_positions) or of
// the last row to logits_out (skipped when null: a prefill chunk before the last).
void GPT2Decoder::forward_chunk(const int32_t* tokens, int n, bool all_positions, float* logits_out) {
  Buffers& b = *buffers_;
  const GPT2Config& cfg = layout_.config;
  const int C = cfg.channels, Vp = cfg.padded_vocab_size;
  static_assert(sizeof(int32_t) == sizeof(int), "token ids are uploaded as int");
  CUDA_CHECK(cudaMemcpyAsync(b.tokens, tokens, static_cast<size_t>(n) * sizeof(int), cudaMemcpyHostToDevice, stream_));
  // Position embeddings of rows 0..n-1 are wpe[position_ + row]: the encoder indexes wpe by row.
  const floatX* wpe_rows = param(TensorKind::kWpe) + static_cast<size_t>(position_) * C;
  encoder_forward(b.residual, b.tokens, param(TensorKind::kWte), wpe_rows, 1, n, C, stream_);
  forward_layers(n);
  position_ += n;
  if (logits_out == nullptr) return;
  const int rows = all_positions ? n : 1;
  const floatX* head_input = all_positions ? b.ln : b.ln + static_cast<size_t>(n - 1) * C;
  // Tied LM head over all Vp rows of wte, as in training; only the first V columns are returned.
  matmul_forward(b.matmul, b.logits, nullptr, head_input, param(TensorKind::kWte), nullptr, rows, C, Vp, stream_);
  b.host_logits.resize(static_cast<size_t>(rows) * Vp);
  CUDA_CHECK(cudaMemcpyAsync(b.host_logits.data(), b.logits, b.host_logits.size() * sizeof(floatX),
                             cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  const int V = cfg.vocab_size;
  for (int row = 0; row < rows; row++)
    for (int v = 0; v < V; v++)
      logits_out[static_cast<size_t>(row) * V + v] = to_float(b.host_logits[static_cast<size_t>(row) * Vp + v]);
}

// The transformer layers and the final LayerNorm over n new rows (b.residual holds their embeddings);
// leaves lnf(x) in b.ln. The residual stream alternates between b.residual (layer input) and b.residual2
// (after attention), as residual = residual2 + fcproj is formed by the next LayerNorm's fused add.
void GPT2Decoder::forward_layers(int n) {
  Buffers& b = *buffers_;
  const GPT2Config& cfg = layout_.config;
  const int C = cfg.channels, NH = cfg.num_heads, maxT = cfg.max_seq_len;
  for (int l = 0; l < cfg.num_layers; l++) {
    floatX* cache = b.cache + static_cast<size_t>(l) * kv_cache_layer_elements(maxT, C);
    if (l == 0)
      layernorm_forward(b.ln, nullptr, nullptr, b.residual, param(TensorKind::kLn1w, l), param(TensorKind::kLn1b, l), n,
                        C, stream_);
    else
      fused_residual_layernorm_forward(b.residual, b.ln, nullptr, nullptr, b.residual2, b.fcproj,
                                       param(TensorKind::kLn1w, l), param(TensorKind::kLn1b, l), n, C, stream_);
    matmul_forward(b.matmul, b.qkv, nullptr, b.ln, param(TensorKind::kQkvw, l), param(TensorKind::kQkvb, l), n, C, 3 * C,
                   stream_);
    kv_cache_append(cache, b.qkv, n, position_, maxT, C, NH, stream_);
    cached_attention(b.atty, b.qkv, cache, n, position_, maxT, C, NH, stream_);
    matmul_forward(b.matmul, b.attproj, nullptr, b.atty, param(TensorKind::kAttprojw, l), param(TensorKind::kAttprojb, l),
                   n, C, C, stream_);
    fused_residual_layernorm_forward(b.residual2, b.ln, nullptr, nullptr, b.residual, b.attproj,
                                     param(TensorKind::kLn2w, l), param(TensorKind::kLn2b, l), n, C, stream_);
    matmul_forward(b.matmul, b.fch_gelu, b.fch_pre, b.ln, param(TensorKind::kFcw, l), param(TensorKind::kFcb, l), n, C,
                   4 * C, stream_);
    matmul_forward(b.matmul, b.fcproj, nullptr, b.fch_gelu, param(TensorKind::kFcprojw, l),
                   param(TensorKind::kFcprojb, l), n, 4 * C, C, stream_);
  }
  fused_residual_layernorm_forward(b.residual, b.ln, nullptr, nullptr, b.residual2, b.fcproj, param(TensorKind::kLnfw),
                                   param(TensorKind::kLnfb), n, C, stream_);
}

}  // namespace llmc
