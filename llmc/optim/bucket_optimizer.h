// What the training loop needs from an optimizer (ZeRO-1 AdamW: zero.h; the speedrun's NorMuon + sharded
// Adam: speedrun_optimizer.h): hooks around the model's passes, per bucket, and a begin/finish pair per
// step, so that an optimizer can start its communication as each bucket's gradients become final and the
// next forward waits only for the buckets it is about to read; and its state, which it owns: it saves it
// as named arrays and restores it from a checkpoint written by any number of ranks. One step, as train_step()
// (llmc/train/train_step.cu) enqueues it, none of it waiting on the host:
//   for each micro-step: model.forward(..., before_bucket_use());
//                        on the first one: before_first_backward() (the backward overwrites the gradients)
//                        on the last one: begin_step(step, lr), then model.backward(..., on_bucket_ready());
//                        on the others:   model.backward(...) (gradients accumulate, nothing is sent)
//   finish_step(); grad_norm(step) for the log, possibly after the next step has been enqueued.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/checkpoint/checkpoint.h"
#include "llmc/family/trainable_model.h"

namespace llmc {

class BucketOptimizer {
 public:
  virtual ~BucketOptimizer() = default;

  // Forward hook: makes the compute stream wait until the bucket's parameters of the last update are in place.
  virtual BucketHook before_bucket_use() = 0;
  // Before a step's first backward, which overwrites the gradients: makes the compute stream wait until
  // the optimizer's reads of the previous step's gradients are done.
  virtual void before_first_backward() = 0;
  // Before the last micro-step's backward of optimizer step `step` (1-based) at learning rate `lr`.
  virtual void begin_step(int step, float lr) = 0;
  // Backward hook of the last micro-step: the bucket's gradients are final.
  virtual BucketHook on_bucket_ready() = 0;
  // After the last backward has been enqueued: what the optimizer left for after the backward.
  virtual void finish_step() = 0;
  // The global norm of step `step`'s averaged gradients, the last step or the one before it (waits for it).
  virtual float grad_norm(int step) = 0;
  // Makes the compute stream wait for every pending parameter update (before reading all parameters).
  virtual void wait_for_all_params() = 0;

  // CUDA graphs of whole steps (llmc/train/step_graphs.h). What the host decides of step `step`'s calls besides
  // its rate (which kernels run, which read-back slots they fill): steps of one shape replay one graph. Inside a
  // capture the hooks wait for no event recorded outside it (the caller orders each launch after the step before).
  // Empty: this optimizer's steps cannot be captured (why_not_captured says why).
  virtual std::string step_shape(int /*step*/) const { return ""; }
  virtual std::string why_not_captured() const { return "this optimizer's steps cannot be captured"; }
  // begin_step's host part for step `step` at rate lr, replayed from a graph captured at another step of its shape
  // (the captured begin_step did the rest), before the launch.
  virtual void replay_step(int /*step*/, float /*lr*/) {
    throw std::logic_error("replay_step: this optimizer's steps cannot be captured");
  }
  // After a launch on the compute stream of a graph with a captured step: the optimizer's own streams wait for it
  // (its captured work ran on the graph's lanes, so its streams' later work would not follow it otherwise).
  virtual void after_graph_launch() {}

  // The optimizer's own copies of the parameters (fp32 masters) from the full host parameter buffer
  // (layout order, the same on every rank); its other state starts at zero.
  virtual void init_master(const std::vector<float>& host_params) = 0;
  // Which optimizer's state this is (a state file's header word; --optimizer's name for it).
  virtual StateOptimizer state_kind() const = 0;
  // This rank's state after optimizer step `step` (1-based), as the named arrays its checkpoint keeps.
  // Waits for every pending update.
  virtual std::vector<NamedStateArray> save_state(int step) = 0;
  // The state saved after step checkpoint.written().step, by this rank of a run of as many ranks or
  // re-sharded from every old rank's arrays for another world size; called after init_master. Throws
  // FileError naming the state file whose arrays do not fit this optimizer (another build's floatX, say).
  virtual void restore_state(const CheckpointReader& checkpoint) = 0;
  // Device bytes of optimizer state on this rank (for the log).
  virtual size_t state_bytes() const = 0;
  // For the watchdog, from any thread: the oldest collective of this rank that has not completed, or "".
  virtual std::string unfinished_collective() const = 0;
};

}  // namespace llmc
