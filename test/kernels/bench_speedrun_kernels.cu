// Benchmark rows of the speedrun model's kernels at the record's shapes (T = 32,768 tokens per rank,
// C = 768, 6 heads x 128, V = 50,304): per call the bytes moved, the FLOPs, and the time they take at the
// H200's ceilings (4.3 TB/s HBM, 790 TFLOP/s bf16 dense, 1,979 TFLOP/s FP8 dense for the FP8 GEMMs),
// with the calls per training step, and for comparison the 2026-07-17 record's FP8 MLP up projection both ways;
// on a GPU also the measured time. --dry-run prints the model rows only (what the emulated build reports for the record
// shapes); the emulated smoke test runs the kernels at a tiny shape.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "llmc/base/command_line.h"
#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/kernels/attention_gate.cuh"
#include "llmc/kernels/embedding.cuh"
#include "llmc/kernels/fp8_head.cuh"
#include "llmc/kernels/qk_norm_rope.cuh"
#include "llmc/kernels/relu_squared.cuh"
#include "llmc/kernels/wgmma_fp8_gemm.cuh"
#include "llmc/kernels/wgmma_gemm.cuh"
#include "llmc/kernels/residual_mix.cuh"
#include "llmc/kernels/residual_norm.cuh"
#include "llmc/kernels/rmsnorm.cuh"
#include "llmc/kernels/scalar_vector.cuh"
#include "llmc/kernels/smear_gate.cuh"
#include "llmc/kernels/softcap_cross_entropy.cuh"
#include "test/kernels/bench_support.h"

namespace {

using llmc::floatX;

#if defined(LLMC_EMULATION)
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif
constexpr double kHbmBytesPerSecond = 4.3e12;
constexpr double kBf16FlopsPerSecond = 790e12;
constexpr double kFp8FlopsPerSecond = 1979e12;

struct Shape {
  int T, C, H, V;
  int D() const { return C / H; }
};

// One kernel launch (or launcher call): its traffic and arithmetic per call and how often a step runs it.
struct Row {
  std::string name;
  double calls_per_step;
  double bytes, flops;
  std::function<void()> work;                     // empty in a dry run
  double flops_per_second = kBf16FlopsPerSecond;  // the tensor-core ceiling of its GEMMs
  double ceiling_us() const { return 1e6 * std::max(bytes / kHbmBytesPerSecond, flops / flops_per_second); }
};

// The GEMM rows (named "GEMM", or the FP8 head's "fp8 head: z = ..."): counted by their FLOPs elsewhere, not as
// memory-bound kernels (scripts/project_speedrun.py reads them the same way).
bool is_gemm_row(const Row& row) {
  return row.name.find("GEMM") != std::string::npos ||
         (row.name.rfind("fp8 head: ", 0) == 0 && row.name.find(" = ") != std::string::npos);
}

// The FP8 head (docs/fp8.md; its sizes must be multiples of 16).
bool fp8_head_fits(const Shape& s) { return s.T % 16 == 0 && s.C % 16 == 0 && s.V % 16 == 0; }

// Minimum HBM traffic (each tensor read or written once) and fp32 operations (a transcendental counts as one)
// of every kernel; calls per step of our trainer on the record's model (10 attention layers, 11 MLPs, 23 RMSNorms:
// 12 of them in the pass of the mix that writes their input, residual_norm_forward and _backward: the 11
// block-lambda mixes and the backout; 27 mixes: those 12 and 15 alone). With the FP8 head the loss writes its e5m2
// codes (fp8_head_rows).
// With --wgmma-gemms (wgmma_gemms) the MLP's two GEMMs take ReLU^2 and its slope into their epilogues and the qkv GEMM
// the QK-norm, RoPE and v mix: those rows (the 10 v mixes of mix_forward's 15) run no more and the wgmma GEMMs' rows
// do (named GEMM: they count with the GEMMs, not the memory-bound kernels); the cuBLASLt GEMMs they replace are
// printed beside them, 0 calls (the block GEMMs are counted elsewhere). The fused qkv row reads a value embedding in
// each of its 10 calls, as the mix row counts one in each. The QK-norm and RoPE backward runs in the window attention's
// dq and dk stores (head 128, bf16): its row counts what that adds to the attention kernels (each reads the tables
// and rstd; n comes from the q or k tile they hold), and the separate kernel's row, 0 calls, what it would move.
// The sigmoid gate on the attention output runs there too (window_attention::OutputGate): the forward's store
// multiplies by it, the delta kernel writes it and the logit gradients (delta (1 - g): the ungated output is never
// stored), dq and dkdv read it per query; its row counts xn's 12 columns read twice and those floats, and the separate
// gate kernels' rows stand at 0 calls. The logit gradients' dxn and dw pass keeps a row of its own. The dV store
// runs the value mix's backward (window_attention::ValueMixBackward): mix_backward runs for the 5 skips only, and the
// row of the stores counts v_raw and ve read and dve read and written (a value embedding in each of the 10 layers,
// as the mix rows count).
// Rows without work (the stores' share of the attention kernels) print no measured time: bench_window_attention
// --norm-rope times the backward with them.
std::vector<Row> model_rows(const Shape& s, bool wgmma_gemms) {
  const double x = sizeof(floatX), T = s.T, C = s.C, H = s.H, D = s.D(), V = s.V, TC = T * C;
  const double relu_calls = wgmma_gemms ? 0 : 11, mlp_flops = 2 * T * C * 4 * C, qkv_flops = 2 * T * C * 3 * C;
  const double rope_calls = wgmma_gemms ? 0 : 10, mix_calls = wgmma_gemms ? 5 : 15;
  const double qkv_fused_bytes = (TC + 3 * C * C + 6 * TC + TC + T * D) * 2 + 8 * T * H;
  return {
      {"rmsnorm_forward", 11, 2 * TC * x + 4 * T, 3 * TC, {}},
      {"rmsnorm_backward (accumulate)", 11, 4 * TC * x + 4 * T, 6 * TC, {}},
      {"rope_tables_build (per YaRN change)", 0, T * D * x + 4 * D / 2, 3 * T * D / 2, {}},
      {"qk_norm_rope_forward (q and k)", rope_calls, 4 * TC * x + T * D * x + 8 * T * H, 2 * TC * 9, {}},
      {"qk_norm_rope_backward (in place)", 0, 6 * TC * x + T * D * x + 8 * T * H, 2 * TC * 14, {}},
      {"qk-norm, rope bwd in attention stores", 10, 2 * (T * D * x + 4 * T * H), 2 * 14 * TC, {}},
      {"relu_squared_forward (4C)", relu_calls, 2 * 4 * TC * x, 2 * 4 * TC, {}},
      {"relu_squared_backward (4C)", relu_calls, 3 * 4 * TC * x, 3 * 4 * TC, {}},
      {"softcap_cross_entropy (fused fwd+bwd)", fp8_head_fits(s) ? 0.0 : 1.0, 2 * T * V * x + 8 * T, 24 * T * V, {}},
      {"smear_forward", 1, 2 * TC * x, 3 * TC + 30 * T, {}},
      {"smear_backward (+ dw, dlambda)", 1, 3 * TC * x, 8 * TC + 60 * T, {}},
      {"attention_gate_forward", 0, 2 * TC * x + 12 * T * x, TC + 30 * T * H, {}},
      {"attention_gate_backward (+ dxn, dw)", 0, 3 * TC * x + 4 * 12 * T * x + 8 * T * H, 3 * TC + 90 * T * H, {}},
      {"attention gate in attention stores", 10, 2 * 12 * T * x + 16 * T * H, 2 * 30 * T * H + TC, {}},
      {"attention gate dxn, dw (logit grads)", 10, 3 * 12 * T * x + 4 * T * H, 4 * 12 * T * H, {}},
      {"mix_forward (skips, value embeds)", mix_calls, 3 * TC * x, 3 * TC, {}},
      {"mix_backward (+ 2 scalar grads)", 5, 6 * TC * x, 6 * TC, {}},
      {"v mix bwd in attention stores", 10, 4 * TC * x, 4 * TC, {}},
      {"residual_norm_forward (mix + norm)", 12, 4 * TC * x + 4 * T, 6 * TC, {}},
      {"residual_norm_backward (norm + mix)", 12, 8 * TC * x + 4 * T, 11 * TC, {}},
      {"embedding_forward (4 tables)", 1, 8 * TC * x + 4 * T, 0, {}},
      {"embedding_backward (4 tables, bound)", 1, 12 * TC * x + 8 * T, 4 * TC, {}},
      {"scalars_to_fp32 (64 scalars)", 1, 64 * (x + 4), 0, {}},
      {"add_fp32_grads (64 scalars)", 1, 64 * (2 * x + 4), 64, {}},
      {"MLP fc GEMM (cuBLASLt)", 0, (TC + 4 * C * C + 4 * TC) * 2, mlp_flops, {}},
      {"MLP fc GEMM + relu^2 (wgmma)", 11 - relu_calls, (TC + 4 * C * C + 8 * TC) * 2, mlp_flops, {}},
      {"MLP dx GEMM (cuBLASLt)", 0, (TC + 4 * C * C + 4 * TC) * 2, mlp_flops, {}},
      {"MLP dx GEMM + relu^2 slope (wgmma)", 11 - relu_calls, (TC + 4 * C * C + 8 * TC) * 2, mlp_flops, {}},
      {"qkv GEMM (cuBLASLt)", 0, (TC + 3 * C * C + 3 * TC) * 2, qkv_flops, {}},
      {"qkv GEMM + qk-norm, rope, v mix (wgmma)", 10 - rope_calls, qkv_fused_bytes, qkv_flops, {}},
  };
}

// The FP8 head: the casts (a division and a conversion per element, the transposed and straight fp8 copies
// written), the loss writing dz's e5m2 codes and their transpose, and the three FP8 GEMMs, once per step; and for
// comparison one bf16 head GEMM (three per step with --fp8-head off, not in the total).

std::vector<Row> fp8_head_rows(const Shape& s) {
  const double x = sizeof(floatX), T = s.T, C = s.C, V = s.V, gemm = 2 * T * V * C;
  std::vector<Row> rows = {
      {"fp8 head: cast x -> x8, x8t", 1, T * C * (x + 2), 2 * T * C, {}},
      {"fp8 head: cast W -> w8, w8t", 1, V * C * (x + 2), 2 * V * C, {}},
      {"fp8 head: z = x8 w8^T (e4m3, fast)", 1, T * C + V * C + T * V * x, gemm, {}, kFp8FlopsPerSecond},
      {"fp8 head: loss, dz as e5m2 codes g8", 1, T * V * (x + 1) + 8 * T, 25 * T * V, {}},
      {"fp8 head: transpose g8 -> g8t", 1, 2 * T * V, 0, {}},
      {"fp8 head: dx = g8 w8 (e5m2 x e4m3)", 1, T * V + V * C + T * C * x, gemm, {}, kFp8FlopsPerSecond},
      {"fp8 head: dW = g8^T x8 (+= into grad)", 1, T * V + T * C + 2 * V * C * x, gemm, {}, kFp8FlopsPerSecond},
      {"bf16 head GEMM (x3 w/ --fp8-head off)", 0, (T * C + V * C + T * V) * x, gemm, {}},
  };
  return rows;
}

// The 2026-07-17 record's FP8 MLP up projection (docs/fp8.md), for comparison (0 calls: not in this step): cuBLASLt's
// e4m3 GEMM then the ReLU^2 pass that writes post, its e4m3 copy and maximum, against the wgmma GEMM with that
// work in its epilogue (--wgmma-gemms on). T a multiple of 16, C of 32.
bool fp8_mlp_fits(const Shape& s) { return s.T % 16 == 0 && s.C % 32 == 0; }

std::vector<Row> fp8_mlp_rows(const Shape& s) {
  const double x = sizeof(floatX), T = s.T, C = s.C, operands = T * C + 4 * C * C, flops = 2 * T * C * 4 * C;
  return {
      {"FP8 MLP up GEMM (cuBLASLt, e4m3)", 0, operands + 4 * T * C * x, flops, {}, kFp8FlopsPerSecond},
      {"relu_squared_fp8 (post, e4m3, max)", 0, 4 * T * C * (2 * x + 1), 5 * 4 * T * C, {}},
      {"FP8 MLP up GEMM + relu^2, e4m3 (wgmma)", 0, operands + 4 * T * C * (x + 1), flops, {}, kFp8FlopsPerSecond},
  };
}

std::vector<Row> all_rows(const Shape& s, bool wgmma_gemms) {
  std::vector<Row> rows = model_rows(s, wgmma_gemms);
  if (fp8_head_fits(s)) {
    const std::vector<Row> head = fp8_head_rows(s);
    rows.insert(rows.end(), head.begin(), head.end());
  }
  if (fp8_mlp_fits(s)) {
    const std::vector<Row> mlp = fp8_mlp_rows(s);
    rows.insert(rows.end(), mlp.begin(), mlp.end());
  }
  return rows;
}

// Text-like token ids for the embedding backward: Zipf with exponent 1.1 over the vocabulary.
std::vector<int> zipf_tokens(int T, int V) {
  std::vector<double> weights(V);
  for (int k = 0; k < V; k++) weights[k] = 1.0 / std::pow(k + 1.0, 1.1);
  std::discrete_distribution<int> distribution(weights.begin(), weights.end());
  std::mt19937 rng(1);
  std::vector<int> tokens(T);
  for (int& token : tokens) token = distribution(rng);
  return tokens;
}

// Device buffers for every kernel at shape s, and each row's work on `stream`.
struct Workspace {
  bench::Arena arena;
  std::vector<int> tokens_host;
  llmc::EmbeddingBackwardPlan plan;
  int* tokens;
  llmc::MatmulContext matmul;
  std::unique_ptr<llmc::Fp8HeadWorkspace> head;  // when the shape fits the FP8 GEMMs
  explicit Workspace(const Shape& s) : tokens_host(zipf_tokens(s.T, s.V)), plan(s.T, s.V, s.C) {
    tokens = arena.upload(tokens_host);
    if (fp8_head_fits(s))
      head = std::make_unique<llmc::Fp8HeadWorkspace>(s.T, s.C, s.V, llmc::Fp8HeadScales::speedrun(s.C));
  }
};

// The FP8 head's calls one by one over `x` (T,C), `z` (T,V, also read as dz) and `dx` (T,C), as
// fp8_head_forward/backward make them; then one bf16 head GEMM.
std::vector<std::function<void()>> fp8_head_work(Workspace& w, const Shape& s, floatX* x, floatX* z, floatX* dx,
                                                 float* losses, cudaStream_t stream) {
  llmc::Fp8HeadWorkspace& head = *w.head;
  llmc::MatmulContext& matmul = w.matmul;
  const int T = s.T, C = s.C, V = s.V;
  const int* targets = w.tokens;
  const llmc::Fp8HeadScales scales = head.scales();
  floatX* weight = w.arena.make<floatX>(static_cast<size_t>(V) * C, 0.05f);
  floatX* dweight = w.arena.make<floatX>(static_cast<size_t>(V) * C, 0.0f);  // the head's gradient, added into
  return {
      [=, &head] { llmc::fp8_cast_transpose(head.x8t(), head.x8(), x, T, C, scales.x, stream); },
      [=, &head] { llmc::fp8_cast_transpose(head.w8t(), head.w8(), weight, V, C, scales.weight, stream); },
      [=, &head, &matmul] { llmc::fp8_gemm(matmul, llmc::fp8_head_logits_gemm(head, z, T), stream); },
      [=, &head] {
        llmc::softcap_cross_entropy_backward_e5m2(head.g8(), losses, z, targets, 1.0f, scales.grad, T, V, stream);
      },
      [=, &head] { llmc::fp8_transpose(head.g8t(), head.g8(), T, V, stream); },
      [=, &head, &matmul] { llmc::fp8_gemm(matmul, llmc::fp8_head_input_grad_gemm(head, dx, T), stream); },
      [=, &head, &matmul] { llmc::fp8_gemm(matmul, llmc::fp8_head_weight_grad_gemm(head, dweight, T, true), stream); },
      [=, &matmul] { llmc::matmul_forward(matmul, z, nullptr, x, weight, nullptr, T, C, V, stream); },
  };
}

// The GEMMs with epilogues: cuBLASLt's h = xn W_fc and dact = dx W_proj (the relu^2 rows are their epilogues'
// work), and the wgmma kernel with each epilogue; cuBLASLt's qkv = xn W_qkv^T and the wgmma kernel with the
// QK-norm, RoPE and v mix; bf16 in either build (the wgmma kernel is bf16 only).
std::vector<std::function<void()>> epilogue_gemm_work(Workspace& w, const Shape& s, cudaStream_t stream) {
  using bf16 = __nv_bfloat16;
  const size_t TC = static_cast<size_t>(s.T) * s.C;
  bench::Arena& a = w.arena;
  bf16 *xn = a.make<bf16>(TC), *weight = a.make<bf16>(static_cast<size_t>(4) * s.C * s.C, 0.05f);
  bf16 *pre = a.make<bf16>(4 * TC), *post = a.make<bf16>(4 * TC), *d = a.make<bf16>(4 * TC);
  llmc::MatmulContext& matmul = w.matmul;
  llmc::WgmmaGemmArgs g;
  g.a = xn, g.w = weight, g.m = s.T, g.n = 4 * s.C, g.k = s.C;
  const auto cublas = [=, &matmul](bf16* out, int n, bool trans_b) {
#if defined(LLMC_FP32)
    (void)out, (void)n, (void)trans_b, (void)matmul;
    throw std::runtime_error("bench_speedrun_kernels: the epilogue GEMM rows need the bf16 build");
#else
    llmc::GemmArgs gemm;
    gemm.d = out, gemm.a = xn, gemm.b = weight, gemm.m = s.T, gemm.n = n, gemm.k = s.C, gemm.trans_b = trans_b;
    llmc::gemm(matmul, gemm, stream);
#endif
  };
  llmc::WgmmaGemmArgs forward = g, backward = g, qkv = g;
  forward.out = pre, forward.post = post;
  backward.out = d, backward.saved = pre;
  qkv.out = pre, qkv.n = 3 * s.C, qkv.w_k_major = true;  // W_qkv (3C, C)
  qkv.qkv.rot = d, qkv.qkv.head_dim = s.D(), qkv.qkv.rstd = a.make<float>(2 * static_cast<size_t>(s.T) * s.H, 0.5f);
  qkv.qkv.cos_table = a.make<bf16>(static_cast<size_t>(s.T) * s.D() / 2);
  qkv.qkv.sin_table = a.make<bf16>(static_cast<size_t>(s.T) * s.D() / 2);
  qkv.qkv.value_embed = a.make<bf16>(TC), qkv.qkv.scalars = a.make<float>(2, 0.5f);
  qkv.qkv.a = {llmc::MixScalar::kIdentity, 0}, qkv.qkv.b = {llmc::MixScalar::kIdentity, 1};
  return {
      [=] { cublas(pre, 4 * s.C, false); },
      [=] { llmc::wgmma_gemm_launch(llmc::WgmmaEpilogue::kReluSquared, forward, stream); },
      [=] { cublas(d, 4 * s.C, false); },
      [=] { llmc::wgmma_gemm_launch(llmc::WgmmaEpilogue::kReluSquaredBackward, backward, stream); },
      [=] { cublas(pre, 3 * s.C, true); },
      [=] { llmc::wgmma_gemm_launch(llmc::WgmmaEpilogue::kQkvRope, qkv, stream); },
  };
}

// fp8_mlp_rows' calls: the e4m3 operands a fixed spread of finite codes, the scales on the device.
std::vector<std::function<void()>> fp8_mlp_work(Workspace& w, const Shape& s, cudaStream_t stream) {
  const size_t TC = static_cast<size_t>(s.T) * s.C, CC = static_cast<size_t>(s.C) * s.C;
  bench::Arena& a = w.arena;
  const auto codes = [&a](size_t n) {
    std::vector<uint8_t> host(n);
    for (size_t i = 0; i < n; i++) host[i] = static_cast<uint8_t>((i * 37 % 0x7e) | (i % 2 ? 0x80 : 0));  // no NaN
    return reinterpret_cast<llmc::fp8e4m3*>(a.upload(host));
  };
  llmc::fp8e4m3 *x8 = codes(TC), *w8 = codes(4 * CC), *post8 = codes(4 * TC);
  floatX *pre = a.make<floatX>(4 * TC), *post = a.make<floatX>(4 * TC);
  float* scalars = a.upload(std::vector<float>{0.01f, 0.002f, 0.5f, 0.0f});  // x_s, s_up, s_act, max post
  llmc::MatmulContext& matmul = w.matmul;
  const int T = s.T, C = s.C;
  return {
      [=, &matmul] {
        llmc::Fp8GemmArgs up;
        up.d = pre, up.d_type = llmc::fp8_gemm_output_type<floatX>(), up.a = x8, up.b = w8;
        up.m = T, up.n = 4 * C, up.k = C, up.a_scale = scalars, up.b_scale = scalars + 1;
        llmc::fp8_gemm(matmul, up, stream);
      },
      [=] { llmc::relu_squared_fp8_forward(post, post8, scalars + 3, pre, scalars + 2, 4 * TC, stream); },
      [=] {
        llmc::wgmma_fp8_relu_squared_launch(post, post8, scalars + 3, x8, w8, scalars, scalars + 1, scalars + 2, T,
                                            4 * C, C, stream);
      },
  };
}

void attach_work(std::vector<Row>& rows, Workspace& w, const Shape& s, cudaStream_t stream) {
  const size_t TC = static_cast<size_t>(s.T) * s.C;
  const int T = s.T, C = s.C, H = s.H, D = s.D(), V = s.V;
  bench::Arena& a = w.arena;
  floatX *x = a.make<floatX>(TC), *y = a.make<floatX>(TC), *out = a.make<floatX>(TC), *dx = a.make<floatX>(TC);
  floatX *qkv = a.make<floatX>(3 * TC), *qkv_out = a.make<floatX>(3 * TC), *dqkv = a.make<floatX>(3 * TC);
  floatX *h = a.make<floatX>(4 * TC), *act = a.make<floatX>(4 * TC), *dh = a.make<floatX>(4 * TC);
  floatX* z = a.make<floatX>(static_cast<size_t>(T) * V, 8.0f);
  floatX *cos_table = a.make<floatX>(static_cast<size_t>(T) * D / 2),
         *sin_table = a.make<floatX>(static_cast<size_t>(T) * D / 2);
  floatX *gate_w = a.make<floatX>(static_cast<size_t>(H) * 12, 0.5f),
         *dgate_w = a.make<floatX>(static_cast<size_t>(H) * 12, 0.0f);
  float *rstd = a.make<float>(static_cast<size_t>(2) * T * H, 0.5f), *losses = a.make<float>(T),
        *freq = a.make<float>(D / 2, 0.5f);
  float *scalars = a.make<float>(64, 0.5f), *dscalars = a.make<float>(64, 0.0f);
  floatX *scalar_params = a.make<floatX>(64, 0.5f), *scalar_grads = a.make<floatX>(64, 0.0f);
  const size_t scratch_floats =
      std::max({llmc::smear_backward_scratch_floats(T), llmc::attention_gate_backward_scratch_floats(T, H),
                llmc::mix_backward_scratch_floats(T, C), llmc::residual_norm_backward_scratch_floats(T)});
  float* scratch = a.make<float>(scratch_floats);
  llmc::EmbeddingGather<floatX> gather;
  llmc::EmbeddingScatter<floatX> scatter;
  gather.count = scatter.count = 4;
  for (int k = 0; k < 4; k++) {
    gather.tables[k] = a.make<floatX>(static_cast<size_t>(V) * C);
    gather.outputs[k] = a.make<floatX>(TC);
    scatter.table_grads[k] = a.make<floatX>(static_cast<size_t>(V) * C, 0.0f);
    scatter.douts[k] = gather.outputs[k];
  }
  int* targets = w.tokens;
  const llmc::MixCoefficient l0{llmc::MixScalar::kIdentity, 14}, l1{llmc::MixScalar::kIdentity, 15};
  std::vector<std::function<void()>> work = {
      [=] { llmc::rmsnorm_forward(out, rstd, x, T, C, stream); },
      [=] { llmc::rmsnorm_backward(dx, y, x, rstd, T, C, true, stream); },
      [=] { llmc::rope_tables_build(cos_table, sin_table, freq, T, D / 2, stream); },
      [=] { llmc::qk_norm_rope_forward(qkv_out, 3 * C, qkv, 3 * C, rstd, cos_table, sin_table, T, 2 * H, D, stream); },
      [=] {
        llmc::qk_norm_rope_backward(dqkv, 3 * C, dqkv, 3 * C, qkv, 3 * C, rstd, cos_table, sin_table, T, 2 * H, D,
                                    stream);
      },
      {},  // in the attention's stores
      [=] { llmc::relu_squared_forward(act, h, 4 * TC, stream); },
      [=] { llmc::relu_squared_backward(dh, h, act, 4 * TC, stream); },
      [=] { llmc::softcap_cross_entropy_backward(z, losses, targets, 1.0f, T, V, stream); },
      [=] { llmc::smear_forward(out, x, gate_w, scalars, 60, T, C, stream); },
      [=] {
        llmc::smear_backward(dx, dgate_w, dscalars, y, x, gate_w, scalars, 60, T, C, scratch, scratch_floats, stream);
      },
      [=] { llmc::attention_gate_forward(out, y, x, C, gate_w, T, H, D, stream); },
      [=] {
        llmc::attention_gate_backward(dx, out, C, dgate_w, y, x, h, C, gate_w, T, H, D, scratch, scratch_floats,
                                      stream);
      },
      {},  // in the attention's stores
      [=] {
        const size_t logits = static_cast<size_t>(T) * H;
        llmc::attention_gate_backward_from_logit_grads(h, C, dgate_w, scratch, x, C, gate_w, T, H, scratch + logits,
                                                       scratch_floats - logits, stream);
      },
      [=] {
        llmc::mix_forward({out, C}, {x, C}, {y, C}, scalars, l0, l1, T, C, stream);
      },
      [=] {
        llmc::mix_backward({dx, C}, false, {out, C}, true, dscalars, {y, C}, {x, C}, {y, C}, scalars, l0, l1, T, C,
                           scratch, scratch_floats, stream);
      },
      {},  // in the attention's stores
      [=] {
        llmc::ResidualMixIn mix;
        mix.x_in = {x, C}, mix.y = {y, C}, mix.scalars = scalars, mix.a = l0, mix.b = l1;
        llmc::residual_norm_forward({out, dx, rstd}, mix, llmc::TokenMix{}, T, C, stream);
      },
      [=] {  // the block's: g = dx + d norm(x_mix), dx = l0 g, dx0 += l1 g
        llmc::ResidualMixIn mix;
        mix.x_in = {x, C}, mix.y = {y, C}, mix.scalars = scalars, mix.a = l0, mix.b = l1;
        llmc::residual_norm_backward({{dx, C}, false, {dh, C}, true, dscalars}, {y, out, rstd, dx}, llmc::TokenMix{},
                                     mix, T, C, scratch, scratch_floats, stream);
      },
      [=] { llmc::embedding_forward(gather, targets, T, C, stream); },
      [&w, scatter, C, stream] { llmc::embedding_backward(scatter, w.plan, C, stream); },
      [=] { llmc::scalars_to_fp32(scalars, scalar_params, 64, stream); },
      [=] { llmc::add_fp32_grads(scalar_grads, dscalars, 64, stream); },
  };
  const std::vector<std::function<void()>> epilogue_gemms = epilogue_gemm_work(w, s, stream);
  work.insert(work.end(), epilogue_gemms.begin(), epilogue_gemms.end());
  if (w.head) {
    const std::vector<std::function<void()>> head_work = fp8_head_work(w, s, x, z, dx, losses, stream);
    work.insert(work.end(), head_work.begin(), head_work.end());
  }
  if (fp8_mlp_fits(s)) {
    const std::vector<std::function<void()>> mlp_work = fp8_mlp_work(w, s, stream);
    work.insert(work.end(), mlp_work.begin(), mlp_work.end());
  }
  for (size_t i = 0; i < rows.size(); i++) rows[i].work = work[i];
}

void print_rows(const std::vector<Row>& rows, const std::vector<double>& measured_us, const char* measured_label) {
  std::printf("%-38s %7s %10s %10s %12s %11s %12s\n", "kernel", "calls", "MB/call", "GFLOP/call", "ceiling us",
              "us/step", measured_label);
  double step_us = 0.0, measured_step_us = 0.0;
  for (size_t i = 0; i < rows.size(); i++) {
    const Row& row = rows[i];
    step_us += row.calls_per_step * row.ceiling_us();
    std::printf("%-38s %7.0f %10.1f %10.3f %12.1f %11.1f", row.name.c_str(), row.calls_per_step, row.bytes / 1e6,
                row.flops / 1e9, row.ceiling_us(), row.calls_per_step * row.ceiling_us());
    if (measured_us.empty()) {
      std::printf(" %12s\n", "-");
    } else if (measured_us[i] < 0.0) {  // no work of its own: its ceiling stands in for it in the step
      measured_step_us += row.calls_per_step * row.ceiling_us();
      std::printf(" %12s\n", "-");
    } else {
      measured_step_us += row.calls_per_step * measured_us[i];
      std::printf(" %12.1f\n", measured_us[i]);
    }
  }
  std::printf("%-38s %7s %10s %10s %12s %11.1f", "total per training step", "", "", "", "", step_us);
  if (measured_us.empty())
    std::printf(" %12s\n", "-");
  else
    std::printf(" %12.1f (per step)\n", measured_step_us);
  double memory_bytes = 0.0;
  for (const Row& row : rows)
    if (!is_gemm_row(row)) memory_bytes += row.calls_per_step * row.bytes;
  std::printf("memory-bound rows (GEMMs excluded): %.2f GB per step\n", memory_bytes / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  llmc::CommandLine app{
      "Speedrun-model kernels: bytes, FLOPs and time at the H200 ceilings per call, measured on a GPU."};
  Shape shape{32768, 768, 6, 50304};
  int repeats = 20;
  bool dry_run = false, wgmma_gemms = false;
  app.positive("--tokens", shape.T, "tokens per rank T");
  app.positive("--channels", shape.C, "model width C");
  app.positive("--heads", shape.H, "attention heads (must divide C)");
  app.positive("--vocab", shape.V, "vocabulary V, padding included (multiple of 8)");
  app.positive("--repeats", repeats, "timed calls per kernel");
  app.flag("--dry-run", dry_run, "print the byte/FLOP rows and ceilings without running anything");
  app.flag("--wgmma-gemms", wgmma_gemms,
           "count the step as train_gpt2 --wgmma-gemms on runs it: ReLU^2 in the MLP GEMMs' epilogues, QK-norm, RoPE "
           "and the v mix in the qkv GEMM's");
  if (const int exit_status = app.parse(argc, argv); exit_status >= 0) return exit_status;
  if (shape.C % shape.H != 0) {
    std::fprintf(stderr, "bench_speedrun_kernels: --channels %d is not divisible by --heads %d\n", shape.C, shape.H);
    return 2;
  }
  std::printf(
      "bench_speedrun_kernels (%s%s%s): T=%d C=%d H=%d D=%d V=%d; ceilings %.1f TB/s, %.0f TFLOP/s bf16, %.0f TFLOP/s "
      "fp8%s\n",
      llmc::kPrecisionName, kEmulated ? ", emulated" : "", wgmma_gemms ? ", --wgmma-gemms" : "", shape.T, shape.C,
      shape.H, shape.D(), shape.V,
      kHbmBytesPerSecond / 1e12, kBf16FlopsPerSecond / 1e12, kFp8FlopsPerSecond / 1e12,
      fp8_head_fits(shape) ? "" : " (no FP8 head rows: T, C and V must be multiples of 16)");
  std::vector<Row> rows = all_rows(shape, wgmma_gemms);
  if (dry_run) {
    print_rows(rows, {}, "measured us");
    return 0;
  }
  try {
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    Workspace workspace(shape);
    const auto start = std::chrono::steady_clock::now();
    workspace.plan.prepare(workspace.tokens_host.data(), shape.T, stream);
    const double prepare_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    attach_work(rows, workspace, shape, stream);
    std::vector<double> measured_us;
    for (const Row& row : rows) measured_us.push_back(row.work ? 1e3 * bench::time_ms(stream, repeats, row.work) : -1.0);
    print_rows(rows, measured_us, kEmulated ? "emulated us" : "measured us");
    std::printf("embedding plan prepare (host counting sort + upload): %.3f ms, %d crossing runs\n", prepare_ms,
                workspace.plan.crossing_runs());
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaStreamDestroy(stream));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_speedrun_kernels: %s\n", error.what());
    return 1;
  }
  return 0;
}
