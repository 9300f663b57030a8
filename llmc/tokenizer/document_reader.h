// tokenize_gpt2's input, read as encoding jobs: plain-text files (each one document, cut at safe points
// into ~1 MB jobs so that threads can share a long file) or JSON Lines (one document per line, taken from
// a string field), and the encoding of one job with errors that name the file, the line and the byte.
// Separate from the tool so that the fuzz targets (test/fuzz/) drive exactly what it reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "llmc/tokenizer/tokenizer.h"

namespace llmc {

// One unit of encoding work: a piece of a plain-text document, or one raw JSONL line.
struct DocumentJob {
  std::string text;
  bool starts_document = false;  // emit <|endoftext|> before its tokens
  bool is_jsonl_line = false;
  const std::string* file = nullptr;
  int64_t line = 0;         // JSONL line number (1-based)
  int64_t file_offset = 0;  // byte offset of `text` in the file
  std::vector<int32_t> ids;
};

// How much the reader takes at a time (the tool's values by default; tests use small ones to reach the
// cutting logic with small inputs).
struct DocumentReaderSizes {
  size_t read_block_bytes = 4 << 20;  // read from a file at a time
  size_t chunk_bytes = 1 << 20;       // plain-text documents are cut into jobs of about this size
  size_t batch_bytes = 8 << 20;       // text per batch of jobs
};

// Reads the inputs in order and hands out batches of jobs of about sizes.batch_bytes.
class DocumentReader {
 public:
  // An empty `jsonl_field` reads plain text. The files must outlive the reader.
  DocumentReader(const std::vector<std::string>& files, std::string jsonl_field,
                 DocumentReaderSizes sizes = DocumentReaderSizes{});

  // Fills `jobs` with the next batch; false when all input is consumed. Throws std::runtime_error
  // naming a file that cannot be opened or read.
  bool next_batch(std::vector<DocumentJob>& jobs);

  int64_t documents() const { return documents_; }
  int64_t bytes_read() const { return bytes_read_; }

 private:
  void open_next_file();
  const std::string& file() const { return files_[file_index_]; }
  bool read_text_block(std::vector<DocumentJob>& jobs);
  bool read_jsonl_lines(std::vector<DocumentJob>& jobs);

  const std::vector<std::string>& files_;
  const std::string jsonl_field_;
  const DocumentReaderSizes sizes_;
  size_t file_index_ = 0;
  std::ifstream in_;
  std::string pending_;
  int64_t pending_offset_ = 0;
  int64_t line_ = 0;
  bool document_started_ = false;
  int64_t documents_ = 0;
  int64_t bytes_read_ = 0;
};

// Encodes one job into job.ids; throws FileError naming the file (and JSONL line) of a bad input:
// invalid UTF-8 (with its byte offset), a line that is not JSON, no such string field.
void encode_document_job(const Gpt2Tokenizer& tokenizer, EncodeContext& context, const std::string& jsonl_field,
                         DocumentJob& job);

}  // namespace llmc
