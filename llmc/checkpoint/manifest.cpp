// Writing and reading checkpoint manifests (see manifest.h).
#include "llmc/checkpoint/manifest.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <limits>

#include "llmc/base/file_io.h"

namespace llmc {

namespace {
constexpr const char* kFormat = "llmc-checkpoint";
constexpr int kVersion = 1;

uint64_t parse_checksum(const std::string& path, const std::string& text) {
  if (text.size() != 16 || text.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw FileError(path, "not a checkpoint manifest: checksum '" + text + "' is not 16 hex digits");
  return std::stoull(text, nullptr, 16);
}

[[noreturn]] void bad_field(const std::string& path, const char* key, const std::string& problem) {
  throw FileError(path, std::string("not a checkpoint manifest: field \"") + key + "\" " + problem);
}

const nlohmann::json& field(const std::string& path, const nlohmann::json& object, const char* key) {
  const auto found = object.find(key);
  if (found == object.end()) throw FileError(path, std::string("not a checkpoint manifest: no field \"") + key + "\"");
  return *found;
}

std::string string_field(const std::string& path, const nlohmann::json& object, const char* key) {
  const nlohmann::json& value = field(path, object, key);
  if (!value.is_string()) bad_field(path, key, "is not a string");
  return value.get<std::string>();
}

// An integer field in [low, high]; JSON numbers with a fraction or an exponent are refused (converting
// them could overflow).
uint64_t integer_field(const std::string& path, const nlohmann::json& object, const char* key, uint64_t low,
                       uint64_t high) {
  const nlohmann::json& value = field(path, object, key);
  if (!value.is_number_unsigned()) bad_field(path, key, "is not a whole number >= 0");
  const uint64_t number = value.get<uint64_t>();
  if (number < low || number > high)
    bad_field(path, key, "is " + std::to_string(number) + ", outside " + std::to_string(low) + ".." + std::to_string(high));
  return number;
}

ManifestFile parse_file_entry(const std::string& path, const nlohmann::json& entry) {
  if (!entry.is_object()) throw FileError(path, "not a checkpoint manifest: a \"files\" entry is not an object");
  ManifestFile file;
  file.name = string_field(path, entry, "name");
  if (file.name.empty() || file.name.find('/') != std::string::npos || file.name == "." || file.name == "..")
    throw FileError(path, "not a checkpoint manifest: file name '" + file.name + "' is not a plain file name");
  file.bytes = integer_field(path, entry, "bytes", 0, std::numeric_limits<uint64_t>::max());
  file.checksum = parse_checksum(path, string_field(path, entry, "xxh3"));
  return file;
}
}  // namespace

WrittenFile write_manifest(const std::string& path, const CheckpointManifest& manifest) {
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const ManifestFile& file : manifest.files)
    files.push_back({{"name", file.name}, {"bytes", file.bytes}, {"xxh3", checksum_hex(file.checksum)}});
  const nlohmann::ordered_json document = {{"format", kFormat},
                                   {"version", kVersion},
                                   {"step", manifest.step},
                                   {"world_size", manifest.world_size},
                                   {"files", files}};
  AtomicFileWriter out(path);
  out.write(document.dump(1) + "\n");
  return out.commit();
}

CheckpointManifest read_manifest(const std::string& path) {
  const FileHandle in = open_file(path, "rb", "checkpoint manifest");
  std::string text;
  char buffer[4096];
  for (size_t got; (got = std::fread(buffer, 1, sizeof buffer, in.get())) > 0;) text.append(buffer, got);
  if (std::ferror(in.get())) throw_errno_file_error(path, "read failed");
  const nlohmann::json document = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded() || !document.is_object())
    throw FileError(path, "not a checkpoint manifest: not a JSON object");
  if (string_field(path, document, "format") != kFormat)
    throw FileError(path, "not a checkpoint manifest: format is not \"" + std::string(kFormat) + "\"");
  const uint64_t version = integer_field(path, document, "version", 0, std::numeric_limits<uint64_t>::max());
  if (version != kVersion)
    throw FileError(path, "unsupported checkpoint manifest version " + std::to_string(version));
  CheckpointManifest manifest;
  manifest.step = static_cast<int64_t>(
      integer_field(path, document, "step", 0, static_cast<uint64_t>(std::numeric_limits<int64_t>::max())));
  manifest.world_size = static_cast<int>(integer_field(path, document, "world_size", 1, 4096));
  const nlohmann::json& files = field(path, document, "files");
  if (!files.is_array()) throw FileError(path, "not a checkpoint manifest: \"files\" is not a list");
  for (const nlohmann::json& entry : files) manifest.files.push_back(parse_file_entry(path, entry));
  return manifest;
}

const ManifestFile& manifest_entry(const CheckpointManifest& manifest, const std::string& manifest_path,
                                   const std::string& name) {
  for (const ManifestFile& file : manifest.files)
    if (file.name == name) return file;
  throw FileError(manifest_path, "does not list " + name + " (the checkpoint is incomplete)");
}

}  // namespace llmc
