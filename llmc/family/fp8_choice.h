// --fp8-head: whether a model trains its head on FP8 tensor cores (ModelFamily::use_fp8_head decides what
// auto means for a family on this device); --fp8-mlp: whether the 2026-07-17 model's MLPs do. Host-only.
#pragma once

#include "llmc/base/enum_names.h"

namespace llmc {

enum class Fp8HeadChoice { kOn, kOff, kAuto };
inline constexpr EnumName<Fp8HeadChoice> kFp8HeadChoiceNames[] = {
    {Fp8HeadChoice::kOn, "on"}, {Fp8HeadChoice::kOff, "off"}, {Fp8HeadChoice::kAuto, "auto"}};

// ModelFamily::use_fp8_mlp decides what auto means (docs/fp8.md#the-fp8-mlp).
enum class Fp8MlpChoice { kOn, kOff, kAuto };
inline constexpr EnumName<Fp8MlpChoice> kFp8MlpChoiceNames[] = {
    {Fp8MlpChoice::kOn, "on"}, {Fp8MlpChoice::kOff, "off"}, {Fp8MlpChoice::kAuto, "auto"}};

}  // namespace llmc
