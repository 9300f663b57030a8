// tokenize_gpt2: turns text files or JSONL dumps (FineWeb style) into GPT-2 token shards in llm.c's
// format. Each document (a whole file, or one JSONL line's field) is prefixed with <|endoftext|>;
// the first --val-tokens tokens form the val shard, the rest fill train shards of --shard-tokens.
// Input is read in batches; each batch is encoded on all threads and appended in input order, so
// the output is the same for any thread count. On any error, the shards of this run are removed.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "llmc/data/shards.h"
#include "llmc/file_io.h"
#include "llmc/parallel_for.h"
#include "llmc/tokenizer/parallel_encode.h"
#include "llmc/tokenizer/tokenizer.h"

namespace fs = std::filesystem;

namespace {

constexpr int64_t kDefaultShardTokens = 100'000'000;  // llm.c's FineWeb shard size
// Text read per batch, then encoded in parallel: at least kMinBatchBytes, and 2 MB per thread.
constexpr size_t kMinBatchBytes = 8 << 20;
constexpr size_t kChunkBytes = 1 << 20;              // plain-text documents are cut into ~1 MB jobs
constexpr size_t kReadBlockBytes = 4 << 20;

struct Options {
  std::string vocab_dir;
  std::string output_dir = ".";
  std::string name = "tokens";
  int64_t val_tokens = kDefaultShardTokens;
  int64_t shard_tokens = kDefaultShardTokens;
  std::string jsonl_field;
  int threads = 1;
  bool print_ids = false;
  std::vector<std::string> files;
};

// One unit of encoding work: a piece of a plain-text document, or one raw JSONL line.
struct Job {
  std::string text;
  bool starts_document = false;  // emit <|endoftext|> before its tokens
  bool is_jsonl_line = false;
  const std::string* file = nullptr;
  int64_t line = 0;         // JSONL line number (1-based)
  int64_t file_offset = 0;  // byte offset of `text` in the file
  std::vector<int32_t> ids;
};

// Reads the inputs in order and hands out batches of jobs of about batch_bytes_.
class InputReader {
 public:
  InputReader(const std::vector<std::string>& files, std::string jsonl_field, int threads)
      : files_(files),
        jsonl_field_(std::move(jsonl_field)),
        batch_bytes_(std::max(kMinBatchBytes, static_cast<size_t>(threads) * (2u << 20))) {}

  // Fills `jobs` with the next batch; false when all input is consumed.
  bool next_batch(std::vector<Job>& jobs) {
    jobs.clear();
    size_t batch_bytes = 0;
    while (batch_bytes < batch_bytes_) {
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

  int64_t documents() const { return documents_; }
  int64_t bytes_read() const { return bytes_read_; }

 private:
  void open_next_file() {
    in_.open(files_[file_index_], std::ios::binary);
    if (!in_) throw std::runtime_error(files_[file_index_] + ": cannot open for reading");
    pending_.clear();
    pending_offset_ = 0;
    line_ = 0;
    document_started_ = false;
  }

  const std::string& file() const { return files_[file_index_]; }

  // Plain text: reads a block, emits everything up to the last safe cut as ~1 MB jobs, keeps
  // the remainder. Returns true at end of file (the remainder is then emitted too).
  bool read_text_block(std::vector<Job>& jobs) {
    const size_t old_size = pending_.size();
    pending_.resize(old_size + kReadBlockBytes);
    in_.read(&pending_[old_size], static_cast<std::streamsize>(kReadBlockBytes));
    const size_t got = static_cast<size_t>(in_.gcount());
    pending_.resize(old_size + got);
    bytes_read_ += static_cast<int64_t>(got);
    if (in_.bad()) throw std::runtime_error(file() + ": read error");
    const bool at_end = in_.eof();
    size_t emit = pending_.size();
    if (!at_end) {
      // Cut after the last safe point; without one, keep reading (a document with no safe cut
      // is encoded as one job, which is correct, only less parallel).
      emit = 0;
      for (size_t p = pending_.size(); p-- > 2;) {
        if (pending_[p - 1] == '\n' && llmc::is_safe_cut(pending_, p)) {
          emit = p;
          break;
        }
      }
    }
    if (emit > 0 || (at_end && !document_started_)) {
      const std::string_view text(pending_.data(), emit);
      const std::vector<size_t> bounds = llmc::safe_chunk_boundaries(text, kChunkBytes);
      for (size_t c = 0; c + 1 < bounds.size() || (c == 0 && text.empty()); ++c) {
        Job job;
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
  bool read_jsonl_lines(std::vector<Job>& jobs) {
    size_t bytes = 0;
    std::string line;
    while (bytes < kReadBlockBytes) {
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
      Job job;
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

  const std::vector<std::string>& files_;
  const std::string jsonl_field_;
  const size_t batch_bytes_;
  size_t file_index_ = 0;
  std::ifstream in_;
  std::string pending_;
  int64_t pending_offset_ = 0;
  int64_t line_ = 0;
  bool document_started_ = false;
  int64_t documents_ = 0;
  int64_t bytes_read_ = 0;
};

// Encodes one job; throws llmc::FileError naming the file (and JSONL line) of a bad input.
void encode_job(const llmc::Gpt2Tokenizer& tokenizer, llmc::EncodeContext& context,
                const std::string& jsonl_field, Job& job) {
  const std::string where = job.is_jsonl_line ? *job.file + ":" + std::to_string(job.line) : *job.file;
  const size_t bad = llmc::first_invalid_utf8_byte(job.text);
  if (bad != llmc::kValidUtf8) {
    const std::string in_line = job.is_jsonl_line ? " of the file (byte " + std::to_string(bad) + " of the line)" : "";
    throw llmc::FileError(where, "invalid UTF-8 at byte offset " +
                                     std::to_string(job.file_offset + static_cast<int64_t>(bad)) + in_line);
  }
  if (!job.is_jsonl_line) {
    tokenizer.encode_valid_utf8(context, job.text, job.ids);
    return;
  }
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(job.text);
  } catch (const nlohmann::json::exception& e) {
    throw llmc::FileError(where, std::string("not valid JSON (") + e.what() + ")");
  }
  const auto field = document.is_object() ? document.find(jsonl_field) : document.end();
  if (!document.is_object() || field == document.end())
    throw llmc::FileError(where, "no field \"" + jsonl_field + "\" in this JSON line");
  if (!field->is_string()) throw llmc::FileError(where, "field \"" + jsonl_field + "\" is not a string");
  // nlohmann-json rejects invalid UTF-8 and lone surrogate escapes while parsing, so the string
  // is valid UTF-8 here; encode() checks again anyway (cheap) rather than trust that.
  try {
    tokenizer.encode(context, field->get_ref<const std::string&>(), job.ids);
  } catch (const llmc::InvalidUtf8Error& e) {
    throw llmc::FileError(where, "field \"" + jsonl_field + "\": " + e.what());
  }
}

// Collects tokens in order and writes the val shard, then train shards, as each fills up.
class ShardSink {
 public:
  ShardSink(const Options& options) : options_(options), in_val_(options.val_tokens > 0) {
    buffer_.reserve(static_cast<size_t>(std::min(current_limit(), int64_t{1} << 26)));
  }

  void append(const int32_t* ids, size_t count) {
    while (count > 0) {
      const size_t room = static_cast<size_t>(current_limit() - static_cast<int64_t>(buffer_.size()));
      const size_t take = std::min(room, count);
      for (size_t i = 0; i < take; ++i) buffer_.push_back(static_cast<uint16_t>(ids[i]));
      ids += take;
      count -= take;
      if (static_cast<int64_t>(buffer_.size()) == current_limit()) flush();
    }
  }

  void finish() {
    if (!buffer_.empty()) flush();
  }

  // Removes every shard this run wrote (called when the run fails).
  void remove_written() {
    for (const std::string& path : written_) std::remove(path.c_str());
    written_.clear();
  }

  int64_t val_written = 0, train_written = 0;
  const std::vector<std::string>& written() const { return written_; }

 private:
  int64_t current_limit() const { return in_val_ ? options_.val_tokens : options_.shard_tokens; }

  void flush() {
    char suffix[32];
    std::snprintf(suffix, sizeof(suffix), in_val_ ? "_val_%06d.bin" : "_train_%06d.bin",
                  in_val_ ? 0 : next_train_index_);
    const std::string path = (fs::path(options_.output_dir) / (options_.name + suffix)).string();
    written_.push_back(path);  // before writing: a failed write leaves nothing, removing is harmless
    llmc::write_shard(path, buffer_.data(), static_cast<int64_t>(buffer_.size()));
    (in_val_ ? val_written : train_written) += static_cast<int64_t>(buffer_.size());
    if (in_val_) {
      in_val_ = false;
    } else {
      ++next_train_index_;
    }
    buffer_.clear();
  }

  const Options& options_;
  bool in_val_;
  int next_train_index_ = 1;
  std::vector<uint16_t> buffer_;
  std::vector<std::string> written_;
};

int print_ids(const llmc::Gpt2Tokenizer& tokenizer, const Options& options) {
  for (const std::string& path : options.files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot open for reading");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<int32_t> ids;
    try {
      ids = llmc::encode_parallel(tokenizer, text, options.threads);
    } catch (const llmc::InvalidUtf8Error& e) {
      throw std::runtime_error(path + ": " + e.what());
    }
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) line += ' ';
      line += std::to_string(ids[i]);
    }
    line += '\n';
    if (std::fwrite(line.data(), 1, line.size(), stdout) != line.size()) {
      throw std::runtime_error("fwrite(stdout) failed");
    }
  }
  return 0;
}

int run(const Options& options) {
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& path : options.files) {
    if (!fs::exists(path)) throw std::runtime_error(path + ": input file does not exist");
    if (fs::is_directory(path)) throw std::runtime_error(path + ": is a directory, not an input file");
  }
  const llmc::Gpt2Tokenizer tokenizer = llmc::Gpt2Tokenizer::from_directory(options.vocab_dir);
  if (options.print_ids) return print_ids(tokenizer, options);

  llmc::make_directories(options.output_dir, "output directory");
  // Stale shards with our prefix (say from a longer earlier run) would be globbed together with
  // the new ones by a data loader, so refuse rather than mix.
  for (const fs::directory_entry& entry : fs::directory_iterator(options.output_dir)) {
    const std::string file = entry.path().filename().string();
    for (const char* kind : {"_val_", "_train_"}) {
      const std::string stem = options.name + kind;
      if (file.size() > stem.size() + 4 && file.compare(0, stem.size(), stem) == 0 &&
          file.compare(file.size() - 4, 4, ".bin") == 0) {
        throw std::runtime_error(entry.path().string() + ": output directory already has shards named " +
                                 options.name + "_*.bin; remove them or choose another --name or --output-dir");
      }
    }
  }
  std::vector<std::unique_ptr<llmc::EncodeContext>> contexts;
  for (int t = 0; t < options.threads; ++t) contexts.push_back(std::make_unique<llmc::EncodeContext>(tokenizer));

  InputReader reader(options.files, options.jsonl_field, options.threads);
  ShardSink sink(options);
  std::vector<Job> jobs;
  int64_t tokens = 0;
  auto last_report = start;
  try {
    while (reader.next_batch(jobs)) {
      // The lowest job's error is the one reported: the first in input order, for any thread count.
      llmc::parallel_for(jobs.size(), options.threads, [&](int worker, size_t job) {
        encode_job(tokenizer, *contexts[worker], options.jsonl_field, jobs[job]);
      });
      for (Job& job : jobs) {
        if (job.starts_document) {
          const int32_t eot = tokenizer.end_of_text();
          sink.append(&eot, 1);
          ++tokens;
        }
        sink.append(job.ids.data(), job.ids.size());
        tokens += static_cast<int64_t>(job.ids.size());
      }
      const auto now = std::chrono::steady_clock::now();
      if (std::chrono::duration<double>(now - last_report).count() > 2.0) {
        const double seconds = std::chrono::duration<double>(now - start).count();
        std::fprintf(stderr, "tokenize_gpt2: %.1f MB read (%.1f MB/s), %lld tokens (%.2fM tokens/s), %zu shards written\n",
                     reader.bytes_read() / 1e6, reader.bytes_read() / 1e6 / seconds,
                     static_cast<long long>(tokens), tokens / 1e6 / seconds, sink.written().size());
        last_report = now;
      }
    }
    sink.finish();
  } catch (...) {
    sink.remove_written();
    throw;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (options.val_tokens > 0 && sink.val_written < options.val_tokens) {
    std::fprintf(stderr, "tokenize_gpt2: warning: only %lld tokens in all, fewer than --val-tokens %lld;"
                 " everything went to the val shard and there is no train shard\n",
                 static_cast<long long>(tokens), static_cast<long long>(options.val_tokens));
  }
  std::fprintf(stderr, "tokenize_gpt2: %lld documents, %.2f MB -> %lld tokens (val %lld, train %lld in %zu shards)"
               " in %.2f s (%.1f MB/s, %.2fM tokens/s, %d threads) -> %s/%s_*.bin\n",
               static_cast<long long>(reader.documents()), reader.bytes_read() / 1e6,
               static_cast<long long>(tokens), static_cast<long long>(sink.val_written),
               static_cast<long long>(sink.train_written),
               sink.written().size() - (sink.val_written > 0 ? 1 : 0), seconds,
               reader.bytes_read() / 1e6 / seconds, tokens / 1e6 / seconds, options.threads,
               options.output_dir.c_str(), options.name.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  options.vocab_dir = llmc::default_vocab_dir();
  options.threads = std::max(1u, std::thread::hardware_concurrency());
  CLI::App app{"Tokenize text with GPT-2's BPE (r50k_base) into llm.c token shards.\n"
               "Each input file, or each JSONL line with --jsonl, is one document prefixed with "
               "<|endoftext|> (50256). The first --val-tokens tokens go to PREFIX_val_000000.bin, the rest to "
               "PREFIX_train_000001.bin, ... Output is identical for any --threads."};
  app.add_option("--vocab", options.vocab_dir,
                 "Directory with r50k_base.tiktoken, or encoder.json + vocab.bpe (data/download_gpt2_vocab.sh)")
      ->capture_default_str();
  app.add_option("--output-dir", options.output_dir, "Directory for the shards (created if missing)")
      ->capture_default_str();
  app.add_option("--name", options.name, "Shard name prefix: NAME_val_000000.bin, NAME_train_000001.bin, ...")
      ->capture_default_str();
  app.add_option("--val-tokens", options.val_tokens, "Tokens in the val shard, taken from the start (0: no val shard)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, llmc::kShardMaxTokens));
  app.add_option("--shard-tokens", options.shard_tokens, "Most tokens per train shard")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, llmc::kShardMaxTokens));
  app.add_option("--jsonl", options.jsonl_field,
                 "Inputs are JSON Lines; each line's string FIELD (e.g. text) is a document");
  app.add_option("--threads", options.threads, "Encoding threads (default: all cores)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_flag("--print-ids", options.print_ids,
               "Print each file's token ids (whole file as one text, no <|endoftext|>) on one line of stdout;"
               " write no shards");
  app.add_option("files", options.files, "Input files (UTF-8 text, or JSONL with --jsonl)")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenize_gpt2: error: %s\n", e.what());
    return 1;
  }
}
