// Generation benchmark at batch 1 (default GPT-2 d12 with random weights): per new token, the bytes the
// KV-cache decoder reads, its FLOPs and kernel launches at several context lengths, and the time at the
// H200's ceilings (4.3 TB/s, 790 TFLOP/s); on a GPU (or with --run) it also times a prefill and the
// decoding of --new-tokens tokens through the real generation loop (host sampling included). With
// --model modded89 (the 2026-07-17 model): the launchers' own counts of a decode step, nothing executed, and the
// family's decoder (generate_gpt2's) timed the same way.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "llmc/base/command_line.h"
#include "llmc/base/launch_observer.h"
#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/generate/generation.h"
#include "llmc/model/gpt2/gpt2_config.h"
#include "llmc/model/gpt2/gpt2_decoder.h"
#include "llmc/model/gpt2/gpt2_init.h"
#include "llmc/model/modded89/modded89_config.h"
#include "llmc/model/modded89/modded89_decoder.h"
#include "llmc/model/modded89/modded89_family.h"
#include "llmc/model/modded89/modded89_model.h"

using namespace llmc;

namespace {

constexpr double kH200Bandwidth = 4.3e12;  // bytes/s, HBM3e
constexpr double kH200Bf16Flops = 790e12;  // dense bf16 tensor-core FLOP/s

// What one decode step at context length t (keys attended, itself included) moves and computes.
struct TokenCost {
  double weight_bytes, cache_bytes, other_bytes, flops;
  int launches, copies;
  double bytes() const { return weight_bytes + cache_bytes + other_bytes; }
  double ceiling_seconds() const { return std::max(bytes() / kH200Bandwidth, flops / kH200Bf16Flops); }
};

TokenCost token_cost(const GPT2Config& c, size_t parameters, int t) {
  const double x = sizeof(floatX), L = c.num_layers, C = c.channels, Vp = c.padded_vocab_size;
  TokenCost cost;
  // Every parameter is read once per token (the tied LM head reads all of wte), except wpe: one row.
  cost.weight_bytes = x * (static_cast<double>(parameters) - static_cast<double>(c.max_seq_len) * C + C);
  cost.cache_bytes = x * L * (2.0 * t * C + 2.0 * C);  // read t keys and values, append one of each
  // Activations between kernels (about 30 C-vectors a layer) and the logits (written, then copied out).
  cost.other_bytes = x * (L * 30.0 * C + 2.0 * Vp);
  const double matmul_params = L * 12.0 * C * C + Vp * C;  // qkv 3C^2, proj C^2, fc and fcproj 4C^2 each
  cost.flops = 2.0 * matmul_params + L * 4.0 * t * C;       // + attention: q.k and p.v over t keys
  // Per layer: LayerNorm, qkv GEMM, cache append, attention, projection GEMM, residual+LayerNorm, fc GEMM
  // (GELU fused as its epilogue), fcproj GEMM; plus the embedding, the final LayerNorm and the LM head.
  cost.launches = static_cast<int>(8 * L + 3);
  cost.copies = 2;  // the token up, the logits down
  return cost;
}

void print_accounting(const GPT2Config& config, size_t parameters, const std::vector<int>& contexts) {
  std::printf("# per new token at batch 1, %s %s: weights read once per token, KV cache of t positions\n",
              describe_config(config).c_str(), kPrecisionName);
  std::printf("%8s %12s %12s %12s %12s %9s %12s %12s %14s\n", "context", "weights_MB", "kv_cache_MB", "total_MB",
              "GFLOP", "launches", "us@4.3TB/s", "us@790TF/s", "ceiling_tok/s");
  for (int t : contexts) {
    const TokenCost cost = token_cost(config, parameters, t);
    std::printf("%8d %12.2f %12.2f %12.2f %12.4f %9d %12.2f %12.3f %14.0f\n", t, cost.weight_bytes / 1e6,
                cost.cache_bytes / 1e6, cost.bytes() / 1e6, cost.flops / 1e9, cost.launches + cost.copies,
                1e6 * cost.bytes() / kH200Bandwidth, 1e6 * cost.flops / kH200Bf16Flops, 1.0 / cost.ceiling_seconds());
  }
}

// A prompt of `prompt_tokens` random tokens below `token_limit`, prefilled, then `new_tokens` decode steps through
// llmc::generate, after a warm-up pass of the same (cuBLASLt heuristics, first-touch of every buffer).
struct GenerationTiming {
  std::vector<int32_t> prompt;
  GenerationResult result;
  double ms_per_token;
};

GenerationTiming time_generation(CausalDecoder& decoder, int token_limit, int prompt_tokens, int new_tokens) {
  if (prompt_tokens < 1 || prompt_tokens + new_tokens > decoder.max_positions())
    throw std::invalid_argument("--prompt-tokens + --new-tokens must fit the context of " +
                                std::to_string(decoder.max_positions()));
  GenerationTiming timing;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> token(0, token_limit - 1);
  timing.prompt.resize(static_cast<size_t>(prompt_tokens));
  for (int32_t& t : timing.prompt) t = token(rng);
  GenerationSettings settings;
  settings.max_new_tokens = new_tokens;
  settings.sampling.seed = 1;
  generate(decoder, timing.prompt, settings);  // warm-up
  timing.result = generate(decoder, timing.prompt, settings);
  timing.ms_per_token = 1e3 * timing.result.decode_seconds / std::max(timing.result.decode_steps, 1);
  return timing;
}

// The measured line the GPU check's report reads (scripts/gpu/report.py), `extra` appended.
void print_generate_line(const std::string& model, const GenerationTiming& t, double ceiling_tokens_per_s,
                         const std::string& extra) {
  std::printf(
      "generate %s batch:1 prompt:%zu new:%zu prefill_ms=%.3f prefill_tokens_per_s=%.1f decode_steps=%d "
      "ms_per_token=%.4f decode_tokens_per_s=%.1f ceiling_tokens_per_s=%.0f%s\n",
      model.c_str(), t.prompt.size(), t.result.tokens.size(), 1e3 * t.result.prefill_seconds,
      t.prompt.size() / t.result.prefill_seconds, t.result.decode_steps, t.ms_per_token, 1e3 / t.ms_per_token,
      ceiling_tokens_per_s, extra.c_str());
}

// Tallies what is enqueued while it is active, from the launchers' own costs; runs only the copies (the host reads
// the logits back), or nothing is tallied and only the copies run (a prefill that sets up the cache's rows).
class DecodeCounter : public LaunchObserver {
 public:
  explicit DecodeCounter(bool tally) : tally_(tally) {}
  bool before_launch(const LaunchRecord& record) override {
    const bool copy = record.kind == LaunchKind::kCopy;
    if (tally_) {
      (copy ? cost.copies : cost.launches) += 1;
      if (record.cost.known()) {
        (copy ? cost.other_bytes : cost.weight_bytes) += record.cost.bytes;
        cost.flops += std::max(record.cost.flops, 0.0);
      } else if (!copy) {
        unaccounted++;
      }
    }
    return copy;
  }
  TokenCost cost{0.0, 0.0, 0.0, 0.0, 0, 0};  // weight_bytes: the kernels' and GEMMs' bytes, other_bytes: copies'
  int unaccounted = 0;

 private:
  bool tally_;
};

// A decode step at context t (after t - 1 tokens, which are set up but not tallied), as its launchers count it.
DecodeCounter count_decode_step(CausalDecoder& decoder, const std::vector<int32_t>& tokens, int t) {
  if (t < 1 || t > decoder.max_positions() || t > static_cast<int>(tokens.size()))
    throw std::invalid_argument("--contexts: " + std::to_string(t) + " outside [1, " +
                                std::to_string(decoder.max_positions()) + "]");
  std::vector<float> logits;
  decoder.reset();
  if (t > 1) {
    DecodeCounter prefill(/*tally=*/false);
    ScopedLaunchObserver scope(&prefill);
    decoder.forward(tokens.data(), t - 1, logits);
  }
  DecodeCounter step(/*tally=*/true);
  ScopedLaunchObserver scope(&step);
  decoder.forward(tokens.data() + t - 1, 1, logits);
  return step;
}

void print_modded89_row(const char* what, int context, const DecodeCounter& counter) {
  const TokenCost& c = counter.cost;
  std::printf("%-10s %8d %12.2f %12.4f %9d %12.2f %12.3f %14.0f %12d\n", what, context, c.bytes() / 1e6, c.flops / 1e9,
              c.launches, 1e6 * c.bytes() / kH200Bandwidth, 1e6 * c.flops / kH200Bf16Flops, 1.0 / c.ceiling_seconds(),
              counter.unaccounted);
}

// The 2026-07-17 model at generate_gpt2's context (2,048 positions), the windows of the record's final validation
// (6 and 20 blocks): a decode step of the KV cache (Modded89Decoder) after t - 1 tokens, and the whole forward
// over the context that each step cost without a cache, as its launchers account them (nothing executed).
void print_modded89_accounting(const std::string& name, const std::vector<int>& contexts) {
  const Modded89Config config = modded89_config_from_name(name);
  const int length = std::min(config.max_seq_len, 2048);
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  auto model = std::make_shared<Modded89Model>(config, 1, length, 1, stream, /*bos_token=*/config.vocab_size);
  model->set_windows(6 * config.window_block, 20 * config.window_block);
  Modded89Decoder decoder(std::shared_ptr<Modded89Model>(model.get(), [](Modded89Model*) {}));
  std::printf(
      "# per new token at batch 1, %s %s, attention short %d long %d tokens: the launchers' counts, nothing "
      "executed\n",
      describe_modded89_config(config).c_str(), kPrecisionName, 6 * config.window_block, 20 * config.window_block);
  std::printf("%-10s %8s %12s %12s %9s %12s %12s %14s %12s\n", "decoder", "context", "total_MB", "GFLOP", "launches",
              "us@4.3TB/s", "us@790TF/s", "ceiling_tok/s", "unaccounted");
  const std::vector<int32_t> tokens(static_cast<size_t>(length), std::min(464, config.vocab_size - 1));
  for (int t : contexts) print_modded89_row("kv_cache", t, count_decode_step(decoder, tokens, t));
  DecodeCounter whole(/*tally=*/true);
  {
    ScopedLaunchObserver scope(&whole);
    std::vector<float> last(static_cast<size_t>(model->context_vocab_size()));
    model->context_logits(tokens.data(), length - 1, 1, last.data());
  }
  print_modded89_row("recompute", length, whole);
  std::printf(
      "# recompute: the whole %d-position forward that each token cost before the KV cache, at every context "
      "(the head over the last row only: a lower bound)\n# launches: kernels and GEMMs; the token and logits "
      "copies come on top\n",
      length);
  model.reset();  // before its stream
  CUDA_CHECK(cudaStreamDestroy(stream));
}

// The 2026-07-17 family's own decoder (what generate_gpt2 runs: its model of 2,048 positions, random weights, the
// windows of the record's final validation) timed through the generation loop as run_generation does GPT-2's.
void run_modded89_generation(const std::string& name, int prompt_tokens, int new_tokens) {
  const Modded89Config config = modded89_config_from_name(name);
  const int block = config.window_block;
  const std::unique_ptr<ModelFamily> family =
      make_modded89_family(config, Modded89AttentionState{6 * block, 20 * block, {}});
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  {
    const std::unique_ptr<CausalDecoder> decoder = family->make_decoder(family->init_params(1337, 1), 256, stream);
    // Tokens below the family's BOS (50256, GPT-2's last real token), which opens documents.
    const GenerationTiming timing = time_generation(*decoder, decoder->vocab_size() - 1, prompt_tokens, new_tokens);
    std::vector<int32_t> tokens = timing.prompt;
    tokens.insert(tokens.end(), timing.result.tokens.begin(), timing.result.tokens.end());
    const DecodeCounter middle = count_decode_step(*decoder, tokens, prompt_tokens + new_tokens / 2);
    print_generate_line(name, timing, 1.0 / middle.cost.ceiling_seconds(), "");
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

bool gpu_present() {
#if defined(LLMC_EMULATION)
  return false;  // the emulated device runs kernels but measures nothing a GPU would
#else
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  return status == cudaSuccess && count > 0;
#endif
}

// Prefill of `prompt_tokens` random tokens, then `new_tokens` decode steps through llmc::generate.
void run_generation(const GPT2Config& config, const std::vector<float>& params, int prompt_tokens, int new_tokens) {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  const GPT2Layout layout = make_param_layout(config, 1);
  GPT2Decoder decoder(layout, params, std::min(256, config.max_seq_len), stream);
  const GenerationTiming timing = time_generation(decoder, config.vocab_size, prompt_tokens, new_tokens);
  const TokenCost middle = token_cost(config, layout.num_parameters, prompt_tokens + new_tokens / 2);
  char device[64];
  std::snprintf(device, sizeof(device), " device_MiB=%.1f", decoder.device_bytes() / 1048576.0);
  print_generate_line(describe_config(config), timing, 1.0 / middle.ceiling_seconds(), device);
}

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> values;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    values.push_back(std::stoi(text.substr(start, end - start)));
    start = end + 1;
  }
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  llmc::CommandLine app{
      "bench_generate: KV-cache generation at batch 1: per-token bytes, FLOPs, launches and ceilings; "
      "tokens/s on a GPU"};
  std::string model = "d12", contexts = "64,256,512,1024";
  int prompt_tokens = 64, new_tokens = 256;
  bool run = false;
  app.option("--model", model, "preset shape (random weights): d12 ..., modded89, modded89-tiny");
  app.option("--prompt-tokens", prompt_tokens, "prefill length of the timed run");
  app.option("--new-tokens", new_tokens, "decode steps of the timed run");
  app.option("--contexts", contexts, "context lengths of the accounting rows");
  app.flag("--run", run, "run the decoder even without a GPU (emulated: a smoke test, not a timing)");
  if (const int exit_status = app.parse(argc, argv); exit_status >= 0) return exit_status;
  try {
    const bool modded89 = model.rfind("modded89", 0) == 0;
    const GPT2Config config = modded89 ? GPT2Config{} : config_from_name(model);
    if (modded89)
      print_modded89_accounting(model, parse_list(contexts));
    else
      print_accounting(config, make_param_layout(config, 1).num_parameters, parse_list(contexts));
    if (!gpu_present() && !run) {
      std::printf("# no GPU: nothing timed (the rows above are counts and ceilings, not measurements)\n");
      return 0;
    }
    if (!gpu_present()) std::printf("# emulated run: the times below are the CPU emulation's, not a GPU's\n");
    if (modded89) {
      run_modded89_generation(model, prompt_tokens, new_tokens);
    } else {
      run_generation(config, init_gpt2_params(make_param_layout(config, 1), 1337), prompt_tokens, new_tokens);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_generate: %s\n", error.what());
    return 1;
  }
  return 0;
}
