// The optimizer tests' gradients over emulated ranks: rank r delivers (r + 1) G in floatX, and the mean over the
// ranks is an fp32 sum divided by the world size, rounded once to floatX (what the averaging collectives
// compute; exact for these values whatever the order of the sum), so that a one-rank composition can be fed
// the same averaged bits.
#pragma once

#include <vector>

#include "llmc/cuda/precision.h"

namespace llmc::test {

inline float round_x(float value) { return to_float(from_float<floatX>(value)); }

// What rank `rank` delivers: (r + 1) G, in floatX.
inline std::vector<float> rank_grads(const std::vector<float>& grads, int rank) {
  std::vector<float> out(grads.size());
  for (size_t i = 0; i < grads.size(); i++) out[i] = round_x(grads[i] * static_cast<float>(rank + 1));
  return out;
}

// The mean over `world` ranks of per_rank(r), element by element.
template <class PerRank>
std::vector<float> mean_over_ranks(size_t n, int world, PerRank per_rank) {
  std::vector<float> sum(n, 0.0f);
  for (int r = 0; r < world; r++) {
    const std::vector<float> values = per_rank(r);
    for (size_t i = 0; i < n; i++) sum[i] += values[i];
  }
  for (float& value : sum) value = round_x(value / static_cast<float>(world));
  return sum;
}

}  // namespace llmc::test
