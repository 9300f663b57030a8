// The stage batches of the trainer (see batch_schedule.h).
#include "llmc/train/batch_schedule.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <utility>

namespace llmc {

namespace {
// The last stage's global batch: --seq-len's share is each stage's batch over it.
int largest_batch(const Modded89Schedule& schedule) {
  int largest = 0;
  for (const Modded89Stage& stage : schedule.stages) largest = std::max(largest, stage.batch_tokens);
  return largest;
}
}  // namespace

BatchSchedule::BatchSchedule(Modded89Schedule schedule, int seq_len)
    : schedule_(std::move(schedule)), seq_len_(seq_len) {
  schedule_.validate();
  const int64_t largest = largest_batch(schedule_);
  for (const Modded89Stage& stage : schedule_.stages)
    if (int64_t{seq_len} * stage.batch_tokens % largest != 0)
      throw std::invalid_argument("--batch-schedule modded89: --seq-len " + std::to_string(seq_len) +
                                  " is the last stage's sequence; the stages of " + std::to_string(stage.batch_tokens) +
                                  " of its " + std::to_string(largest) +
                                  " global tokens need it to be a multiple of 3 (the record: 49152)");
}

StepShape BatchSchedule::shape(int step) const {
  const Modded89Stage& stage = schedule_.stage(step);
  const int64_t tokens = int64_t{seq_len_} * stage.batch_tokens / largest_batch(schedule_);
  return StepShape{static_cast<int>(tokens), stage.document_cut};
}

std::vector<std::string> BatchSchedule::changes(int step) {
  const bool changed = last_step_ < 0 || !(shape(last_step_) == shape(step));
  last_step_ = step;
  if (!changed) return {};
  const StepShape s = shape(step);
  return {"# batch: step " + std::to_string(step + 1) + " (schedule step " + std::to_string(step) +
          ") T=" + std::to_string(s.seq_len) + " tokens per sequence, documents cut to " +
          std::to_string(s.document_cut) + " tokens"};
}

std::string BatchSchedule::describe() const {
  std::string lengths, cuts;
  for (int start : schedule_.stage_starts()) {
    const StepShape s = shape(start);
    lengths += (lengths.empty() ? "" : "/") + std::to_string(s.seq_len);
    cuts += (cuts.empty() ? "" : "/") + std::to_string(s.document_cut);
  }
  return "T " + lengths + " tokens per sequence, documents cut to " + cuts + " by stage";
}

}  // namespace llmc
