// normuon_shape_rules (see normuon_shape.h).
#include "llmc/optim/normuon_shape.h"

#include <cmath>

namespace llmc {

NorMuonShapeRules normuon_shape_rules(int param_rows, int param_cols) {
  const double ratio = static_cast<double>(param_rows) / static_cast<double>(param_cols);
  return NorMuonShapeRules{param_rows < param_cols, std::sqrt(ratio > 1.0 ? ratio : 1.0)};
}

}  // namespace llmc
