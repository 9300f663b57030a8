// Times every GPT-2 kernel and GEMM at a chosen model size (default: GPT-2 124M, B=8, T=1024) and
// prints milliseconds per call with achieved bandwidth or FLOP rate: the per-kernel profile to check
// on a GPU machine. The emulated build runs the same code (at tiny sizes) as a smoke test.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "llmc/cuda_common.h"
#include "llmc/kernels/adamw.cuh"
#include "llmc/kernels/attention.cuh"
#include "llmc/kernels/classifier.cuh"
#include "llmc/kernels/encoder.cuh"
#include "llmc/kernels/flash_attention.cuh"
#include "llmc/kernels/gelu.cuh"
#include "llmc/kernels/global_norm.cuh"
#include "llmc/kernels/layernorm.cuh"
#include "llmc/kernels/matmul.cuh"
#include "llmc/precision.h"

namespace {

using llmc::floatX;

// Deterministic pseudo-random values in [-scale, scale): realistic bit patterns for the GEMMs.
template <typename T>
__global__ void fill_pattern_kernel(T* data, size_t n, float scale, unsigned seed) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    unsigned x = (unsigned)i * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    data[i] = llmc::from_float<T>(scale * ((float)(x & 0xffffff) / 8388608.0f - 1.0f));
  }
}

// Device allocations freed at exit; every buffer starts with the fill pattern.
class Arena {
 public:
  ~Arena() {
    for (void* pointer : allocations_) {
      const cudaError_t status = cudaFree(pointer);
      if (status != cudaSuccess) std::fprintf(stderr, "cudaFree failed: %s\n", cudaGetErrorString(status));
    }
  }
  template <typename T>
  T* make(size_t n, float scale = 1.0f) {
    T* pointer = nullptr;
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&pointer), n * sizeof(T)));
    allocations_.push_back(pointer);
    LLMC_LAUNCH(fill_pattern_kernel<T>, dim3(llmc::elementwise_grid(n, 256)), dim3(256), 0, nullptr, pointer, n, scale,
                (unsigned)allocations_.size());
    return pointer;
  }

 private:
  std::vector<void*> allocations_;
};

struct Timer {
  cudaStream_t stream;
  int repeats;
  // Runs `work` once to warm up, then `repeats` times between two events; prints ms per call and the
  // rate (bytes or FLOPs per second) for the given amount per call.
  void time(const std::string& name, double bytes, double flops, const std::function<void()>& work) const {
    work();
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < repeats; i++) work();
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float total_ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&total_ms, start, stop));
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    const double ms = total_ms / repeats;
    if (flops > 0)
      std::printf("%-34s %10.3f ms %10.1f TFLOP/s\n", name.c_str(), ms, flops / (ms * 1e-3) / 1e12);
    else
      std::printf("%-34s %10.3f ms %10.1f GB/s\n", name.c_str(), ms, bytes / (ms * 1e-3) / 1e9);
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time the GPT-2 kernels and GEMMs (llmc/kernels) at one model size."};
  int B = 8, T = 1024, C = 768, NH = 12, V = 50257, repeats = 20;
  long long params = 124475904;
  app.add_option("--batch", B, "micro-batch size B")->check(CLI::PositiveNumber);
  app.add_option("--seq", T, "sequence length T")->check(CLI::PositiveNumber);
  app.add_option("--channels", C, "model width C")->check(CLI::PositiveNumber);
  app.add_option("--heads", NH, "attention heads (must divide C)")->check(CLI::PositiveNumber);
  app.add_option("--vocab", V, "vocabulary size V (padded to a multiple of 128)")->check(CLI::PositiveNumber);
  app.add_option("--params", params, "parameter count for AdamW and the global norm")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed calls per kernel")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (C % NH != 0) {
    std::fprintf(stderr, "bench_kernels: --channels %d is not divisible by --heads %d\n", C, NH);
    return 2;
  }
  try {
    const int Vp = (V + 127) / 128 * 128;
    const size_t N = (size_t)B * T;
    const double x = sizeof(floatX);
    std::printf("bench_kernels (%s): B=%d T=%d C=%d NH=%d V=%d (Vp=%d) params=%lld, %d repeats\n",
                llmc::kPrecisionName, B, T, C, NH, V, Vp, params, repeats);
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    const Timer timer{stream, repeats};
    Arena arena;
    llmc::MatmulContext matmul;

    std::vector<int> tokens_host(N);
    for (size_t i = 0; i < N; i++) tokens_host[i] = (int)((i * 7919) % V);
    int* tokens = nullptr;
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&tokens), N * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(tokens, tokens_host.data(), N * sizeof(int), cudaMemcpyHostToDevice));
    floatX* wte = arena.make<floatX>((size_t)Vp * C, 0.02f);
    floatX* wpe = arena.make<floatX>((size_t)T * C, 0.02f);
    floatX* dwte = arena.make<floatX>((size_t)Vp * C, 0.0f);
    floatX* dwpe = arena.make<floatX>((size_t)T * C, 0.0f);
    floatX* act = arena.make<floatX>(N * C);
    floatX* act2 = arena.make<floatX>(N * C);
    floatX* residual = arena.make<floatX>(N * C);
    floatX* dact = arena.make<floatX>(N * C);
    floatX* wide = arena.make<floatX>(N * 4 * C);
    floatX* wide_pre = arena.make<floatX>(N * 4 * C);
    floatX* dwide = arena.make<floatX>(N * 4 * C);
    floatX* qkv = arena.make<floatX>(N * 3 * C);
    floatX* qkvr = arena.make<floatX>(N * 3 * C);
    floatX* dqkv = arena.make<floatX>(N * 3 * C);
    floatX* dqkvr = arena.make<floatX>(N * 3 * C);
    floatX* att = arena.make<floatX>((size_t)B * NH * T * T);
    floatX* datt = arena.make<floatX>((size_t)B * NH * T * T);
    floatX* attention_scratch = arena.make<floatX>(N * C);
    floatX* ln_weight = arena.make<floatX>(C);
    floatX* ln_bias = arena.make<floatX>(C);
    floatX* dln_weight = arena.make<floatX>(C, 0.0f);
    floatX* dln_bias = arena.make<floatX>(C, 0.0f);
    floatX* fc_weight = arena.make<floatX>((size_t)4 * C * C, 0.02f);
    floatX* fc_bias = arena.make<floatX>((size_t)4 * C);
    floatX* dfc_weight = arena.make<floatX>((size_t)4 * C * C, 0.0f);
    floatX* dfc_bias = arena.make<floatX>((size_t)4 * C, 0.0f);
    floatX* logits = arena.make<floatX>(N * Vp);
    float* mean = arena.make<float>(N);
    float* rstd = arena.make<float>(N, 0.5f);
    float* losses = arena.make<float>(N);
    const size_t scratch_floats =
        std::max({llmc::layernorm_backward_scratch_floats((int)N, C),
                  llmc::matmul_backward_scratch_floats((int)N, std::max(Vp, 4 * C)),
                  llmc::global_norm_scratch_floats((size_t)params) + 1});
    float* scratch = arena.make<float>(scratch_floats);
    floatX* all_params = arena.make<floatX>((size_t)params, 0.02f);
    floatX* all_grads = arena.make<floatX>((size_t)params, 0.01f);
    float* master = arena.make<float>((size_t)params, 0.02f);
    float* moment1 = arena.make<float>((size_t)params, 0.0f);
    float* moment2 = arena.make<float>((size_t)params, 0.0f);
    llmc::EncoderBackwardWorkspace encoder_workspace((int)N);
    const double nc = (double)N * C;
    const double gemm_4c = 2.0 * N * C * 4.0 * C;

    timer.time("encoder_forward", 3 * nc * x, 0, [&] {
      llmc::encoder_forward(act, tokens, wte, wpe, B, T, C, stream);
    });
    timer.time("layernorm_forward", 2 * nc * x, 0, [&] {
      llmc::layernorm_forward(act2, mean, rstd, act, ln_weight, ln_bias, (int)N, C, stream);
    });
    timer.time("fused_residual_layernorm_forward", 4 * nc * x, 0, [&] {
      llmc::fused_residual_layernorm_forward(residual, act2, mean, rstd, act, dact, ln_weight, ln_bias, (int)N, C,
                                             stream);
    });
    timer.time("matmul_forward qkv (C->3C)", 0, 2.0 * N * C * 3.0 * C, [&] {
      llmc::matmul_forward(matmul, qkv, nullptr, act2, fc_weight, fc_bias, (int)N, C, 3 * C, stream);
    });
    timer.time("matmul_forward fc+gelu (C->4C)", 0, gemm_4c, [&] {
      llmc::matmul_forward(matmul, wide, wide_pre, act2, fc_weight, fc_bias, (int)N, C, 4 * C, stream);
    });
    timer.time("gelu_forward (4C)", 8 * nc * x, 0, [&] { llmc::gelu_forward(wide, wide_pre, N * 4 * C, stream); });
    timer.time("attention_forward", 0, 4.0 * B * NH * (double)T * T * (C / NH), [&] {
      llmc::attention_forward(matmul, act, qkvr, att, attention_scratch, qkv, B, T, C, NH, stream);
    });
    timer.time("matmul_forward lm head (C->Vp)", 0, 2.0 * N * C * Vp, [&] {
      llmc::matmul_forward(matmul, logits, nullptr, act2, wte, nullptr, (int)N, C, Vp, stream);
    });
    timer.time("fused_classifier", 3.0 * N * Vp * x, 0, [&] {
      llmc::fused_classifier(logits, losses, tokens, 1.0f / N, (int)N, V, Vp, true, stream);
    });
    timer.time("matmul_backward lm head", 0, 4.0 * N * C * Vp, [&] {
      llmc::matmul_backward(matmul, act, dwte, nullptr, logits, act2, wte, nullptr, (int)N, C, Vp, true, scratch,
                            scratch_floats, stream);
    });
    timer.time("matmul_backward fc (+bias)", 0, 2 * gemm_4c, [&] {
      llmc::matmul_backward(matmul, dact, dfc_weight, dfc_bias, dwide, act2, fc_weight, nullptr, (int)N, C, 4 * C,
                            true, scratch, scratch_floats, stream);
    });
    timer.time("gelu_backward (4C)", 12 * nc * x, 0, [&] {
      llmc::gelu_backward(dwide, wide_pre, dwide, N * 4 * C, stream);
    });
    timer.time("attention_backward", 0, 8.0 * B * NH * (double)T * T * (C / NH), [&] {
      llmc::attention_backward(matmul, dqkv, dqkvr, datt, attention_scratch, dact, qkvr, att, B, T, C, NH, stream);
    });
#if !defined(LLMC_FP32)
    if (C / NH == llmc::flash::kHeadSize) {
      float* lse = arena.make<float>((size_t)B * NH * T);
      float* delta = arena.make<float>((size_t)B * NH * T);
      // Causal: half of the T x T scores are computed (the diagonal tiles in full).
      const double causal_flops = 2.0 * B * NH * (double)T * T * (C / NH);
      timer.time("flash_attention_forward", 0, causal_flops, [&] {
        llmc::flash_attention_forward(act, lse, qkv, B, T, C, NH, stream);
      });
      timer.time("flash_attention_backward", 0, 2.5 * causal_flops, [&] {
        llmc::flash_attention_backward(dqkv, delta, dact, act, qkv, lse, B, T, C, NH, stream);
      });
    }
#endif
    timer.time("layernorm_backward", 5 * nc * x, 0, [&] {
      llmc::layernorm_backward(dact, dln_weight, dln_bias, act2, act, ln_weight, mean, rstd, (int)N, C, scratch,
                               scratch_floats, stream);
    });
    timer.time("encoder_backward (incl. host sort)", 3 * nc * x, 0, [&] {
      llmc::encoder_backward(dwte, dwpe, dact, tokens_host.data(), B, T, C, encoder_workspace, stream);
    });
    timer.time("global_norm_squared (all params)", (double)params * x, 0, [&] {
      llmc::global_norm_squared(scratch + scratch_floats - 1, all_grads, (size_t)params, false, scratch,
                                scratch_floats - 1, stream);
    });
    llmc::AdamWHyperparameters hp;
    hp.learning_rate = 1e-4f;
    timer.time("adamw_update (all params)", (double)params * (2 * x + 6 * 4), 0, [&] {
      llmc::adamw_update(all_params, master, all_grads, moment1, moment2, (size_t)params, 1, hp, stream);
    });
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaFree(tokens));
    CUDA_CHECK(cudaStreamDestroy(stream));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_kernels: %s\n", error.what());
    return 1;
  }
  return 0;
}
