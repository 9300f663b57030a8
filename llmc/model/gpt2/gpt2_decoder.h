// GPT-2 as a CausalDecoder: the forward pass over new tokens only, with each layer's keys and values
// kept in a device KV cache (llmc/kernels/kv_cache.cuh), reusing the training kernels (encoder,
// LayerNorm, cuBLASLt GEMMs with the GELU epilogue). Batch 1. Parameters are in the training layout
// (llmc/model/gpt2/gpt2_layout.h), either a copy of its own or the trainer's live buffer.
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "llmc/family/decoder.h"
#include "llmc/model/gpt2/gpt2_layout.h"
#include "llmc/cuda/precision.h"

namespace llmc {

class GPT2Decoder final : public CausalDecoder {
 public:
  // Uploads host_params (layout.total_size floats in layout order) to a device buffer of its own.
  // max_chunk: the most tokens one pass processes (longer forwards are split), which sizes the
  // activations. Throws llmc::CudaError (with the bytes asked for) when the device is out of memory.
  GPT2Decoder(const GPT2Layout& layout, const std::vector<float>& host_params, int max_chunk, cudaStream_t stream);
  // Reads the parameters from device_params, laid out as `layout` (any world size): the trainer's model.
  // That buffer must outlive the decoder and hold the current weights when a forward is enqueued.
  GPT2Decoder(const GPT2Layout& layout, const floatX* device_params, int max_chunk, cudaStream_t stream);
  ~GPT2Decoder() override;
  GPT2Decoder(const GPT2Decoder&) = delete;
  GPT2Decoder& operator=(const GPT2Decoder&) = delete;

  int vocab_size() const override { return layout_.config.vocab_size; }
  int max_positions() const override { return layout_.config.max_seq_len; }
  int position() const override { return position_; }
  std::string describe() const override;
  void reset() override { position_ = 0; }
  void forward(const int32_t* tokens, int n, std::vector<float>& logits, bool all_positions = false) override;

  size_t device_bytes() const;  // parameters (if owned), KV cache and activations

 private:
  struct Buffers;
  GPT2Decoder(const GPT2Layout& layout, int max_chunk, cudaStream_t stream, bool own_params);
  const floatX* param(TensorKind kind, int layer = -1) const { return params_ + layout_.tensor(kind, layer).offset; }
  void forward_chunk(const int32_t* tokens, int n, bool all_positions, float* logits_out);
  void forward_layers(int n);

  GPT2Layout layout_;
  int max_chunk_;
  cudaStream_t stream_;
  int position_ = 0;
  const floatX* params_ = nullptr;
  std::unique_ptr<Buffers> buffers_;
};

}  // namespace llmc
