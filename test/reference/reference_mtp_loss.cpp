// The record's multi-token soft-capped cross-entropy in double (see reference_mtp_loss.h).
#include "test/reference/reference_mtp_loss.h"

#include <cmath>
#include <stdexcept>

namespace ref {

double mtp_softcap_u(double z) {
  return 1.0 / (1.0 + std::exp(-(z + kMtpSoftcapShift) / kMtpSoftcapDivisor));
}

void mtp_cross_entropy(std::vector<double>* losses, std::vector<double>* dz, const std::vector<double>& u,
                       const int* targets, const int* prefix_of, const MtpWeights& weights, double grad_scale, int rows,
                       int V) {
  if (u.size() != static_cast<size_t>(rows) * V) throw std::invalid_argument("mtp_cross_entropy: u is not rows x V");
  if (losses != nullptr) losses->assign(static_cast<size_t>(rows), 0.0);
  if (dz != nullptr) dz->assign(u.size(), 0.0);
  for (int t = 0; t < rows; t++) {
    const double* ur = u.data() + static_cast<size_t>(t) * V;
    double sum = 0.0;
    for (int j = 0; j < V; j++) sum += std::exp(kMtpSoftcapScale * ur[j]);
    const double lse = std::log(sum);
    std::vector<double> onehot(static_cast<size_t>(V), 0.0);
    double loss = 0.0, softmax_weight = 0.0;
    for (int k = 0; k < weights.tokens; k++) {
      softmax_weight += weights.next[k];
      if (t + k >= rows) continue;
      const int target = targets[t + k];
      loss += weights.next[k] * (lse - kMtpSoftcapScale * ur[target]);
      onehot[static_cast<size_t>(target)] += weights.next[k];
    }
    const int prefix = prefix_of != nullptr && weights.prefix != 0.0 ? prefix_of[targets[t]] : -1;
    if (prefix >= 0) {
      loss += weights.prefix * (lse - kMtpSoftcapScale * ur[prefix]);
      onehot[static_cast<size_t>(prefix)] += weights.prefix;
      softmax_weight += weights.prefix;
    }
    if (losses != nullptr) (*losses)[static_cast<size_t>(t)] = loss;
    if (dz == nullptr) continue;
    for (int j = 0; j < V; j++) {
      const double prob = std::exp(kMtpSoftcapScale * ur[j] - lse);
      (*dz)[static_cast<size_t>(t) * V + j] = grad_scale * (softmax_weight * prob - onehot[static_cast<size_t>(j)]) *
                                              kMtpSoftcapScale * ur[j] * (1.0 - ur[j]) / kMtpSoftcapDivisor;
    }
  }
}

}  // namespace ref
