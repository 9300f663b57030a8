// Checkpoint names, listing, the newest complete one and pruning (see checkpoint_dir.h).
#include "llmc/checkpoint/checkpoint_dir.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#include "llmc/base/file_io.h"

namespace llmc {

namespace {
constexpr const char* kHead = "ckpt_";
constexpr size_t kStepDigits = 6;  // at least; larger steps simply have more digits

constexpr const char* kManifestSuffix = "_manifest.json";

// The step of a file name "ckpt_<digits>_<rest>", or -1.
int64_t step_of(const std::string& name) {
  const size_t head = std::strlen(kHead);
  if (name.compare(0, head, kHead) != 0) return -1;
  const size_t end = name.find('_', head);
  if (end == std::string::npos || end - head < kStepDigits || end - head > 18) return -1;
  const std::string digits = name.substr(head, end - head);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}

bool is_manifest(const std::string& name) {
  const size_t suffix = std::strlen(kManifestSuffix);
  return name.size() > suffix && name.compare(name.size() - suffix, suffix, kManifestSuffix) == 0 &&
         name.find('_', std::strlen(kHead)) == name.size() - suffix;
}

// Names of the directory's entries that belong to checkpoint files (temps included).
std::vector<std::string> checkpoint_file_names(const std::string& dir) {
  std::vector<std::string> names;
  std::unique_ptr<DIR, int (*)(DIR*)> listing(::opendir(dir.c_str()), ::closedir);
  if (!listing) return names;
  while (const dirent* entry = ::readdir(listing.get()))
    if (step_of(entry->d_name) >= 0) names.emplace_back(entry->d_name);
  return names;
}

void remove_file(const std::string& path, std::vector<std::string>& problems) {
  if (std::remove(path.c_str()) != 0 && errno != ENOENT) problems.push_back(path + ": " + std::strerror(errno));
}
}  // namespace

std::string checkpoint_model_path(const std::string& prefix) { return prefix + "_model.bin"; }
std::string checkpoint_state_path(const std::string& prefix, int rank) {
  return prefix + "_state_rank" + std::to_string(rank) + ".bin";
}
std::string checkpoint_manifest_path(const std::string& prefix) { return prefix + kManifestSuffix; }

std::string checkpoint_prefix(const std::string& dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "%s%06lld", kHead, static_cast<long long>(step));
  return dir + "/" + name;
}

std::vector<CheckpointEntry> list_checkpoints(const std::string& dir) {
  std::map<int64_t, bool> complete_by_step;
  for (const std::string& name : checkpoint_file_names(dir)) {
    const int64_t step = step_of(name);
    complete_by_step[step] |= is_manifest(name);
  }
  std::vector<CheckpointEntry> entries;
  for (const auto& [step, complete] : complete_by_step)
    entries.push_back(CheckpointEntry{step, checkpoint_prefix(dir, step), complete});
  return entries;
}

std::string latest_checkpoint_prefix(const std::string& dir) {
  const std::vector<CheckpointEntry> entries = list_checkpoints(dir);
  for (auto entry = entries.rbegin(); entry != entries.rend(); ++entry)
    if (entry->complete) return entry->prefix;
  return "";
}

std::string resume_prefix(const std::string& resume, const std::string& output_dir) {
  return resume == "latest" ? latest_checkpoint_prefix(output_dir) : resume;
}

std::vector<std::string> remove_checkpoint(const std::string& prefix) {
  std::vector<std::string> problems;
  remove_file(checkpoint_manifest_path(prefix), problems);
  const size_t slash = prefix.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : prefix.substr(0, slash);
  const std::string stem = prefix.substr(slash == std::string::npos ? 0 : slash + 1) + "_";
  for (const std::string& name : checkpoint_file_names(dir))
    if (name.compare(0, stem.size(), stem) == 0) remove_file(dir + "/" + name, problems);
  return problems;
}

std::vector<std::string> prune_checkpoints(const std::string& dir, int keep) {
  std::vector<std::string> problems;
  if (keep <= 0) return problems;
  const std::vector<CheckpointEntry> entries = list_checkpoints(dir);
  int complete_seen = 0;
  int64_t oldest_kept = -1;
  for (auto entry = entries.rbegin(); entry != entries.rend() && complete_seen < keep; ++entry) {
    if (!entry->complete) continue;
    ++complete_seen;
    oldest_kept = entry->step;
  }
  if (complete_seen < keep) return problems;  // fewer than `keep` complete ones: nothing is old enough
  for (const CheckpointEntry& entry : entries) {
    if (entry.step >= oldest_kept) break;
    for (std::string& problem : remove_checkpoint(entry.prefix)) problems.push_back(std::move(problem));
  }
  return problems;
}

}  // namespace llmc
