// Reading tokenize_gpt2's inputs as jobs and encoding one job (see document_reader.h).
#include "llmc/tokenizer/document_reader.h"

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string_view>
#include <utility>

#include "llmc/base/file_io.h"
#include "llmc/tokenizer/parallel_encode.h"

namespace llmc {

DocumentReader::DocumentReader(const std::vector<std::string>& files, std::string jsonl_field,
                               DocumentReaderSizes sizes)
    : files_(files), jsonl_field_(std::move(jsonl_field)), sizes_(sizes) {}

bool DocumentReader::next_batch(std::vector<DocumentJob>& jobs) {
  jobs.clear();
  size_t batch_bytes = 0;
  while (batch_bytes < sizes_.batch_bytes) {
    if (!in_.is_open()) {
      if (file_index_ >= files_.size()) break;
      open_next_file();
    }
    const size_t before = jobs.size();
    const bool file_done = jsonl_field_.empty() ? read_text_block(jobs) : read_jsonl_lines(jobs);
    for (size_t j = before; j < jobs.size(); ++j) batch_bytes += jobs[j].text.size();
    if (file_done) {
      in_.close();
      ++file_index_;
    }
  }
  return !jobs.empty();
}

void DocumentReader::open_next_file() {
  in_.open(files_[file_index_], std::ios::binary);
  if (!in_) throw std::runtime_error(files_[file_index_] + ": cannot open for reading");
  pending_.clear();
  pending_offset_ = 0;
  line_ = 0;
  document_started_ = false;
}

// Plain text: reads a block, emits everything up to the last safe cut as jobs of about chunk_bytes, keeps
// the remainder. Returns true at end of file (the remainder is then emitted too).
bool DocumentReader::read_text_block(std::vector<DocumentJob>& jobs) {
  const size_t old_size = pending_.size();
  pending_.resize(old_size + sizes_.read_block_bytes);
  in_.read(&pending_[old_size], static_cast<std::streamsize>(sizes_.read_block_bytes));
  const size_t got = static_cast<size_t>(in_.gcount());
  pending_.resize(old_size + got);
  bytes_read_ += static_cast<int64_t>(got);
  if (in_.bad()) throw std::runtime_error(file() + ": read error");
  const bool at_end = in_.eof();
  size_t emit = pending_.size();
  if (!at_end) {
    // Cut after the last safe point; without one, keep reading (a document with no safe cut is encoded
    // as one job, which is correct, only less parallel).
    emit = 0;
    for (size_t p = pending_.size(); p-- > 2;) {
      if (pending_[p - 1] == '\n' && is_safe_cut(pending_, p)) {
        emit = p;
        break;
      }
    }
  }
  if (emit > 0 || (at_end && !document_started_)) {
    const std::string_view text(pending_.data(), emit);
    const std::vector<size_t> bounds = safe_chunk_boundaries(text, sizes_.chunk_bytes);
    for (size_t c = 0; c + 1 < bounds.size() || (c == 0 && text.empty()); ++c) {
      DocumentJob job;
      if (!text.empty()) job.text.assign(text.substr(bounds[c], bounds[c + 1] - bounds[c]));
      job.starts_document = !document_started_;
      job.file = &file();
      job.file_offset = pending_offset_ + static_cast<int64_t>(text.empty() ? 0 : bounds[c]);
      if (!document_started_) ++documents_;
      document_started_ = true;
      jobs.push_back(std::move(job));
    }
    pending_.erase(0, emit);
    pending_offset_ += static_cast<int64_t>(emit);
  }
  return at_end;
}

// JSONL: one job per non-empty line (parsed by the worker). True at end of file.
bool DocumentReader::read_jsonl_lines(std::vector<DocumentJob>& jobs) {
  size_t bytes = 0;
  std::string line;
  while (bytes < sizes_.read_block_bytes) {
    const int64_t offset = pending_offset_;
    if (!std::getline(in_, line)) {
      if (in_.bad()) throw std::runtime_error(file() + ": read error");
      return true;
    }
    ++line_;
    pending_offset_ += static_cast<int64_t>(line.size()) + 1;
    bytes_read_ += static_cast<int64_t>(line.size()) + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;  // blank lines (often a trailing one) are not documents
    bytes += line.size();
    DocumentJob job;
    job.text = std::move(line);
    job.starts_document = true;
    job.is_jsonl_line = true;
    job.file = &file();
    job.line = line_;
    job.file_offset = offset;
    ++documents_;
    jobs.push_back(std::move(job));
  }
  return false;
}

void encode_document_job(const Gpt2Tokenizer& tokenizer, EncodeContext& context, const std::string& jsonl_field,
                         DocumentJob& job) {
  const std::string where = job.is_jsonl_line ? *job.file + ":" + std::to_string(job.line) : *job.file;
  const size_t bad = first_invalid_utf8_byte(job.text);
  if (bad != kValidUtf8) {
    const std::string in_line = job.is_jsonl_line ? " of the file (byte " + std::to_string(bad) + " of the line)" : "";
    throw FileError(where, "invalid UTF-8 at byte offset " + std::to_string(job.file_offset + static_cast<int64_t>(bad)) +
                               in_line);
  }
  if (!job.is_jsonl_line) {
    tokenizer.encode_valid_utf8(context, job.text, job.ids);
    return;
  }
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(job.text);
  } catch (const nlohmann::json::exception& e) {
    throw FileError(where, std::string("not valid JSON (") + e.what() + ")");
  }
  const auto field = document.is_object() ? document.find(jsonl_field) : document.end();
  if (!document.is_object() || field == document.end())
    throw FileError(where, "no field \"" + jsonl_field + "\" in this JSON line");
  if (!field->is_string()) throw FileError(where, "field \"" + jsonl_field + "\" is not a string");
  // nlohmann-json rejects invalid UTF-8 and lone surrogate escapes while parsing, so the string is valid
  // UTF-8 here; encode() checks again anyway (cheap) rather than trust that.
  try {
    tokenizer.encode(context, field->get_ref<const std::string&>(), job.ids);
  } catch (const InvalidUtf8Error& e) {
    throw FileError(where, "field \"" + jsonl_field + "\": " + e.what());
  }
}

}  // namespace llmc
