// The trainer's test hooks, kept apart from its options and its algorithm: set only through
// environment variables (not in --help, not in the README's options table), and recorded in the log
// header whenever one is active.
//   LLMC_DEBUG_NAN_AT_STEP=N   the loss of step N is replaced by NaN: tests the NaN stop.
//   LLMC_DEBUG_DUMP_DIR=DIR    rank 0 writes DIR/model.bin (the exact fp32 parameters before step 1),
//                              then step 1's batch, loss and gradients: scripts/reference_check.py
//                              checks them against JAX.
#pragma once

#include <string>
#include <vector>

namespace llmc {

class DebugHooks {
 public:
  // Reads the variables; throws std::invalid_argument naming a malformed one.
  static DebugHooks from_environment();

  bool any() const { return nan_at_step_ > 0 || !dump_dir_.empty(); }
  // "LLMC_DEBUG_NAN_AT_STEP=5 LLMC_DEBUG_DUMP_DIR=/tmp/d", for the log header.
  std::string describe() const;

  bool dumps() const { return !dump_dir_.empty(); }
  bool wants_dump(int step) const { return step == 1 && dumps(); }
  // Before the first step: creates the dump directory and returns the path of the model file the trainer
  // writes there, in fp32, with the parameters exactly as the model computes with them.
  std::string prepare_model_dump() const;
  // After step 1 (single micro-step): its batch, mean loss and gradients (layout order), and the build's
  // precision ("bf16", "fp32").
  void dump_step(const std::vector<int>& inputs, const std::vector<int>& targets, double loss,
                 const std::vector<float>& grads, int batch_size, int seq_len, const std::string& precision) const;
  // The loss the loop sees for `step`: NaN at LLMC_DEBUG_NAN_AT_STEP, `loss` otherwise.
  double loss_seen(int step, double loss) const;

 private:
  int nan_at_step_ = -1;
  std::string dump_dir_;
};

}  // namespace llmc
