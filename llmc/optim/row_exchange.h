// How the speedrun optimizer reduces a row-sparse gradient (the 2026-07-17 model's bigram table) on several
// ranks: sparse (each rank sends the rows it touched to their owners, sparse_row_exchange.h) or dense (its
// bucket's reduce-scatter, as every other bucket). The trainer's --bigram-exchange.
#pragma once

#include "llmc/base/enum_names.h"

namespace llmc {

enum class RowExchange { kSparse, kDense };

inline constexpr EnumName<RowExchange> kRowExchangeNames[] = {{RowExchange::kSparse, "sparse"},
                                                              {RowExchange::kDense, "dense"}};

}  // namespace llmc
