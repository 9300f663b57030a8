// Box-Muller over std::mt19937_64 (see normal_sampler.h).
#include "llmc/base/normal_sampler.h"

#include <cmath>

namespace llmc {

double NormalSampler::uniform_open_closed() {
  // Top 53 bits give a double in [0, 1) exactly; shifting by one ulp step makes it (0, 1] so log() is finite.
  const uint64_t bits = engine_() >> 11;
  return (static_cast<double>(bits) + 1.0) * (1.0 / 9007199254740992.0);
}

double NormalSampler::next() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double two_pi = 6.283185307179586476925286766559;
  const double radius = std::sqrt(-2.0 * std::log(uniform_open_closed()));
  const double angle = two_pi * uniform_open_closed();
  spare_ = radius * std::sin(angle);
  has_spare_ = true;
  return radius * std::cos(angle);
}

}  // namespace llmc
