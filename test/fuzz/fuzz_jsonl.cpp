// Fuzz target: a JSON Lines input of tokenize_gpt2 (--jsonl text), read and encoded as the tool does:
// every non-blank line is one document. The oracles: a bad line (not JSON, no string "text" field,
// invalid UTF-8) is refused naming the file and the line number; a good line's tokens decode back to its
// "text" field (nlohmann-json parses the line here as well, as the independent reading of the field).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "llmc/base/file_io.h"
#include "test/fuzz/fuzz_support.h"
#include "test/fuzz/tokenizer_fixture.h"

using namespace llmc;
using llmc::fuzz::finding;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::gpt2_tokenizer();
  return 0;
}

namespace {
// The line's "text" field as an independent parse sees it (the job's text is the line).
std::string text_field(const std::string& line) {
  const nlohmann::json document = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!document.is_object() || !document.contains("text") || !document["text"].is_string())
    finding("a line without a string \"text\" field was encoded: " + line.substr(0, 200));
  return document["text"].get<std::string>();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::InputFile input(data, size, ".jsonl");
  const Gpt2Tokenizer& tokenizer = fuzz::gpt2_tokenizer();
  EncodeContext context(tokenizer);
  const std::vector<std::string> files = {input.path()};
  DocumentReader reader(files, "text", fuzz::small_reader_sizes());
  std::vector<DocumentJob> jobs;
  while (reader.next_batch(jobs)) {
    for (DocumentJob& job : jobs) {
      if (!job.starts_document || !job.is_jsonl_line) finding("a JSONL job that is not a whole document");
      try {
        encode_document_job(tokenizer, context, "text", job);
      } catch (const FileError& error) {
        const std::string where = input.path() + ":" + std::to_string(job.line) + ": ";
        if (std::string(error.what()).rfind(where, 0) != 0)
          finding(std::string("an error that does not name the file and line: ") + error.what());
        continue;
      }
      if (tokenizer.decode(job.ids) != text_field(job.text)) finding("decode(encode(field)) differs from the field");
    }
  }
  return 0;
}
