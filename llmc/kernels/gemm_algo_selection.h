// How a GEMM plan chooses its algorithm (--gemm-algo): the heuristic's first answer, or the fastest
// candidate timed at the first call (GPU only; the choice can differ between runs, and with it the last
// bits of the results, so only the heuristic keeps runs bitwise reproducible). Host-only.
#pragma once
#include <stdexcept>
#include <string>

#include "llmc/base/enum_names.h"

namespace llmc {

enum class GemmAlgoSelection { kHeuristic, kFastest };
inline constexpr EnumName<GemmAlgoSelection> kGemmAlgoSelectionNames[] = {
    {GemmAlgoSelection::kHeuristic, "heuristic"}, {GemmAlgoSelection::kFastest, "fastest"}};

inline GemmAlgoSelection parse_gemm_algo_selection(const std::string& name) {
  if (const auto selection = value_named(name, kGemmAlgoSelectionNames)) return *selection;
  throw std::invalid_argument("unknown GEMM algorithm selection '" + name + "' (expected " +
                              names_listed(kGemmAlgoSelectionNames) + ")");
}

}  // namespace llmc
