// Standard normal samples, reproducible on every platform from a seed: our own Box-Muller over
// std::mt19937_64 (both values used), not the implementation-defined std::normal_distribution. Every
// family's initialisation and the tests' random inputs draw from it.
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

}  // namespace llmc
