// --batch-schedule modded89: the 2026-07-17 record's stage batches (SPEEDRUN89.md section 6). Each step's
// sequences are its stage's share of --seq-len, which is the last stage's (131,072 / 262,144 / 393,216 global
// tokens: a third, two thirds and all of it), with the stage's document cut; the trainer sets both on the model and
// the loader before the step. Host-only; pure functions of the step, so a resumed run sets what one that ran
// through does.
#pragma once

#include <string>
#include <vector>

#include "llmc/base/enum_names.h"
#include "llmc/schedule/modded89_schedule.h"

namespace llmc {

// --batch-schedule: every step on --seq-len tokens (fixed) or the 2026-07-17 record's stages, stretched to --steps.
enum class BatchScheduleKind { kFixed, kModded89 };
inline constexpr EnumName<BatchScheduleKind> kBatchScheduleNames[] = {{BatchScheduleKind::kFixed, "fixed"},
                                                                      {BatchScheduleKind::kModded89, "modded89"}};

// One step's sequences: tokens per sequence and the longest document the loader packs.
struct StepShape {
  int seq_len = 0;
  int document_cut = 0;
  bool operator==(const StepShape& other) const {
    return seq_len == other.seq_len && document_cut == other.document_cut;
  }
};

class BatchSchedule {
 public:
  // seq_len: --seq-len, the last stage's tokens per sequence. Throws std::invalid_argument naming --seq-len when a
  // stage's share of it is not a whole number of tokens.
  BatchSchedule(Modded89Schedule schedule, int seq_len);

  // Step `step`'s shape (0-based, before the step).
  StepShape shape(int step) const;
  // Step's share of --seq-len's tokens (1 in the last stages), for the throughput figures.
  double tokens_fraction(int step) const { return static_cast<double>(shape(step).seq_len) / seq_len_; }
  // A log line ("# batch: ...") when step's shape differs from that of the step given last (and for the first
  // step given); none otherwise.
  std::vector<std::string> changes(int step);
  // "T 16/32/48/48 tokens per sequence, documents cut to 896/2048/2048/2048 by stage"
  std::string describe() const;

 private:
  Modded89Schedule schedule_;
  int seq_len_;
  int last_step_ = -1;
};

}  // namespace llmc
