// Standard normal samples, reproducible on every platform from a seed: our own Box-Muller over
// std::mt19937_64 (both values used), not the implementation-defined std::normal_distribution. Every
// family's initialisation and the tests' random inputs draw from it; the speedrun families' uniform
// matrices draw from UniformSampler, a second stream of the same seed.
#pragma once

#include <cstdint>
#include <random>

namespace llmc {

class NormalSampler {
 public:
  explicit NormalSampler(uint64_t seed) : engine_(seed) {}
  double next();

 private:
  double uniform_open_closed();  // in (0, 1], 53 random bits
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// U(-bound, bound) from 53 random bits per draw, reproducible from a seed; its engine is seeded apart from a
// NormalSampler of the same seed (seed XOR the golden-ratio constant), so the two streams are independent.
class UniformSampler {
 public:
  explicit UniformSampler(uint64_t seed) : engine_(seed ^ 0x9e3779b97f4a7c15ull) {}
  double next(double bound) {
    const double unit = static_cast<double>(engine_() >> 11) * (1.0 / 9007199254740992.0);
    return (2.0 * unit - 1.0) * bound;
  }

 private:
  std::mt19937_64 engine_;
};

}  // namespace llmc
