// The 2026-07-17 record's per-tensor optimizer table (llmc/optim/modded89_param_table.h) against SPEEDRUN89.md
// section 5's table, row by row, and against the modded89 layout: every tensor has an entry, and the table's
// optimizer is the layout's own group (ParamGroup, written independently in modded89_layout.cpp).
#include <gtest/gtest.h>

#include <string>

#include "llmc/model/modded89/modded89_config.h"
#include "llmc/model/modded89/modded89_layout.h"
#include "llmc/optim/modded89_param_table.h"

namespace {

using llmc::Modded89Optimizer;
using llmc::Modded89Tensor;

void expect_adam(Modded89Tensor kind, double beta1, double beta2, double lr_mul, double wd_mul) {
  const llmc::Modded89ParamSettings s = llmc::modded89_param_settings(kind);
  const std::string name = llmc::modded89_tensor_name(kind);
  EXPECT_EQ(s.optimizer, Modded89Optimizer::kAdam) << name;
  EXPECT_EQ(s.beta1, beta1) << name;
  EXPECT_EQ(s.beta2, beta2) << name;
  EXPECT_EQ(s.lr_multiplier, lr_mul) << name;
  EXPECT_EQ(s.weight_decay_multiplier, wd_mul) << name;
  const llmc::AdamShardedSettings adam = s.adam();
  EXPECT_EQ(adam.eps, 1e-10) << name;
  EXPECT_EQ(adam.weight_decay, 0.005) << name;
  EXPECT_DOUBLE_EQ(llmc::adam_decay(adam, 0.008 * lr_mul), 0.008 * lr_mul * 0.008 * lr_mul * 0.005 * wd_mul) << name;
}

TEST(Modded89ParamTable, EveryRowOfThePublishedTable) {
  expect_adam(Modded89Tensor::kScalars, 0.9, 0.99, 5, 0);
  expect_adam(Modded89Tensor::kSmearGate, 0.9, 0.99, 0.01, 0);
  expect_adam(Modded89Tensor::kValueGate, 0.9, 0.99, 1, 1);
  expect_adam(Modded89Tensor::kHead, 0.5, 0.95, 1, 150);
  expect_adam(Modded89Tensor::kEmbed, 0.5, 0.95, 1, 150);
  expect_adam(Modded89Tensor::kBigram, 0.75, 0.95, 75, 5);
  expect_adam(Modded89Tensor::kValueEmbeds, 0.75, 0.95, 75, 5);
  expect_adam(Modded89Tensor::kPostLambdas, 0.9, 0.95, 1, 0);
  expect_adam(Modded89Tensor::kResidLambdas, 0.9, 0.95, 5, 0);
  expect_adam(Modded89Tensor::kMuddW1, 0.9, 0.99, 0.25, 1);
  expect_adam(Modded89Tensor::kMuddW2, 0.9, 0.99, 0.25, 1);
  expect_adam(Modded89Tensor::kMuddB2, 0.9, 0.99, 0.25, 0);
  expect_adam(Modded89Tensor::kGateW1, 0.9, 0.99, 0.1, 1);
  expect_adam(Modded89Tensor::kGateW2, 0.9, 0.99, 0.1, 1);
  expect_adam(Modded89Tensor::kGateB2, 0.9, 0.99, 0.1, 0);
  expect_adam(Modded89Tensor::kGateScale, 0.9, 0.99, 0.1, 0);
  for (Modded89Tensor bank : {Modded89Tensor::kQkBank, Modded89Tensor::kVoBank, Modded89Tensor::kMlpBank})
    EXPECT_EQ(llmc::modded89_param_settings(bank).optimizer, Modded89Optimizer::kNorMuon);
  EXPECT_THROW(llmc::modded89_param_settings(static_cast<Modded89Tensor>(99)), std::invalid_argument);
}

TEST(Modded89ParamTable, CoversTheLayoutAndAgreesWithItsGroups) {
  for (const char* preset : {"modded89", "modded89-tiny"}) {
    const llmc::Modded89Layout layout = llmc::make_modded89_layout(llmc::modded89_config_from_name(preset), 8);
    int muon = 0;
    for (const llmc::TensorView& t : layout.tensors) {
      const llmc::Modded89ParamSettings s = llmc::modded89_param_settings(static_cast<Modded89Tensor>(t.kind));
      const bool table_muon = s.optimizer == Modded89Optimizer::kNorMuon;
      EXPECT_EQ(table_muon, t.group == llmc::ParamGroup::kMuon) << preset << ": " << t.name;
      muon += table_muon;
    }
    // 10 attention layers (none in layer 6) with a Q/K and a V/O bank, 11 MLP banks.
    EXPECT_EQ(muon, 10 + 10 + 11) << preset;
  }
}

}  // namespace
