// --fp8-head: whether a model trains its head on FP8 tensor cores (ModelFamily::use_fp8_head decides what
// auto means for a family on this device). Host-only.
#pragma once

#include "llmc/base/enum_names.h"

namespace llmc {

enum class Fp8HeadChoice { kOn, kOff, kAuto };
inline constexpr EnumName<Fp8HeadChoice> kFp8HeadChoiceNames[] = {
    {Fp8HeadChoice::kOn, "on"}, {Fp8HeadChoice::kOff, "off"}, {Fp8HeadChoice::kAuto, "auto"}};

}  // namespace llmc
