// --fp8-head and --fp8-mlp: whether a model trains its head, and the 2026-07-17 model the forward of its MLPs, on
// FP8 tensor cores (ModelFamily::use_fp8_head and use_fp8_mlp decide what auto means for a family on this
// device). Host-only.
#pragma once

#include "llmc/base/enum_names.h"

namespace llmc {

enum class Fp8Choice { kOn, kOff, kAuto };
inline constexpr EnumName<Fp8Choice> kFp8ChoiceNames[] = {
    {Fp8Choice::kOn, "on"}, {Fp8Choice::kOff, "off"}, {Fp8Choice::kAuto, "auto"}};

}  // namespace llmc
