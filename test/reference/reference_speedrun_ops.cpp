// Double-precision CPU reference of the speedrun operations (see reference_speedrun_ops.h). Plain loops
// in the order the math is written, for checking by eye rather than speed.
#include "test/reference/reference_speedrun_ops.h"

#include <cmath>
#include <vector>

namespace ref {

namespace {
constexpr int kGateWidth = 12;
}  // namespace

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

void rmsnorm_forward(double* out, double* rstd, const double* inp, int N, int C, double eps) {
  for (int n = 0; n < N; n++) {
    const double* x = inp + static_cast<size_t>(n) * C;
    double mean_square = 0.0;
    for (int c = 0; c < C; c++) mean_square += x[c] * x[c];
    mean_square /= C;
    const double r = 1.0 / std::sqrt(mean_square + eps);
    for (int c = 0; c < C; c++) out[static_cast<size_t>(n) * C + c] = x[c] * r;
    rstd[n] = r;
  }
}

void rmsnorm_backward(double* dinp, const double* dout, const double* inp, const double* rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    const double* x = inp + static_cast<size_t>(n) * C;
    const double* dy = dout + static_cast<size_t>(n) * C;
    const double r = rstd[n];
    // y = x r with dr/dx_j = -r^3 x_j / C, so dx_j = r dy_j - r^3 x_j mean(dy x) = r (dy_j - n_j mean(dy n)).
    double mean_dy_n = 0.0;
    for (int c = 0; c < C; c++) mean_dy_n += dy[c] * x[c] * r;
    mean_dy_n /= C;
    for (int c = 0; c < C; c++) dinp[static_cast<size_t>(n) * C + c] += r * (dy[c] - x[c] * r * mean_dy_n);
  }
}

void rope_tables(double* cos_table, double* sin_table, const double* freq, int T, int half) {
  for (int t = 0; t < T; t++) {
    for (int k = 0; k < half; k++) {
      const double theta = t * freq[k];
      cos_table[static_cast<size_t>(t) * half + k] = std::cos(theta);
      sin_table[static_cast<size_t>(t) * half + k] = std::sin(theta);
    }
  }
}

void rope_forward(double* out, const double* inp, const double* cos_table, const double* sin_table, int T, int heads,
                  int D) {
  const int half = D / 2;
  for (int t = 0; t < T; t++) {
    for (int h = 0; h < heads; h++) {
      const size_t row = (static_cast<size_t>(t) * heads + h) * D;
      for (int k = 0; k < half; k++) {
        const double c = cos_table[static_cast<size_t>(t) * half + k], s = sin_table[static_cast<size_t>(t) * half + k];
        const double x1 = inp[row + k], x2 = inp[row + half + k];
        out[row + k] = x1 * c + x2 * s;
        out[row + half + k] = -x1 * s + x2 * c;
      }
    }
  }
}

void rope_backward(double* dinp, const double* dout, const double* cos_table, const double* sin_table, int T, int heads,
                   int D) {
  const int half = D / 2;
  for (int t = 0; t < T; t++) {
    for (int h = 0; h < heads; h++) {
      const size_t row = (static_cast<size_t>(t) * heads + h) * D;
      for (int k = 0; k < half; k++) {
        const double c = cos_table[static_cast<size_t>(t) * half + k], s = sin_table[static_cast<size_t>(t) * half + k];
        const double dy1 = dout[row + k], dy2 = dout[row + half + k];
        dinp[row + k] += dy1 * c - dy2 * s;
        dinp[row + half + k] += dy1 * s + dy2 * c;
      }
    }
  }
}

void relu_squared_forward(double* out, const double* inp, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0 ? inp[i] * inp[i] : 0.0;
}

void relu_squared_backward(double* dinp, const double* inp, const double* dout, size_t n) {
  for (size_t i = 0; i < n; i++) dinp[i] += inp[i] > 0.0 ? 2.0 * inp[i] * dout[i] : 0.0;
}

namespace {

// Soft-capped logits of one row and their log-sum-exp.
double softcap_row(std::vector<double>& logits, const double* z, int V) {
  logits.resize(V);
  double max_logit = -INFINITY;
  for (int v = 0; v < V; v++) {
    logits[v] = kSoftcapScale * sigmoid(z[v] / kSoftcapDivisor);
    max_logit = std::fmax(max_logit, logits[v]);
  }
  double sum = 0.0;
  for (int v = 0; v < V; v++) sum += std::exp(logits[v] - max_logit);
  return max_logit + std::log(sum);
}

}  // namespace

void softcap_cross_entropy_forward(double* losses, const double* z, const int* targets, int N, int V) {
  std::vector<double> logits;
  for (int n = 0; n < N; n++) {
    const double lse = softcap_row(logits, z + static_cast<size_t>(n) * V, V);
    losses[n] = lse - logits[targets[n]];
  }
}

void softcap_cross_entropy_backward(double* dz, const double* z, const int* targets, const double* dlosses, int N,
                                    int V) {
  std::vector<double> logits;
  for (int n = 0; n < N; n++) {
    const double* zr = z + static_cast<size_t>(n) * V;
    const double lse = softcap_row(logits, zr, V);
    for (int v = 0; v < V; v++) {
      const double p = std::exp(logits[v] - lse);
      const double s = sigmoid(zr[v] / kSoftcapDivisor);
      const double dlogit_dz = kSoftcapScale / kSoftcapDivisor * s * (1.0 - s);
      dz[static_cast<size_t>(n) * V + v] += dlosses[n] * (p - (v == targets[n] ? 1.0 : 0.0)) * dlogit_dz;
    }
  }
}

void smear_forward(double* out, const double* e, const double* w, double lambda, int T, int C) {
  for (int c = 0; c < C; c++) out[c] = e[c];
  for (int t = 1; t < T; t++) {
    const double* et = e + static_cast<size_t>(t) * C;
    double dot = 0.0;
    for (int j = 0; j < kGateWidth; j++) dot += et[j] * w[j];
    const double mix = lambda * sigmoid(dot);
    for (int c = 0; c < C; c++) out[static_cast<size_t>(t) * C + c] = et[c] + mix * et[c - C];
  }
}

void smear_backward(double* de, double* dw, double* dlambda, const double* dout, const double* e, const double* w,
                    double lambda, int T, int C) {
  for (int c = 0; c < C; c++) de[c] += dout[c];
  for (int t = 1; t < T; t++) {
    const double* et = e + static_cast<size_t>(t) * C;
    const double* dy = dout + static_cast<size_t>(t) * C;
    double dot = 0.0;
    for (int j = 0; j < kGateWidth; j++) dot += et[j] * w[j];
    const double g = sigmoid(dot);
    double dy_dot_prev = 0.0;  // d out[t] / d (lambda g) contracted with dout[t]
    for (int c = 0; c < C; c++) {
      dy_dot_prev += dy[c] * et[c - C];
      de[static_cast<size_t>(t) * C + c] += dy[c];
      de[static_cast<size_t>(t - 1) * C + c] += lambda * g * dy[c];
    }
    *dlambda += g * dy_dot_prev;
    const double dpre = lambda * g * (1.0 - g) * dy_dot_prev;
    for (int j = 0; j < kGateWidth; j++) {
      dw[j] += dpre * et[j];
      de[static_cast<size_t>(t) * C + j] += dpre * w[j];
    }
  }
}

void attention_gate_forward(double* out, const double* y, const double* xn, const double* w, int T, int H, int D) {
  const int C = H * D;
  for (int t = 0; t < T; t++) {
    for (int h = 0; h < H; h++) {
      double dot = 0.0;
      for (int j = 0; j < kGateWidth; j++) dot += xn[static_cast<size_t>(t) * C + j] * w[h * kGateWidth + j];
      const double g = sigmoid(dot);
      for (int d = 0; d < D; d++)
        out[static_cast<size_t>(t) * C + h * D + d] = y[static_cast<size_t>(t) * C + h * D + d] * g;
    }
  }
}

void attention_gate_backward(double* dy, double* dxn, double* dw, const double* dout, const double* y, const double* xn,
                             const double* w, int T, int H, int D) {
  const int C = H * D;
  for (int t = 0; t < T; t++) {
    for (int h = 0; h < H; h++) {
      double dot = 0.0;
      for (int j = 0; j < kGateWidth; j++) dot += xn[static_cast<size_t>(t) * C + j] * w[h * kGateWidth + j];
      const double g = sigmoid(dot);
      double dout_dot_y = 0.0;
      for (int d = 0; d < D; d++) {
        const size_t i = static_cast<size_t>(t) * C + h * D + d;
        dy[i] += dout[i] * g;
        dout_dot_y += dout[i] * y[i];
      }
      const double dpre = dout_dot_y * g * (1.0 - g);
      for (int j = 0; j < kGateWidth; j++) {
        dxn[static_cast<size_t>(t) * C + j] += dpre * w[h * kGateWidth + j];
        dw[h * kGateWidth + j] += dpre * xn[static_cast<size_t>(t) * C + j];
      }
    }
  }
}

void embedding_forward(double* out, const int* tokens, const double* table, int T, int C) {
  for (int t = 0; t < T; t++)
    for (int c = 0; c < C; c++) out[static_cast<size_t>(t) * C + c] = table[static_cast<size_t>(tokens[t]) * C + c];
}

void embedding_backward(double* dtable, const double* dout, const int* tokens, int T, int C) {
  for (int t = 0; t < T; t++)
    for (int c = 0; c < C; c++) dtable[static_cast<size_t>(tokens[t]) * C + c] += dout[static_cast<size_t>(t) * C + c];
}

void mix_forward(double* out, double a, const double* x, double b, const double* y, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = a * x[i] + (y != nullptr ? b * y[i] : 0.0);
}

void mix_backward(double* dx, double* dy, double* da, double* db, const double* dout, double a, const double* x,
                  double b, const double* y, size_t n) {
  for (size_t i = 0; i < n; i++) {
    dx[i] += a * dout[i];
    if (dy != nullptr) dy[i] += b * dout[i];
    if (da != nullptr) *da += x[i] * dout[i];
    if (db != nullptr && y != nullptr) *db += y[i] * dout[i];
  }
}

}  // namespace ref
