// tokenize_gpt2: turns text files or JSONL dumps (FineWeb style) into GPT-2 token shards in llm.c's
// format. Each document (a whole file, or one JSONL line's field) is prefixed with <|endoftext|>;
// the first --val-tokens tokens form the val shard, the rest fill train shards of --shard-tokens.
// Input is read in batches; each batch is encoded on all threads and appended in input order, so
// the output is the same for any thread count. On any error, the shards of this run are removed.
#include <CLI/CLI.hpp>

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
#include "llmc/base/file_io.h"
#include "llmc/base/parallel_for.h"
#include "llmc/tokenizer/document_reader.h"
#include "llmc/tokenizer/parallel_encode.h"
#include "llmc/tokenizer/tokenizer.h"

namespace fs = std::filesystem;

namespace {

constexpr int64_t kDefaultShardTokens = 100'000'000;  // llm.c's FineWeb shard size
// Text read per batch, then encoded in parallel: at least kMinBatchBytes, and 2 MB per thread.
constexpr size_t kMinBatchBytes = 8 << 20;

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

  llmc::DocumentReaderSizes sizes;
  sizes.batch_bytes = std::max(kMinBatchBytes, static_cast<size_t>(options.threads) * (2u << 20));
  llmc::DocumentReader reader(options.files, options.jsonl_field, sizes);
  ShardSink sink(options);
  std::vector<llmc::DocumentJob> jobs;
  int64_t tokens = 0;
  auto last_report = start;
  try {
    while (reader.next_batch(jobs)) {
      // The lowest job's error is the one reported: the first in input order, for any thread count.
      llmc::parallel_for(jobs.size(), options.threads, [&](int worker, size_t job) {
        llmc::encode_document_job(tokenizer, *contexts[worker], options.jsonl_field, jobs[job]);
      });
      for (llmc::DocumentJob& job : jobs) {
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
