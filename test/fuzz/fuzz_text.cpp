// Fuzz target: a plain-text input of tokenize_gpt2 (one document), read as the tool reads it -- cut at
// safe points into jobs (small read sizes, so the cutting is exercised) -- and encoded job by job. The
// oracles: invalid UTF-8 (NUL bytes are valid) is refused exactly when present, naming the file; otherwise
// the jobs' tokens equal encoding the whole text at once (cutting changes nothing) and decode back to it.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "llmc/base/file_io.h"
#include "llmc/tokenizer/utf8.h"
#include "test/fuzz/fuzz_support.h"
#include "test/fuzz/tokenizer_fixture.h"

using namespace llmc;
using llmc::fuzz::finding;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::gpt2_tokenizer();  // the vocabulary is loaded once, before the clock starts
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::InputFile input(data, size, ".txt");
  const Gpt2Tokenizer& tokenizer = fuzz::gpt2_tokenizer();
  EncodeContext context(tokenizer);
  const std::vector<std::string> files = {input.path()};
  DocumentReader reader(files, "", fuzz::small_reader_sizes());
  std::vector<DocumentJob> jobs;
  std::vector<int32_t> ids;
  int documents = 0;
  bool refused = false;
  try {
    while (reader.next_batch(jobs)) {
      for (DocumentJob& job : jobs) {
        documents += job.starts_document ? 1 : 0;
        encode_document_job(tokenizer, context, "", job);
        ids.insert(ids.end(), job.ids.begin(), job.ids.end());
      }
    }
  } catch (const FileError& error) {
    if (std::string(error.what()).rfind(input.path() + ": invalid UTF-8 at byte offset ", 0) != 0)
      finding(std::string("unexpected error: ") + error.what());
    refused = true;
  }
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (refused != (first_invalid_utf8_byte(text) != kValidUtf8)) finding("invalid UTF-8 refused wrongly");
  if (refused) return 0;
  if (documents != 1) finding(std::to_string(documents) + " documents in one file");
  if (ids != tokenizer.encode(context, text)) finding("encoding in jobs differs from encoding at once");
  if (tokenizer.decode(ids) != text) finding("decode(encode(text)) differs from the text");
  return 0;
}
