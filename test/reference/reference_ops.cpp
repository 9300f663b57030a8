// Double-precision CPU reference of the GPT-2 operations (see reference_ops.h). Written for clarity,
// not speed: plain loops in the order the math is usually written, so a reader can check it by eye.
#include "test/reference/reference_ops.h"

#include <cmath>

namespace ref {

void encoder_forward(double* out, const int* tokens, const double* wte, const double* wpe, int B, int T, int C) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      double* out_bt = out + (static_cast<size_t>(b) * T + t) * C;
      const double* wte_row = wte + static_cast<size_t>(tokens[b * T + t]) * C;
      const double* wpe_row = wpe + static_cast<size_t>(t) * C;
      for (int c = 0; c < C; c++) out_bt[c] = wte_row[c] + wpe_row[c];
    }
  }
}

void encoder_backward(double* dwte, double* dwpe, const double* dout, const int* tokens, int B, int T, int C) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      const double* dout_bt = dout + (static_cast<size_t>(b) * T + t) * C;
      double* dwte_row = dwte + static_cast<size_t>(tokens[b * T + t]) * C;
      double* dwpe_row = dwpe + static_cast<size_t>(t) * C;
      for (int c = 0; c < C; c++) {
        dwte_row[c] += dout_bt[c];
        dwpe_row[c] += dout_bt[c];
      }
    }
  }
}

void layernorm_forward(double* out, double* mean, double* rstd, const double* inp, const double* weight,
             const double* bias, int N, int C) {
  const double eps = 1e-5;
  for (int n = 0; n < N; n++) {
    const double* x = inp + static_cast<size_t>(n) * C;
    double m = 0.0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    double var = 0.0;
    for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
    var /= C;  // biased variance, as in PyTorch's LayerNorm
    const double s = 1.0 / std::sqrt(var + eps);
    double* y = out + static_cast<size_t>(n) * C;
    for (int c = 0; c < C; c++) y[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

void layernorm_backward(double* dinp, double* dweight, double* dbias, const double* dout, const double* inp,
            const double* weight, const double* mean, const double* rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    const double* x = inp + static_cast<size_t>(n) * C;
    const double* dy = dout + static_cast<size_t>(n) * C;
    double* dx = dinp + static_cast<size_t>(n) * C;
    // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), with dxhat = dy * weight.
    double mean_dxhat = 0.0, mean_dxhat_xhat = 0.0;
    for (int c = 0; c < C; c++) {
      const double xhat = (x[c] - mean[n]) * rstd[n];
      const double dxhat = dy[c] * weight[c];
      mean_dxhat += dxhat;
      mean_dxhat_xhat += dxhat * xhat;
    }
    mean_dxhat /= C;
    mean_dxhat_xhat /= C;
    for (int c = 0; c < C; c++) {
      const double xhat = (x[c] - mean[n]) * rstd[n];
      const double dxhat = dy[c] * weight[c];
      dbias[c] += dy[c];
      dweight[c] += xhat * dy[c];
      dx[c] += rstd[n] * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
    }
  }
}

void matmul_forward(double* out, const double* inp, const double* weight, const double* bias, int N, int C, int OC) {
  for (int n = 0; n < N; n++) {
    const double* x = inp + static_cast<size_t>(n) * C;
    for (int o = 0; o < OC; o++) {
      const double* w = weight + static_cast<size_t>(o) * C;
      double acc = bias != nullptr ? bias[o] : 0.0;
      for (int c = 0; c < C; c++) acc += x[c] * w[c];
      out[static_cast<size_t>(n) * OC + o] = acc;
    }
  }
}

void matmul_backward(double* dinp, double* dweight, double* dbias, const double* dout, const double* inp,
           const double* weight, int N, int C, int OC) {
  for (int n = 0; n < N; n++) {
    const double* x = inp + static_cast<size_t>(n) * C;
    const double* dy = dout + static_cast<size_t>(n) * OC;
    double* dx = dinp + static_cast<size_t>(n) * C;
    for (int o = 0; o < OC; o++) {
      const double* w = weight + static_cast<size_t>(o) * C;
      double* dw = dweight + static_cast<size_t>(o) * C;
      const double g = dy[o];
      for (int c = 0; c < C; c++) {
        dx[c] += g * w[c];
        dw[c] += g * x[c];
      }
      if (dbias != nullptr) dbias[o] += g;
    }
  }
}

void attention_forward(double* out, double* preatt, double* att, const double* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  const size_t C3 = static_cast<size_t>(3) * C;
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        const double* q = qkv + (static_cast<size_t>(b) * T + t) * C3 + static_cast<size_t>(h) * hs;
        double* pre_row = preatt + ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        double* att_row = att + ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        double maxval = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          const double* k = qkv + (static_cast<size_t>(b) * T + t2) * C3 + C + static_cast<size_t>(h) * hs;
          double dot = 0.0;
          for (int i = 0; i < hs; i++) dot += q[i] * k[i];
          pre_row[t2] = dot * scale;
          if (pre_row[t2] > maxval) maxval = pre_row[t2];
        }
        double sum = 0.0;
        for (int t2 = 0; t2 <= t; t2++) {
          att_row[t2] = std::exp(pre_row[t2] - maxval);
          sum += att_row[t2];
        }
        for (int t2 = 0; t2 <= t; t2++) att_row[t2] /= sum;
        for (int t2 = t + 1; t2 < T; t2++) {  // masked (future) positions
          pre_row[t2] = 0.0;
          att_row[t2] = 0.0;
        }
        double* o = out + (static_cast<size_t>(b) * T + t) * C + static_cast<size_t>(h) * hs;
        for (int i = 0; i < hs; i++) o[i] = 0.0;
        for (int t2 = 0; t2 <= t; t2++) {
          const double* v =
              qkv + (static_cast<size_t>(b) * T + t2) * C3 + 2 * static_cast<size_t>(C) + static_cast<size_t>(h) * hs;
          for (int i = 0; i < hs; i++) o[i] += att_row[t2] * v[i];
        }
      }
    }
  }
}

void attention_backward(double* dqkv, double* dpreatt, double* datt, const double* dout, const double* qkv,
            const double* att, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  const size_t C3 = static_cast<size_t>(3) * C;
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        const double* att_row = att + ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        double* datt_row = datt + ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        double* dpre_row = dpreatt + ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        const double* dout_bth = dout + (static_cast<size_t>(b) * T + t) * C + static_cast<size_t>(h) * hs;
        for (int t2 = 0; t2 < T; t2++) {
          datt_row[t2] = 0.0;
          dpre_row[t2] = 0.0;
        }
        // out = sum_t2 att[t2] v[t2]
        for (int t2 = 0; t2 <= t; t2++) {
          const double* v =
              qkv + (static_cast<size_t>(b) * T + t2) * C3 + 2 * static_cast<size_t>(C) + static_cast<size_t>(h) * hs;
          double* dv =
              dqkv + (static_cast<size_t>(b) * T + t2) * C3 + 2 * static_cast<size_t>(C) + static_cast<size_t>(h) * hs;
          double dot = 0.0;
          for (int i = 0; i < hs; i++) {
            dot += dout_bth[i] * v[i];
            dv[i] += att_row[t2] * dout_bth[i];
          }
          datt_row[t2] = dot;
        }
        // softmax backward: dpre = att * (datt - sum(att * datt))
        double weighted = 0.0;
        for (int t2 = 0; t2 <= t; t2++) weighted += att_row[t2] * datt_row[t2];
        for (int t2 = 0; t2 <= t; t2++) dpre_row[t2] = att_row[t2] * (datt_row[t2] - weighted);
        // pre = scale * q . k
        const double* q = qkv + (static_cast<size_t>(b) * T + t) * C3 + static_cast<size_t>(h) * hs;
        double* dq = dqkv + (static_cast<size_t>(b) * T + t) * C3 + static_cast<size_t>(h) * hs;
        for (int t2 = 0; t2 <= t; t2++) {
          const double* k = qkv + (static_cast<size_t>(b) * T + t2) * C3 + C + static_cast<size_t>(h) * hs;
          double* dk = dqkv + (static_cast<size_t>(b) * T + t2) * C3 + C + static_cast<size_t>(h) * hs;
          const double g = dpre_row[t2] * scale;
          for (int i = 0; i < hs; i++) {
            dq[i] += g * k[i];
            dk[i] += g * q[i];
          }
        }
      }
    }
  }
}

namespace {
const double kGeluScale = 0.7978845608028654;  // sqrt(2/pi)
const double kGeluCubic = 0.044715;
}  // namespace

void gelu_forward(double* out, const double* inp, size_t N) {
  for (size_t i = 0; i < N; i++) {
    const double x = inp[i];
    out[i] = 0.5 * x * (1.0 + std::tanh(kGeluScale * (x + kGeluCubic * x * x * x)));
  }
}

void gelu_backward(double* dinp, const double* inp, const double* dout, size_t N) {
  for (size_t i = 0; i < N; i++) {
    const double x = inp[i];
    const double th = std::tanh(kGeluScale * (x + kGeluCubic * x * x * x));
    const double du_dx = kGeluScale * (1.0 + 3.0 * kGeluCubic * x * x);
    const double grad = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du_dx;
    dinp[i] += grad * dout[i];
  }
}

void residual_forward(double* out, const double* a, const double* b, size_t N) {
  for (size_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}

void softmax_crossentropy_forward(double* losses, double* probs, const double* logits, const int* targets,
                  int N, int V, int Vp) {
  for (int n = 0; n < N; n++) {
    const double* z = logits + static_cast<size_t>(n) * Vp;
    double* p = probs + static_cast<size_t>(n) * Vp;
    double maxval = -INFINITY;
    for (int v = 0; v < V; v++)
      if (z[v] > maxval) maxval = z[v];
    double sum = 0.0;
    for (int v = 0; v < V; v++) {
      p[v] = std::exp(z[v] - maxval);
      sum += p[v];
    }
    for (int v = 0; v < V; v++) p[v] /= sum;
    for (int v = V; v < Vp; v++) p[v] = 0.0;
    // -log p[target] computed from the logits directly, so a tiny probability keeps its precision.
    losses[n] = -(z[targets[n]] - maxval - std::log(sum));
  }
}

void crossentropy_softmax_backward(double* dlogits, const double* probs, const int* targets, const double* dlosses,
                   int N, int V, int Vp) {
  for (int n = 0; n < N; n++) {
    const double* p = probs + static_cast<size_t>(n) * Vp;
    double* dz = dlogits + static_cast<size_t>(n) * Vp;
    for (int v = 0; v < V; v++) {
      const double indicator = v == targets[n] ? 1.0 : 0.0;
      dz[v] += (p[v] - indicator) * dlosses[n];
    }
  }
}

void adamw_update(double* param, const double* grad, double* m, double* v, size_t n, int step, double lr,
          double beta1, double beta2, double eps, double weight_decay) {
  const double bias_correction1 = 1.0 - std::pow(beta1, step);
  const double bias_correction2 = 1.0 - std::pow(beta2, step);
  for (size_t i = 0; i < n; i++) {
    m[i] = beta1 * m[i] + (1.0 - beta1) * grad[i];
    v[i] = beta2 * v[i] + (1.0 - beta2) * grad[i] * grad[i];
    const double mhat = m[i] / bias_correction1;
    const double vhat = v[i] / bias_correction2;
    param[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * param[i]);
  }
}

}  // namespace ref
