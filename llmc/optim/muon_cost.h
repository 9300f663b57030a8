// What one NorMuon matrix update costs (Polar Express GEMMs + NorMuon's elementwise kernels): FLOPs, DRAM
// bytes (each operand read once: a lower bound) and the time at the device's ceilings. Pure C++: the owner
// planner balances with it and the benchmark table prints it; no GPU timing is invented here.
#pragma once

#include <cstddef>

namespace llmc {

struct DeviceCeilings {
  double flops_per_second = 790e12;  // H200 bf16 dense tensor cores
  double bytes_per_second = 4.3e12;  // H200 HBM3e
};

struct MuonCost {
  double flops = 0.0;
  double bytes = 0.0;
  double seconds = 0.0;  // sum over kernels of max(flops / peak, bytes / bandwidth)
  int launches = 0;      // per batched call (launches do not grow with the batch)
  MuonCost& operator+=(const MuonCost& other);
};
MuonCost operator*(double count, const MuonCost& cost);  // `count` matrices batched: launches unchanged

// Polar Express on one rows x cols matrix in elements of element_bytes (2: bf16): the Frobenius
// normalisation and `steps` steps of three GEMMs (A = X X^T: 2 s^2 l, A A^T: 2 s^3, B X: 2 s^2 l with
// s = min(rows, cols), l = max).
MuonCost polar_express_cost(int rows, int cols, int steps = 5, size_t element_bytes = 2,
                            const DeviceCeilings& ceilings = DeviceCeilings());

// NorMuon's kernels around it on one matrix: momentum (read g, read/write the buffer, write u), the
// variance statistics (read X), the apply (read X, read/write p); param_bytes 4 (fp32) or 2 (bf16 gates).
MuonCost normuon_elementwise_cost(int rows, int cols, size_t param_bytes, size_t element_bytes = 2,
                                  const DeviceCeilings& ceilings = DeviceCeilings());

// Both of the above.
MuonCost normuon_matrix_cost(int rows, int cols, size_t param_bytes, size_t element_bytes = 2,
                             const DeviceCeilings& ceilings = DeviceCeilings());

}  // namespace llmc
