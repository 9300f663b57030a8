// The GPT-2 tokenizer the tokenizer fuzz targets share, loaded once per process from the vocabulary
// directory the build names (LLMC_FUZZ_VOCAB_DIR), and the reader sizes they use: small, so that inputs
// of a few kilobytes already cross read blocks, chunks and batches.
#pragma once
#include "llmc/tokenizer/document_reader.h"
#include "llmc/tokenizer/tokenizer.h"

namespace llmc::fuzz {

const Gpt2Tokenizer& gpt2_tokenizer();

inline DocumentReaderSizes small_reader_sizes() {
  DocumentReaderSizes sizes;
  sizes.read_block_bytes = 64;
  sizes.chunk_bytes = 16;
  sizes.batch_bytes = 128;
  return sizes;
}

}  // namespace llmc::fuzz
