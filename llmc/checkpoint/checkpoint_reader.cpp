// Opening a checkpoint to resume from, on the same or another number of ranks (see checkpoint.h).
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "llmc/base/file_io.h"
#include "llmc/checkpoint/checkpoint.h"
#include "llmc/checkpoint/checkpoint_dir.h"

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
                            const FileDigest& digest) {
  const ManifestFile& entry = manifest_entry(manifest, checkpoint_manifest_path(prefix), base_name(path));
  if (entry.bytes != digest.bytes || entry.checksum != digest.checksum)
    throw FileError(path, "does not match the checkpoint's manifest (it lists " + std::to_string(entry.bytes) +
                              " bytes, checksum " + checksum_hex(entry.checksum) + "; the file has " +
                              std::to_string(digest.bytes) + " bytes, checksum " + checksum_hex(digest.checksum) + ")");
}

// A state file's header, checked against the manifest and against the run that reads it.
TrainStateHeader checked_state_header(const std::string& prefix, const CheckpointManifest& manifest, int old_rank,
                                      const ResumeExpectations& expected) {
  const std::string path = checkpoint_state_path(prefix, old_rank);
  const TrainStateHeader header = read_train_state_header(path);
  check_against_manifest(prefix, manifest, path,
                         FileDigest{static_cast<uint64_t>(header.file_bytes), header.checksum});
  if (header.rank != old_rank || header.world_size != manifest.world_size || header.step != manifest.step)
    throw FileError(path, "is the state of rank " + std::to_string(header.rank) + " of " +
                              std::to_string(header.world_size) + " at step " + std::to_string(header.step) +
                              ", the manifest expects rank " + std::to_string(old_rank) + " of " +
                              std::to_string(manifest.world_size) + " at step " + std::to_string(manifest.step));
  if (header.model != expected.model)
    throw FileError(path, "optimizer state is for " + expected.describe_model(header.model) + ", the model file is " +
                              expected.describe_model(expected.model));
  if (header.optimizer != expected.optimizer)
    throw FileError(path, std::string("holds the state of --optimizer ") + state_optimizer_name(header.optimizer) +
                              ", this run uses --optimizer " + state_optimizer_name(expected.optimizer));
  if (header.train_loader != expected.loader)
    throw FileError(path, std::string("was written with --train-loader ") + train_loader_name(header.train_loader) +
                              ", this run uses --train-loader " + train_loader_name(expected.loader) +
                              " (the data positions do not translate)");
  return header;
}

}  // namespace

CheckpointReader::CheckpointReader(std::string prefix, int rank, int world_size, const ResumeExpectations& expected)
    : prefix_(std::move(prefix)), rank_(rank), world_size_(world_size), manifest_(read_checkpoint_manifest(prefix_)) {
  const std::string model_path = checkpoint_model_path(prefix_);
  check_against_manifest(prefix_, manifest_, model_path, expected.model_file_digest(model_path));
  for (int old_rank = 0; old_rank < manifest_.world_size; old_rank++)
    headers_.push_back(checked_state_header(prefix_, manifest_, old_rank, expected));
  if (old_world_size() == world_size_) return;  // this rank reads its own file whole, which verifies it
  // Every old file is verified whole by exactly one rank; the pieces are read where they are needed.
  for (int old_rank = rank_; old_rank < old_world_size(); old_rank += world_size_)
    verify_train_state(state_path(old_rank));
}

std::string CheckpointReader::state_path(int old_rank) const { return checkpoint_state_path(prefix_, old_rank); }

namespace {

// The optimizer's arrays: all but the model's (kModelStatePrefix).
std::vector<NamedStateArray> optimizer_arrays(std::vector<NamedStateArray> all) {
  std::vector<NamedStateArray> kept;
  for (NamedStateArray& array : all)
    if (array.name.rfind(kModelStatePrefix, 0) != 0) kept.push_back(std::move(array));
  return kept;
}

}  // namespace

std::vector<NamedStateArray> CheckpointReader::arrays(int old_rank) const {
  header(old_rank);  // a rank of the old world
  return optimizer_arrays(read_train_state(state_path(old_rank)).arrays);
}

std::vector<NamedStateArray> CheckpointReader::model_arrays(int old_rank) const {
  return read_train_state_arrays_with_prefix(state_path(old_rank), header(old_rank), kModelStatePrefix);
}

int64_t CheckpointReader::array_elements(int old_rank, const std::string& name) const {
  return train_state_array_elements(state_path(old_rank), header(old_rank), name);
}

void CheckpointReader::read_elements(int old_rank, const std::string& name, int64_t first, int64_t count,
                                     void* out) const {
  read_train_state_elements(state_path(old_rank), header(old_rank), name, first, count, out);
}

}  // namespace llmc
