// The reference tape's attention ops (see reference_tape_attention.h).
#include "test/reference/reference_tape_attention.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace ref {

namespace {

void require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string(op) + ": " + what);
}

// Element d of head h in row r of a (rows, heads D) node.
size_t at(int r, int h, int d, int heads, int D) {
  return (static_cast<size_t>(r) * static_cast<size_t>(heads) + static_cast<size_t>(h)) * static_cast<size_t>(D) +
         static_cast<size_t>(d);
}

double dot(const double* a, const double* b, int n) {
  double sum = 0.0;
  for (int i = 0; i < n; i++) sum += a[i] * b[i];
  return sum;
}

// The keys [first, r] that query row r sees: its document's, at most `span` back (span - 1 rows before r).
int first_key(int r, int span, const std::vector<int>& doc_of_row) {
  int s = r;
  while (s > 0 && r - (s - 1) < span && doc_of_row[static_cast<size_t>(s - 1)] == doc_of_row[static_cast<size_t>(r)])
    s--;
  return s;
}

// Softmax probabilities P[h][r][s - first(r)] of scale q_h[r] . k_h[s] over each row's visible keys.
struct Probabilities {
  std::vector<int> first;              // per row
  std::vector<std::vector<double>> p;  // [h * rows + r]: over s = first[r] .. r
};

Probabilities softmax_rows(const std::vector<double>& q, const std::vector<double>& k, int rows, int heads, int D,
                           const std::vector<int>& doc_of_row, int span, double scale) {
  Probabilities out;
  out.first.resize(static_cast<size_t>(rows));
  out.p.resize(static_cast<size_t>(rows) * heads);
  for (int r = 0; r < rows; r++) out.first[static_cast<size_t>(r)] = first_key(r, span, doc_of_row);
  for (int h = 0; h < heads; h++)
    for (int r = 0; r < rows; r++) {
      const int first = out.first[static_cast<size_t>(r)];
      std::vector<double>& p = out.p[static_cast<size_t>(h) * rows + r];
      p.resize(static_cast<size_t>(r - first + 1));
      double largest = -INFINITY;
      for (int s = first; s <= r; s++) {
        p[static_cast<size_t>(s - first)] = scale * dot(&q[at(r, h, 0, heads, D)], &k[at(s, h, 0, heads, D)], D);
        largest = std::max(largest, p[static_cast<size_t>(s - first)]);
      }
      double sum = 0.0;
      for (double& value : p) sum += (value = std::exp(value - largest));
      for (double& value : p) value /= sum;
    }
  return out;
}

// From dP (same layout as P): dq_h[r] += scale sum_s dS k_h[s], dk_h[s] += scale dS q_h[r], dS = P (dP - P . dP).
void softmax_backward(Tape& tape, NodeId q, NodeId k, const Probabilities& P,
                      const std::vector<std::vector<double>>& dP, int rows, int heads, int D, double scale) {
  std::vector<double>& dq = tape.grad(q);
  std::vector<double>& dk = tape.grad(k);
  const std::vector<double>&qv = tape.value(q), &kv = tape.value(k);
  for (int h = 0; h < heads; h++)
    for (int r = 0; r < rows; r++) {
      const size_t row = static_cast<size_t>(h) * rows + r;
      const std::vector<double>&p = P.p[row], &dp = dP[row];
      const double mean = dot(p.data(), dp.data(), static_cast<int>(p.size()));
      const int first = P.first[static_cast<size_t>(r)];
      for (int s = first; s <= r; s++) {
        const double ds = scale * p[static_cast<size_t>(s - first)] * (dp[static_cast<size_t>(s - first)] - mean);
        for (int d = 0; d < D; d++) {
          dq[at(r, h, d, heads, D)] += ds * kv[at(s, h, d, heads, D)];
          dk[at(s, h, d, heads, D)] += ds * qv[at(r, h, d, heads, D)];
        }
      }
    }
}

void require_rows(const Tape& t, std::initializer_list<NodeId> nodes, int rows, int cols, const char* op) {
  for (NodeId id : nodes) require(t.rows(id) == rows && t.cols(id) == cols, op, "an input is not (rows, heads D)");
}

}  // namespace

NodeId window_attention(Tape& t, NodeId q, NodeId k, NodeId v, int heads, int head_dim,
                        const std::vector<int>& doc_of_row, int window, double scale) {
  const int rows = t.rows(q), D = head_dim;
  require_rows(t, {q, k, v}, rows, heads * D, "window_attention");
  require(doc_of_row.size() == static_cast<size_t>(rows), "window_attention", "doc_of_row is not one per row");
  const Probabilities P = softmax_rows(t.value(q), t.value(k), rows, heads, D, doc_of_row, window + 1, scale);
  std::vector<double> out(t.value(q).size(), 0.0);
  for (int h = 0; h < heads; h++)
    for (int r = 0; r < rows; r++) {
      const int first = P.first[static_cast<size_t>(r)];
      for (int s = first; s <= r; s++)
        for (int d = 0; d < D; d++)
          out[at(r, h, d, heads, D)] += P.p[static_cast<size_t>(h) * rows + r][static_cast<size_t>(s - first)] *
                                        t.value(v)[at(s, h, d, heads, D)];
    }
  return t.push(std::move(out), rows, heads * D, [q, k, v, heads, D, rows, P, scale](Tape& tape, NodeId self) {
    const std::vector<double>& dout = tape.grad(self);
    std::vector<std::vector<double>> dP(P.p.size());
    std::vector<double>& dv = tape.grad(v);
    for (int h = 0; h < heads; h++)
      for (int r = 0; r < rows; r++) {
        const size_t row = static_cast<size_t>(h) * rows + r;
        const int first = P.first[static_cast<size_t>(r)];
        dP[row].resize(P.p[row].size());
        for (int s = first; s <= r; s++) {
          dP[row][static_cast<size_t>(s - first)] =
              dot(&dout[at(r, h, 0, heads, D)], &tape.value(v)[at(s, h, 0, heads, D)], D);
          for (int d = 0; d < D; d++)
            dv[at(s, h, d, heads, D)] += P.p[row][static_cast<size_t>(s - first)] * dout[at(r, h, d, heads, D)];
        }
      }
    softmax_backward(tape, q, k, P, dP, rows, heads, D, scale);
  });
}

NodeId rotary_pairs(Tape& t, NodeId x, int heads, int head_dim, int pairs, const std::vector<double>& cos_table,
                    const std::vector<double>& sin_table, const std::vector<int>& position) {
  const int rows = t.rows(x), D = head_dim;
  require(t.cols(x) == heads * D && 2 * pairs <= D, "rotary_pairs", "shapes do not fit");
  require(position.size() == static_cast<size_t>(rows) * heads, "rotary_pairs", "position is not one per row and head");
  for (int p : position)
    require(p >= 0 && static_cast<size_t>(p + 1) * pairs <= cos_table.size(), "rotary_pairs",
            "position beyond the tables");
  auto turn = [=](const std::vector<double>& in, std::vector<double>& out, double sign) {
    for (int r = 0; r < rows; r++)
      for (int h = 0; h < heads; h++) {
        const size_t table = static_cast<size_t>(position[static_cast<size_t>(r) * heads + h]) * pairs;
        for (int m = 0; m < pairs; m++) {
          const double c = cos_table[table + m], s = sign * sin_table[table + m];
          const double a = in[at(r, h, 2 * m, heads, D)], b = in[at(r, h, 2 * m + 1, heads, D)];
          out[at(r, h, 2 * m, heads, D)] += a * c + b * s;
          out[at(r, h, 2 * m + 1, heads, D)] += b * c - a * s;
        }
        for (int d = 2 * pairs; d < D; d++) out[at(r, h, d, heads, D)] += in[at(r, h, d, heads, D)];
      }
  };
  std::vector<double> out(t.value(x).size(), 0.0);
  turn(t.value(x), out, 1.0);
  // The backward turns the gradient back: the transpose of a rotation is the rotation by -theta.
  return t.push(std::move(out), rows, heads * D,
                [x, turn](Tape& tape, NodeId self) { turn(tape.grad(self), tape.grad(x), -1.0); });
}

NodeId key_offset(Tape& t, NodeId k, int heads, int head_dim) {
  const int rows = t.rows(k), D = head_dim;
  require(t.cols(k) == heads * D && D % 2 == 0, "key_offset", "shapes do not fit");
  std::vector<double> out(t.value(k));
  for (int r = 1; r < rows; r++)
    for (int h = 0; h < heads; h++)
      for (int d = D / 2; d < D; d++) out[at(r, h, d, heads, D)] = t.value(k)[at(r - 1, h, d, heads, D)];
  return t.push(std::move(out), rows, heads * D, [k, rows, heads, D](Tape& tape, NodeId self) {
    const std::vector<double>& dout = tape.grad(self);
    std::vector<double>& dk = tape.grad(k);
    for (int r = 0; r < rows; r++)
      for (int h = 0; h < heads; h++)
        for (int d = 0; d < D; d++) {
          const bool moved = d >= D / 2 && r + 1 < rows;  // row r's stationary half went to row r + 1
          const bool kept = d < D / 2 || r == 0;
          if (kept) dk[at(r, h, d, heads, D)] += dout[at(r, h, d, heads, D)];
          if (moved) dk[at(r, h, d, heads, D)] += dout[at(r + 1, h, d, heads, D)];
        }
  });
}

NodeId xsa(Tape& t, NodeId y, NodeId v, NodeId alpha, int column, int heads, int head_dim) {
  const int rows = t.rows(y), D = head_dim, acols = t.cols(alpha);
  require_rows(t, {y, v}, rows, heads * D, "xsa");
  require(t.rows(alpha) == rows && column + heads <= acols, "xsa", "alpha columns outside the gate node");
  std::vector<double> out(t.value(y));
  for (int r = 0; r < rows; r++)
    for (int h = 0; h < heads; h++) {
      const double* yv = &t.value(y)[at(r, h, 0, heads, D)];
      const double* vv = &t.value(v)[at(r, h, 0, heads, D)];
      const double a = std::tanh(t.value(alpha)[static_cast<size_t>(r) * acols + column + h]);
      const double f = a * dot(yv, vv, D) / std::max(dot(vv, vv, D), 1e-8);
      for (int d = 0; d < D; d++) out[at(r, h, d, heads, D)] -= f * vv[d];
    }
  return t.push(std::move(out), rows, heads * D, [y, v, alpha, column, heads, D, rows, acols](Tape& tape, NodeId self) {
    const std::vector<double>& dout = tape.grad(self);
    std::vector<double>&dy = tape.grad(y), &dv = tape.grad(v), &dalpha = tape.grad(alpha);
    for (int r = 0; r < rows; r++)
      for (int h = 0; h < heads; h++) {
        const double* yv = &tape.value(y)[at(r, h, 0, heads, D)];
        const double* vv = &tape.value(v)[at(r, h, 0, heads, D)];
        const double* g = &dout[at(r, h, 0, heads, D)];
        const size_t alpha_at = static_cast<size_t>(r) * acols + column + h;
        const double a = std::tanh(tape.value(alpha)[alpha_at]);
        const double vv2 = dot(vv, vv, D), n = std::max(vv2, 1e-8), p = dot(yv, vv, D), gv = dot(g, vv, D);
        const bool clamped = vv2 < 1e-8;
        dalpha[alpha_at] -= gv * p / n * (1.0 - a * a);
        for (int d = 0; d < D; d++) {
          dy[at(r, h, d, heads, D)] += g[d] - a / n * gv * vv[d];
          // out = y - a p / n v: through v directly, through p = y . v and through n = |v|^2.
          const double dn = clamped ? 0.0 : 2.0 * vv[d];
          dv[at(r, h, d, heads, D)] += -a * p / n * g[d] - gv * a * (yv[d] / n - p * dn / (n * n));
        }
      }
  });
}

NodeId dc_correction(Tape& t, NodeId y, NodeId q, NodeId k, NodeId v, NodeId w1, NodeId w2, int heads, int head_dim,
                     const std::vector<int>& doc_of_row, int window, double scale) {
  const int rows = t.rows(q), D = head_dim;
  require_rows(t, {y, q, k, v}, rows, heads * D, "dc_correction");
  require_rows(t, {w1, w2}, rows, heads, "dc_correction");
  const Probabilities P = softmax_rows(t.value(q), t.value(k), rows, heads, D, doc_of_row, window, scale);
  // A[r][s - first(r)] = sum_h w1[r, h] P_h[r, s].
  std::vector<std::vector<double>> A(static_cast<size_t>(rows));
  for (int r = 0; r < rows; r++) {
    A[static_cast<size_t>(r)].assign(P.p[static_cast<size_t>(r)].size(), 0.0);
    for (int h = 0; h < heads; h++)
      for (size_t j = 0; j < A[static_cast<size_t>(r)].size(); j++)
        A[static_cast<size_t>(r)][j] +=
            t.value(w1)[static_cast<size_t>(r) * heads + h] * P.p[static_cast<size_t>(h) * rows + r][j];
  }
  std::vector<double> out(t.value(y));
  for (int r = 0; r < rows; r++) {
    const int first = P.first[static_cast<size_t>(r)];
    for (int h = 0; h < heads; h++) {
      const double w = t.value(w2)[static_cast<size_t>(r) * heads + h];
      for (int s = first; s <= r; s++)
        for (int d = 0; d < D; d++)
          out[at(r, h, d, heads, D)] +=
              w * A[static_cast<size_t>(r)][static_cast<size_t>(s - first)] * t.value(v)[at(s, h, d, heads, D)];
    }
  }
  return t.push(std::move(out), rows, heads * D,
                [y, q, k, v, w1, w2, heads, D, rows, P, A, scale](Tape& tape, NodeId self) {
                  const std::vector<double>& dout = tape.grad(self);
                  std::vector<double>& dy = tape.grad(y);
                  for (size_t i = 0; i < dy.size(); i++) dy[i] += dout[i];
                  std::vector<double>&dv = tape.grad(v), &dw1 = tape.grad(w1), &dw2 = tape.grad(w2);
                  std::vector<std::vector<double>> dP(P.p.size());
                  for (int r = 0; r < rows; r++) {
                    const int first = P.first[static_cast<size_t>(r)];
                    const size_t keys = A[static_cast<size_t>(r)].size();
                    std::vector<double> dA(keys, 0.0);
                    for (int h = 0; h < heads; h++) {
                      const double w = tape.value(w2)[static_cast<size_t>(r) * heads + h];
                      for (int s = first; s <= r; s++) {
                        const size_t j = static_cast<size_t>(s - first);
                        const double g = dot(&dout[at(r, h, 0, heads, D)], &tape.value(v)[at(s, h, 0, heads, D)], D);
                        dw2[static_cast<size_t>(r) * heads + h] += A[static_cast<size_t>(r)][j] * g;
                        dA[j] += w * g;
                        for (int d = 0; d < D; d++)
                          dv[at(s, h, d, heads, D)] += w * A[static_cast<size_t>(r)][j] * dout[at(r, h, d, heads, D)];
                      }
                    }
                    for (int h = 0; h < heads; h++) {
                      const size_t row = static_cast<size_t>(h) * rows + r;
                      dP[row].resize(keys);
                      for (size_t j = 0; j < keys; j++) {
                        dw1[static_cast<size_t>(r) * heads + h] += dA[j] * P.p[row][j];
                        dP[row][j] = tape.value(w1)[static_cast<size_t>(r) * heads + h] * dA[j];
                      }
                    }
                  }
                  softmax_backward(tape, q, k, P, dP, rows, heads, D, scale);
                });
}

}  // namespace ref
