// Double-precision window attention: every query's softmax over exactly the keys it attends, the
// straightforward O(T^2 D) way (the shapes of the tests are small).
#include "test/reference/window_attention_reference.h"

#include <algorithm>
#include <cmath>

namespace ref {

bool PackedDocuments::attends(int query, int key) const {
  if (key > query || query - key > window) return false;
  // Same document: no document boundary b with key < b <= query.
  for (size_t i = 1; i + 1 < cu_seqlens.size(); i++)
    if (key < cu_seqlens[i] && cu_seqlens[i] <= query) return false;
  return true;
}

namespace {

// Probabilities of query t of head h over all keys (0 where not attended), and the log-sum-exp.
double softmax_row(std::vector<double>& probs, const double* q, const double* k, int T, int heads, int D, int h,
                   int t, const PackedDocuments& docs, double scale) {
  const double* query = q + (static_cast<size_t>(t) * heads + h) * D;
  double max_score = -INFINITY;
  for (int key = 0; key < T; key++) {
    probs[key] = -INFINITY;
    if (!docs.attends(t, key)) continue;
    double dot = 0.0;
    const double* key_row = k + (static_cast<size_t>(key) * heads + h) * D;
    for (int d = 0; d < D; d++) dot += query[d] * key_row[d];
    probs[key] = dot * scale;
    max_score = std::max(max_score, probs[key]);
  }
  double sum = 0.0;
  for (int key = 0; key < T; key++) {
    probs[key] = std::isfinite(probs[key]) ? std::exp(probs[key] - max_score) : 0.0;
    sum += probs[key];
  }
  for (int key = 0; key < T; key++) probs[key] /= sum;
  return max_score + std::log(sum);
}

}  // namespace

void window_attention_forward(double* out, double* lse, const double* q, const double* k, const double* v, int T,
                              int heads, int D, const PackedDocuments& docs, double scale) {
  std::vector<double> probs(T);
  for (int h = 0; h < heads; h++)
    for (int t = 0; t < T; t++) {
      lse[static_cast<size_t>(h) * T + t] = softmax_row(probs, q, k, T, heads, D, h, t, docs, scale);
      double* row = out + (static_cast<size_t>(t) * heads + h) * D;
      std::fill(row, row + D, 0.0);
      for (int key = 0; key < T; key++) {
        if (probs[key] == 0.0) continue;
        const double* value = v + (static_cast<size_t>(key) * heads + h) * D;
        for (int d = 0; d < D; d++) row[d] += probs[key] * value[d];
      }
    }
}

void window_attention_backward(double* dq, double* dk, double* dv, const double* dout, const double* q,
                               const double* k, const double* v, int T, int heads, int D,
                               const PackedDocuments& docs, double scale) {
  const size_t size = static_cast<size_t>(T) * heads * D;
  std::fill(dq, dq + size, 0.0);
  std::fill(dk, dk + size, 0.0);
  std::fill(dv, dv + size, 0.0);
  std::vector<double> probs(T), dprobs(T);
  for (int h = 0; h < heads; h++)
    for (int t = 0; t < T; t++) {
      softmax_row(probs, q, k, T, heads, D, h, t, docs, scale);
      const size_t row = (static_cast<size_t>(t) * heads + h) * D;
      // dP_j = dout . v_j; dS_j = P_j (dP_j - sum_i P_i dP_i); scores = scale * q . k.
      double weighted = 0.0;
      for (int key = 0; key < T; key++) {
        dprobs[key] = 0.0;
        if (probs[key] == 0.0) continue;
        const double* value = v + (static_cast<size_t>(key) * heads + h) * D;
        for (int d = 0; d < D; d++) dprobs[key] += dout[row + d] * value[d];
        weighted += probs[key] * dprobs[key];
      }
      for (int key = 0; key < T; key++) {
        if (probs[key] == 0.0) continue;
        const size_t key_row = (static_cast<size_t>(key) * heads + h) * D;
        const double dscore = probs[key] * (dprobs[key] - weighted) * scale;
        for (int d = 0; d < D; d++) {
          dq[row + d] += dscore * k[key_row + d];
          dk[key_row + d] += dscore * q[row + d];
          dv[key_row + d] += probs[key] * dout[row + d];
        }
      }
    }
}

}  // namespace ref
