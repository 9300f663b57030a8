// The NorMuon cost model of muon_cost.h: kernel by kernel FLOPs and bytes, timed at the ceilings.
#include "llmc/optim/muon_cost.h"

#include <algorithm>

namespace llmc {

MuonCost& MuonCost::operator+=(const MuonCost& other) {
  flops += other.flops;
  bytes += other.bytes;
  seconds += other.seconds;
  launches += other.launches;
  return *this;
}

MuonCost operator*(double count, const MuonCost& cost) {
  MuonCost scaled = cost;
  scaled.flops *= count;
  scaled.bytes *= count;
  scaled.seconds *= count;
  return scaled;
}

namespace {
MuonCost kernel(double flops, double bytes, const DeviceCeilings& ceilings) {
  MuonCost cost;
  cost.flops = flops;
  cost.bytes = bytes;
  cost.seconds = std::max(flops / ceilings.flops_per_second, bytes / ceilings.bytes_per_second);
  cost.launches = 1;
  return cost;
}
}  // namespace

MuonCost polar_express_cost(int rows, int cols, int steps, size_t element_bytes, const DeviceCeilings& ceilings) {
  const double s = std::min(rows, cols), l = std::max(rows, cols), e = static_cast<double>(element_bytes);
  MuonCost total = kernel(0.0, s * l * e, ceilings);  // sum of squares: read G
  total += kernel(0.0, 2.0 * s * l * e, ceilings);    // scale: read G, write X
  for (int i = 0; i < steps; i++) {
    total += kernel(2.0 * s * s * l, (s * l + s * s) * e, ceilings);        // A = X X^T: read X, write A
    total += kernel(2.0 * s * s * s, (s * s + s * s) * e, ceilings);        // B = c A A^T + b A: read A, write B
    total += kernel(2.0 * s * s * l, (s * s + 2.0 * s * l) * e, ceilings);  // X' = a X + B X: read B, X; write X'
  }
  return total;
}

MuonCost normuon_elementwise_cost(int rows, int cols, size_t param_bytes, size_t element_bytes,
                                  const DeviceCeilings& ceilings) {
  const double n = static_cast<double>(rows) * cols, p = static_cast<double>(param_bytes),
               e = static_cast<double>(element_bytes);
  MuonCost total = kernel(3.0 * n, n * (3.0 * p + e), ceilings);  // momentum: read g, buffer; write buffer, u
  total += kernel(2.0 * n, n * e, ceilings);                      // variance statistics: read X
  total += kernel(0.0, 0.0, ceilings);                            // variance buffer update (tiny)
  total += kernel(6.0 * n, n * (e + 2.0 * p), ceilings);          // apply: read X, p; write p
  return total;
}

MuonCost normuon_matrix_cost(int rows, int cols, size_t param_bytes, size_t element_bytes,
                             const DeviceCeilings& ceilings) {
  MuonCost total = polar_express_cost(rows, cols, 5, element_bytes, ceilings);
  total += normuon_elementwise_cost(rows, cols, param_bytes, element_bytes, ceilings);
  return total;
}

}  // namespace llmc
