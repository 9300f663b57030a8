// Times every GPT-2 kernel and GEMM at a chosen model size (default: GPT-2 124M, B=8, T=1024) and
// prints milliseconds per call with achieved bandwidth or FLOP rate: the per-kernel profile to check
// on a GPU machine. The emulated build runs the same code (at tiny sizes) as a smoke test. Token ids
// come from a token shard (--shard: real text, whose frequent tokens shape the embedding backward) or
// are spread evenly over the vocabulary.

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "llmc/base/command_line.h"
#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/data/shards.h"
#include "llmc/kernels/adamw.cuh"
#include "llmc/kernels/attention.cuh"
#include "llmc/kernels/classifier.cuh"
#include "llmc/kernels/encoder.cuh"
#include "llmc/kernels/flash_attention.cuh"
#include "llmc/kernels/gelu.cuh"
#include "llmc/kernels/global_norm.cuh"
#include "llmc/kernels/layernorm.cuh"
#include "llmc/kernels/matmul.cuh"
#include "test/kernels/bench_support.h"

namespace {

using llmc::floatX;

using bench::Arena;

struct Timer {
  cudaStream_t stream;
  int repeats;
  // Prints ms per call of `work` and the rate (bytes or FLOPs per second) for the given amount per call.
  void time(const std::string& name, double bytes, double flops, const std::function<void()>& work) const {
    const double ms = bench::time_ms(stream, repeats, work);
    if (flops > 0)
      std::printf("%-34s %10.3f ms %10.1f TFLOP/s\n", name.c_str(), ms, flops / (ms * 1e-3) / 1e12);
    else
      std::printf("%-34s %10.3f ms %10.1f GB/s\n", name.c_str(), ms, bytes / (ms * 1e-3) / 1e9);
  }
};

// The model's shape (one layer's worth of every activation is enough to time each kernel).
struct Sizes {
  int B = 8, T = 1024, C = 768, NH = 12, V = 50257, repeats = 20;
  long long params = 124475904;
  std::string shard;  // token ids from this shard's start; empty: spread over the vocabulary
  bool encoder_plan_only = false;
  int Vp() const { return (V + 127) / 128 * 128; }
  size_t N() const { return static_cast<size_t>(B) * T; }
};

// Every buffer the timed calls read or write.
struct Buffers {
  std::vector<int> tokens_host;
  int* tokens;
  floatX *wte, *wpe, *dwte, *dwpe, *act, *act2, *residual, *dact, *wide, *wide_pre, *dwide;
  floatX *qkv, *qkvr, *dqkv, *dqkvr, *att, *datt, *attention_scratch;
  floatX *ln_weight, *ln_bias, *dln_weight, *dln_bias, *fc_weight, *fc_bias, *dfc_weight, *dfc_bias, *logits;
  float *mean, *rstd, *losses, *scratch, *norm_scratch;
  size_t scratch_floats, norm_scratch_floats;
  floatX *all_params, *all_grads;
  float *master, *moment1, *moment2;
};

// The batch's token ids: the shard's first B*T tokens (folded into the vocabulary), or ids spread evenly.
std::vector<int> batch_tokens(const Sizes& s) {
  std::vector<int> tokens(s.N());
  if (s.shard.empty()) {
    for (size_t i = 0; i < s.N(); i++) tokens[i] = static_cast<int>((i * 7919) % s.V);
    return tokens;
  }
  const std::vector<uint16_t> ids = llmc::read_shard_token_range(s.shard, 0, static_cast<int64_t>(s.N()));
  for (size_t i = 0; i < s.N(); i++) tokens[i] = ids[i] % s.V;
  return tokens;
}

// What the embedding backward's plan makes of the batch: how long the longest serial sum of one thread is,
// against the per-token kernel it replaced (one thread summed every position of its token). Returns the plan.
llmc::EncoderBackwardPlan print_encoder_plan(const Sizes& s, const std::vector<int>& tokens, std::vector<int>& table) {
  std::vector<int> counts;
  table.assign(llmc::encoder_backward_table_ints(static_cast<int>(s.N())), 0);
  const llmc::EncoderBackwardPlan plan =
      llmc::build_encoder_backward_plan(tokens.data(), static_cast<int>(s.N()), s.V, table.data(), counts);
  std::printf("# encoder_backward plan (%s): %d positions, %d distinct tokens, the most frequent at %d positions, "
              "%d runs crossing chunks of %d; longest serial sum per thread %d adds (per-token kernel: %d)\n",
              s.shard.empty() ? "ids spread evenly" : s.shard.c_str(), plan.positions, plan.distinct,
              plan.longest_run, plan.crossing_runs, llmc::kEncoderChunk, llmc::encoder_backward_serial_adds(plan),
              plan.longest_run);
  return plan;
}

Buffers allocate_buffers(Arena& arena, const Sizes& s) {
  const size_t N = s.N(), C = static_cast<size_t>(s.C), Vp = static_cast<size_t>(s.Vp()),
               BNHTT = static_cast<size_t>(s.B) * s.NH * s.T * s.T;
  Buffers b;
  b.tokens_host = batch_tokens(s);
  b.tokens = arena.upload(b.tokens_host);
  b.wte = arena.make<floatX>(Vp * C, 0.02f);
  b.wpe = arena.make<floatX>(static_cast<size_t>(s.T) * C, 0.02f);
  b.dwte = arena.make<floatX>(Vp * C, 0.0f);
  b.dwpe = arena.make<floatX>(static_cast<size_t>(s.T) * C, 0.0f);
  for (floatX** narrow : {&b.act, &b.act2, &b.residual, &b.dact, &b.attention_scratch})
    *narrow = arena.make<floatX>(N * C);
  for (floatX** wide : {&b.wide, &b.wide_pre, &b.dwide}) *wide = arena.make<floatX>(N * 4 * C);
  for (floatX** qkv : {&b.qkv, &b.qkvr, &b.dqkv, &b.dqkvr}) *qkv = arena.make<floatX>(N * 3 * C);
  b.att = arena.make<floatX>(BNHTT);
  b.datt = arena.make<floatX>(BNHTT);
  b.ln_weight = arena.make<floatX>(C);
  b.ln_bias = arena.make<floatX>(C);
  b.dln_weight = arena.make<floatX>(C, 0.0f);
  b.dln_bias = arena.make<floatX>(C, 0.0f);
  b.fc_weight = arena.make<floatX>(4 * C * C, 0.02f);
  b.fc_bias = arena.make<floatX>(4 * C);
  b.dfc_weight = arena.make<floatX>(4 * C * C, 0.0f);
  b.dfc_bias = arena.make<floatX>(4 * C, 0.0f);
  b.logits = arena.make<floatX>(N * Vp);
  b.mean = arena.make<float>(N);
  b.rstd = arena.make<float>(N, 0.5f);
  b.losses = arena.make<float>(N);
  // The reductions' scratch starts zero (their fold counters); the global norm has its own.
  b.scratch_floats = std::max(llmc::layernorm_backward_scratch_floats(static_cast<int>(N), s.C),
                              llmc::matmul_backward_scratch_floats(static_cast<int>(N), std::max(s.Vp(), 4 * s.C)));
  b.scratch = arena.make<float>(b.scratch_floats);
  CUDA_CHECK(cudaMemset(b.scratch, 0, b.scratch_floats * sizeof(float)));
  b.norm_scratch_floats = llmc::global_norm_scratch_floats(static_cast<size_t>(s.params)) + 1;
  b.norm_scratch = arena.make<float>(b.norm_scratch_floats);
  CUDA_CHECK(cudaMemset(b.norm_scratch, 0, b.norm_scratch_floats * sizeof(float)));
  b.all_params = arena.make<floatX>(static_cast<size_t>(s.params), 0.02f);
  b.all_grads = arena.make<floatX>(static_cast<size_t>(s.params), 0.01f);
  b.master = arena.make<float>(static_cast<size_t>(s.params), 0.02f);
  b.moment1 = arena.make<float>(static_cast<size_t>(s.params), 0.0f);
  b.moment2 = arena.make<float>(static_cast<size_t>(s.params), 0.0f);
  return b;
}

void time_forward(const Timer& timer, const Sizes& s, Buffers& b, llmc::MatmulContext& matmul, cudaStream_t stream) {
  const int B = s.B, T = s.T, C = s.C, NH = s.NH, Vp = s.Vp(), N = static_cast<int>(s.N());
  const double x = sizeof(floatX), nc = static_cast<double>(N) * C;
  timer.time("encoder_forward", 3 * nc * x, 0, [&] {
    llmc::encoder_forward(b.act, b.tokens, b.wte, b.wpe, B, T, C, stream);
  });
  timer.time("layernorm_forward", 2 * nc * x, 0, [&] {
    llmc::layernorm_forward(b.act2, b.mean, b.rstd, b.act, b.ln_weight, b.ln_bias, N, C, stream);
  });
  timer.time("fused_residual_layernorm_forward", 4 * nc * x, 0, [&] {
    llmc::fused_residual_layernorm_forward(b.residual, b.act2, b.mean, b.rstd, b.act, b.dact, b.ln_weight, b.ln_bias,
                                           N, C, stream);
  });
  timer.time("matmul_forward qkv (C->3C)", 0, 2.0 * N * C * 3.0 * C, [&] {
    llmc::matmul_forward(matmul, b.qkv, nullptr, b.act2, b.fc_weight, b.fc_bias, N, C, 3 * C, stream);
  });
  timer.time("matmul_forward fc+gelu (C->4C)", 0, 2.0 * N * C * 4.0 * C, [&] {
    llmc::matmul_forward(matmul, b.wide, b.wide_pre, b.act2, b.fc_weight, b.fc_bias, N, C, 4 * C, stream);
  });
  timer.time("gelu_forward (4C)", 8 * nc * x, 0,
             [&] { llmc::gelu_forward(b.wide, b.wide_pre, static_cast<size_t>(N) * 4 * C, stream); });
  timer.time("attention_forward", 0, 4.0 * B * NH * static_cast<double>(T) * T * (C / NH), [&] {
    llmc::attention_forward(matmul, b.act, b.qkvr, b.att, b.attention_scratch, b.qkv, B, T, C, NH, stream);
  });
  timer.time("matmul_forward lm head (C->Vp)", 0, 2.0 * N * C * Vp, [&] {
    llmc::matmul_forward(matmul, b.logits, nullptr, b.act2, b.wte, nullptr, N, C, Vp, stream);
  });
  timer.time("fused_classifier", 3.0 * N * Vp * x, 0, [&] {
    llmc::fused_classifier(b.logits, b.losses, b.tokens, 1.0f / N, N, s.V, Vp, true, stream);
  });
}

void time_backward(const Timer& timer, const Sizes& s, Buffers& b, llmc::MatmulContext& matmul, cudaStream_t stream) {
  const int B = s.B, T = s.T, C = s.C, NH = s.NH, Vp = s.Vp(), N = static_cast<int>(s.N());
  const double x = sizeof(floatX), nc = static_cast<double>(N) * C;
  timer.time("matmul_backward lm head", 0, 4.0 * N * C * Vp, [&] {
    llmc::matmul_backward(matmul, b.act, b.dwte, nullptr, b.logits, b.act2, b.wte, nullptr, N, C, Vp, true,
                          b.scratch, b.scratch_floats, stream);
  });
  timer.time("matmul_backward fc (+bias)", 0, 4.0 * N * C * 4.0 * C, [&] {
    llmc::matmul_backward(matmul, b.dact, b.dfc_weight, b.dfc_bias, b.dwide, b.act2, b.fc_weight, nullptr, N, C, 4 * C,
                          true, b.scratch, b.scratch_floats, stream);
  });
  timer.time("gelu_backward (4C)", 12 * nc * x, 0,
             [&] { llmc::gelu_backward(b.dwide, b.wide_pre, b.dwide, static_cast<size_t>(N) * 4 * C, stream); });
  timer.time("attention_backward", 0, 8.0 * B * NH * static_cast<double>(T) * T * (C / NH), [&] {
    llmc::attention_backward(matmul, b.dqkv, b.dqkvr, b.datt, b.attention_scratch, b.dact, b.qkvr, b.att, B, T, C, NH,
                             stream);
  });
  timer.time("layernorm_backward", 5 * nc * x, 0, [&] {
    llmc::layernorm_backward(b.dact, b.dln_weight, b.dln_bias, b.act2, b.act, b.ln_weight, b.mean, b.rstd, N, C,
                             true, true, b.scratch, b.scratch_floats, stream);
  });
}

// The fused attention exists for bf16 and head size 64 only (llmc/kernels/flash_attention.cuh).
void time_flash_attention(const Timer& timer, const Sizes& s, Arena& arena, Buffers& b, cudaStream_t stream) {
#if !defined(LLMC_FP32)
  const int B = s.B, T = s.T, C = s.C, NH = s.NH;
  if (C / NH != llmc::flash::kHeadSize) return;
  float* lse = arena.make<float>(static_cast<size_t>(B) * NH * T);
  float* delta = arena.make<float>(static_cast<size_t>(B) * NH * T);
  // Causal: half of the T x T scores are computed (the diagonal tiles in full).
  const double causal_flops = 2.0 * B * NH * static_cast<double>(T) * T * (C / NH);
  timer.time("flash_attention_forward", 0, causal_flops, [&] {
    llmc::flash_attention_forward(b.act, lse, b.qkv, B, T, C, NH, stream);
  });
  timer.time("flash_attention_backward", 0, 2.5 * causal_flops, [&] {
    llmc::flash_attention_backward(b.dqkv, delta, b.dact, b.act, b.qkv, lse, B, T, C, NH, stream);
  });
#else
  (void)timer, (void)s, (void)arena, (void)b, (void)stream;
#endif
}

// The encoder's backward (its plan built on the host beforehand, as the model does when it stages a batch)
// and the per-parameter kernels of the optimizer.
void time_parameter_kernels(const Timer& timer, const Sizes& s, Arena& arena, Buffers& b, cudaStream_t stream) {
  const double x = sizeof(floatX), nc = static_cast<double>(s.N()) * s.C, params = static_cast<double>(s.params);
  std::vector<int> table;
  const llmc::EncoderBackwardPlan plan = print_encoder_plan(s, b.tokens_host, table);
  int* device_table = arena.upload(table);
  float* partials = arena.make<float>(llmc::encoder_backward_partial_floats(static_cast<int>(s.N()), s.C));
  timer.time("encoder_backward", 3 * nc * x, 0, [&] {
    llmc::encoder_backward(b.dwte, b.dwpe, b.dact, device_table, plan, s.B, s.T, s.T, s.C, true, partials, stream);
  });
  timer.time("global_norm_squared (all params)", params * x, 0, [&] {
    llmc::global_norm_squared(b.norm_scratch + b.norm_scratch_floats - 1, b.all_grads, static_cast<size_t>(s.params),
                              false, b.norm_scratch, b.norm_scratch_floats - 1, stream);
  });
  timer.time("adamw_update (all params)", params * (2 * x + 6 * 4), 0, [&] {
    llmc::adamw_update(b.all_params, b.master, b.all_grads, b.moment1, b.moment2, static_cast<size_t>(s.params), 1,
                       1e-4f, llmc::AdamWSettings(), 1.0f, stream);
  });
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace

int main(int argc, char** argv) {
  llmc::CommandLine app{"Time the GPT-2 kernels and GEMMs (llmc/kernels) at one model size."};
  Sizes s;
  app.positive("--batch", s.B, "micro-batch size B");
  app.positive("--seq", s.T, "sequence length T");
  app.positive("--channels", s.C, "model width C");
  app.positive("--heads", s.NH, "attention heads (must divide C)");
  app.positive("--vocab", s.V, "vocabulary size V (padded to a multiple of 128)");
  app.positive("--params", s.params, "parameter count for AdamW and the global norm");
  app.positive("--repeats", s.repeats, "timed calls per kernel");
  app.option("--shard", s.shard, "token shard whose first B*T tokens are the batch (default: ids spread evenly)");
  app.flag("--encoder-plan", s.encoder_plan_only,
           "only print the embedding backward's plan of the batch (no kernel runs: any size, any build)");
  if (const int exit_status = app.parse(argc, argv); exit_status >= 0) return exit_status;
  if (s.C % s.NH != 0) {
    std::fprintf(stderr, "bench_kernels: --channels %d is not divisible by --heads %d\n", s.C, s.NH);
    return 2;
  }
  try {
    if (s.encoder_plan_only) {
      std::vector<int> table;
      print_encoder_plan(s, batch_tokens(s), table);
      return 0;
    }
    std::printf("bench_kernels (%s): B=%d T=%d C=%d NH=%d V=%d (Vp=%d) params=%lld, %d repeats\n",
                llmc::kPrecisionName, s.B, s.T, s.C, s.NH, s.V, s.Vp(), s.params, s.repeats);
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    const Timer timer{stream, s.repeats};
    Arena arena;
    llmc::MatmulContext matmul;
    Buffers buffers = allocate_buffers(arena, s);
    time_forward(timer, s, buffers, matmul, stream);
    time_backward(timer, s, buffers, matmul, stream);
    time_flash_attention(timer, s, arena, buffers, stream);
    time_parameter_kernels(timer, s, arena, buffers, stream);
    CUDA_CHECK(cudaStreamDestroy(stream));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_kernels: %s\n", error.what());
    return 1;
  }
  return 0;
}
