// Reading a checkpoint to resume from, on the same or another number of ranks (see resume.h).
#include "llmc/checkpoint/resume.h"

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "llmc/base/checksum.h"
#include "llmc/base/file_io.h"
#include "llmc/model/gpt2/gpt2_model_file.h"
#include "llmc/checkpoint/checkpoint_dir.h"
#include "llmc/checkpoint/manifest.h"
#include "llmc/checkpoint/reshard.h"

namespace llmc {

namespace {

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

CheckpointManifest read_checkpoint_manifest(const std::string& prefix) {
  const std::string path = checkpoint_manifest_path(prefix);
  if (!is_regular_file(path))
    throw FileError(path, "missing: " + prefix + " is not a complete checkpoint (its writing did not finish, or "
                                                 "it is not a checkpoint of this version)");
  return read_manifest(path);
}

// The file's size and stored checksum must be those the manifest recorded: catches a file of another
// checkpoint put in its place, or one rewritten since.
void check_against_manifest(const std::string& prefix, const CheckpointManifest& manifest, const std::string& path,
                            uint64_t bytes, uint64_t checksum) {
  const ManifestFile& entry = manifest_entry(manifest, checkpoint_manifest_path(prefix), base_name(path));
  if (entry.bytes != bytes || entry.checksum != checksum)
    throw FileError(path, "does not match the checkpoint's manifest (it lists " + std::to_string(entry.bytes) +
                              " bytes, checksum " + checksum_hex(entry.checksum) + "; the file has " +
                              std::to_string(bytes) + " bytes, checksum " + checksum_hex(checksum) + ")");
}

int32_t first_word(const std::string& path) {
  const FileHandle in = open_file(path, "rb", "model file");
  int32_t word = 0;
  if (std::fread(&word, sizeof word, 1, in.get()) != 1) throw FileError(path, "truncated model file: no header");
  return word;
}

// XXH3-64 of the whole file, streamed; `bytes` gets its size.
uint64_t whole_file_checksum(const std::string& path, uint64_t* bytes) {
  const FileHandle in = open_file(path, "rb", "model file");
  Checksum checksum;
  std::vector<char> chunk(size_t{1} << 20);
  *bytes = 0;
  for (size_t got; (got = std::fread(chunk.data(), 1, chunk.size(), in.get())) > 0; *bytes += got)
    checksum.update(chunk.data(), got);
  if (std::ferror(in.get())) throw_errno_file_error(path, "read failed");
  return checksum.digest();
}

// GPT-2's llm.c files carry their checksum in the header (checked against the manifest here, against the
// contents when the model is read); the speedrun format has no such field, so its whole file is hashed.
void check_model_file(const std::string& prefix, const CheckpointManifest& manifest) {
  const std::string path = checkpoint_model_path(prefix);
  if (first_word(path) != kCheckpointMagic) {
    uint64_t bytes = 0;
    const uint64_t checksum = whole_file_checksum(path, &bytes);
    check_against_manifest(prefix, manifest, path, bytes, checksum);
    return;
  }
  const CheckpointInfo info = read_checkpoint_header(path);
  if (!info.has_checksum) throw FileError(path, "has no checksum, but a checkpoint's model file must");
  const int64_t bytes = int64_t{kCheckpointHeaderInts} * 4 +
                        info.num_parameters * (info.dtype == CheckpointDtype::kFp32 ? 4 : 2);
  check_against_manifest(prefix, manifest, path, static_cast<uint64_t>(bytes), info.checksum);
}

// A state file's header, checked against the manifest and against the run that reads it.
TrainStateHeader checked_state_header(const std::string& prefix, const CheckpointManifest& manifest, int old_rank,
                                      const ParamLayout& old_layout, const std::string& model,
                                      StateOptimizer optimizer, TrainLoaderKind loader) {
  const std::string path = checkpoint_state_path(prefix, old_rank);
  const TrainStateHeader header = read_train_state_header(path);
  check_against_manifest(prefix, manifest, path, static_cast<uint64_t>(header.file_bytes), header.checksum);
  if (header.rank != old_rank || header.world_size != manifest.world_size || header.step != manifest.step)
    throw FileError(path, "is the state of rank " + std::to_string(header.rank) + " of " +
                              std::to_string(header.world_size) + " at step " + std::to_string(header.step) +
                              ", the manifest expects rank " + std::to_string(old_rank) + " of " +
                              std::to_string(manifest.world_size) + " at step " + std::to_string(manifest.step));
  if (describe_state_model(header) != model)
    throw FileError(path, "optimizer state is for " + describe_state_model(header) + ", the model file is " + model);
  if (header.optimizer != optimizer)
    throw FileError(path, std::string("holds the state of --optimizer ") + state_optimizer_name(header.optimizer) +
                              ", this run uses --optimizer " + state_optimizer_name(optimizer));
  if (header.train_loader != loader)
    throw FileError(path, std::string("was written with --train-loader ") + train_loader_name(header.train_loader) +
                              ", this run uses --train-loader " + train_loader_name(loader) +
                              " (the data positions do not translate)");
  if (optimizer == StateOptimizer::kSpeedrun) return header;  // its arrays: checked by the optimizer
  if (header.shard_elements != shard_elements(old_layout))
    throw FileError(path, "holds " + std::to_string(header.shard_elements) + " elements per array, rank " +
                              std::to_string(old_rank) + " of " + std::to_string(old_layout.world_size) + " has " +
                              std::to_string(shard_elements(old_layout)));
  return header;
}

}  // namespace

ResumePoint read_resume_point(const std::string& prefix, int rank, const ParamLayout& layout,
                              const std::string& model, StateOptimizer optimizer, TrainLoaderKind loader) {
  const CheckpointManifest manifest = read_checkpoint_manifest(prefix);
  check_model_file(prefix, manifest);
  const int old_world = manifest.world_size, new_world = layout.world_size;
  const ParamLayout old_layout = relayout(layout, old_world);
  ResumePoint point;
  if (old_world == new_world) {
    const TrainStateHeader header = checked_state_header(prefix, manifest, rank, old_layout, model, optimizer, loader);
    TrainState state = read_train_state(checkpoint_state_path(prefix, rank));  // verifies the checksum
    point.written = header;
    point.master = std::move(state.master);
    point.adam_m = std::move(state.adam_m);
    point.adam_v = std::move(state.adam_v);
    point.arrays = std::move(state.arrays);
    return point;
  }
  if (optimizer == StateOptimizer::kSpeedrun) {  // every old rank's arrays: the optimizer re-shards them
    for (int old_rank = 0; old_rank < old_world; old_rank++) {
      const TrainStateHeader header = checked_state_header(prefix, manifest, old_rank, old_layout, model, optimizer,
                                                           loader);
      if (old_rank == 0) point.written = header;
      point.old_rank_arrays.push_back(read_train_state(checkpoint_state_path(prefix, old_rank)).arrays);
    }
    return point;
  }
  // Every old file is verified whole by exactly one rank; the pieces are read where they are needed.
  for (int old_rank = rank; old_rank < old_world; old_rank += new_world) {
    checked_state_header(prefix, manifest, old_rank, old_layout, model, optimizer, loader);
    verify_train_state(checkpoint_state_path(prefix, old_rank));
  }
  const size_t elements = static_cast<size_t>(shard_elements(layout));
  point.master.assign(elements, 0.0f);
  point.adam_m.assign(elements, 0.0f);
  point.adam_v.assign(elements, 0.0f);
  std::vector<TrainStateHeader> headers(static_cast<size_t>(old_world));
  std::vector<bool> header_read(static_cast<size_t>(old_world), false);
  for (const ShardCopy& copy : reshard_plan(old_layout, layout, rank)) {
    const std::string path = checkpoint_state_path(prefix, copy.source_rank);
    if (!header_read[copy.source_rank]) {
      headers[copy.source_rank] =
          checked_state_header(prefix, manifest, copy.source_rank, old_layout, model, optimizer, loader);
      header_read[copy.source_rank] = true;
    }
    const TrainStateHeader& header = headers[copy.source_rank];
    read_train_state_range(path, header, StateArray::kMaster, copy.source_offset, copy.count,
                           point.master.data() + copy.target_offset);
    read_train_state_range(path, header, StateArray::kAdamM, copy.source_offset, copy.count,
                           point.adam_m.data() + copy.target_offset);
    read_train_state_range(path, header, StateArray::kAdamV, copy.source_offset, copy.count,
                           point.adam_v.data() + copy.target_offset);
  }
  point.written = checked_state_header(prefix, manifest, 0, old_layout, model, optimizer, loader);
  return point;
}

DataLoaderPosition resumed_position(const TrainStateHeader& written, const DataLoader& loader) {
  const DataLoaderPosition& at = written.train_position;
  const int64_t tokens_per_batch = written.world_size * written.batch_size * written.seq_len;  // < 2^60 (checked)
  if (at.batch_in_shard > INT64_MAX / tokens_per_batch)
    throw std::runtime_error("checkpoint: data position batch " + std::to_string(at.batch_in_shard) +
                             " is beyond any shard");
  const int64_t tokens_into_shard = at.batch_in_shard * tokens_per_batch;
  return loader.position_at_tokens(at.epoch, at.shard_order_index, tokens_into_shard);
}

}  // namespace llmc
