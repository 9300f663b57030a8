// NorMuon's rules that follow from a parameter's stored shape: which way the variance buffer runs and
// the lr scale. Pure C++, shared by the device runner (normuon.h) and the optimizer's state plan.
#pragma once

namespace llmc {

// What the reference derives from a parameter's stored shape (for the attention tensor [C, 4C] read as
// four [C, C] matrices, the stored shape, not the matrix's): the variance is per column when the
// parameter has fewer rows than columns, else per row; the lr is scaled by max(1, rows/cols)^0.5.
struct NorMuonShapeRules {
  bool variance_per_column;
  double lr_scale;
};
NorMuonShapeRules normuon_shape_rules(int param_rows, int param_cols);

}  // namespace llmc
