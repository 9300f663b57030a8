// Double-precision CPU reference of every GPT-2 operation (forward and backward), the oracle that the
// CUDA kernels and their CPU emulation are checked against. Shapes and argument order follow llm.c;
// all arrays are row-major. "Accumulates" means the function adds (+=) into its gradient outputs.
#pragma once

#include <cstddef>

namespace ref {

// out (B,T,C) = wte[tokens] + wpe[t]; wte (V*,C), wpe (maxT,C).
void encoder_forward(double* out, const int* tokens, const double* wte, const double* wpe, int B, int T, int C);
// Accumulates dout into the rows of dwte picked by the tokens and into dwpe[t].
void encoder_backward(double* dwte, double* dwpe, const double* dout, const int* tokens, int B, int T, int C);

// LayerNorm over the last dimension with eps 1e-5; mean and rstd (N) are saved for the backward.
void layernorm_forward(double* out, double* mean, double* rstd, const double* inp, const double* weight,
                       const double* bias, int N, int C);
// Accumulates into dinp (N,C), dweight (C), dbias (C).
void layernorm_backward(double* dinp, double* dweight, double* dbias, const double* dout, const double* inp,
                        const double* weight, const double* mean, const double* rstd, int N, int C);

// out (N,OC) = inp (N,C) @ weight(OC,C)^T + bias (OC); bias may be nullptr.
void matmul_forward(double* out, const double* inp, const double* weight, const double* bias, int N, int C, int OC);
// Accumulates into dinp (N,C), dweight (OC,C) and dbias (OC); dbias may be nullptr.
void matmul_backward(double* dinp, double* dweight, double* dbias, const double* dout, const double* inp,
                     const double* weight, int N, int C, int OC);

// Causal multi-head self-attention. qkv (B,T,3C) holds [q | k | v], each split into NH heads of size
// hs = C/NH; scores are scaled by 1/sqrt(hs). out (B,T,C); preatt and att (B,NH,T,T) are saved (entries
// above the diagonal are written as 0).
void attention_forward(double* out, double* preatt, double* att, const double* qkv, int B, int T, int C, int NH);
// Accumulates into dqkv (B,T,3C). dpreatt and datt (B,NH,T,T) are scratch: overwritten, not accumulated.
void attention_backward(double* dqkv, double* dpreatt, double* datt, const double* dout, const double* qkv,
                        const double* att, int B, int T, int C, int NH);

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_forward(double* out, const double* inp, size_t N);
// Accumulates dinp += gelu'(inp) * dout.
void gelu_backward(double* dinp, const double* inp, const double* dout, size_t N);

// out = a + b elementwise (out may alias a or b).
void residual_forward(double* out, const double* a, const double* b, size_t N);

// logits (N,Vp), only the first V columns are real. probs (N,Vp) = softmax over the first V columns,
// padded columns set to 0; losses (N) = -log probs[target].
void softmax_crossentropy_forward(double* losses, double* probs, const double* logits, const int* targets,
                                  int N, int V, int Vp);
// Accumulates dlogits (N,Vp) += (probs - onehot(target)) * dlosses[n] on the first V columns; padded
// columns receive 0.
void crossentropy_softmax_backward(double* dlogits, const double* probs, const int* targets, const double* dlosses,
                                   int N, int V, int Vp);

// AdamW with bias correction and decoupled weight decay, step is 1-based:
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; param -= lr * (mhat / (sqrt(vhat) + eps) + wd * param).
void adamw_update(double* param, const double* grad, double* m, double* v, size_t n, int step, double lr,
                  double beta1, double beta2, double eps, double weight_decay);

}  // namespace ref
