// Test and benchmark helper for the Python scripts: prints our token ids for a file, or times
// encoding of a file (vocabulary loading excluded) on N threads as one JSON line.
//   tokenizer_probe ids VOCAB_DIR FILE            -> ids separated by spaces, one line
//   tokenizer_probe lines VOCAB_DIR FILE          -> each line of FILE (JSON string per line) encoded
//                                                    on its own, one line of ids per input line
//   tokenizer_probe bench VOCAB_DIR FILE THREADS REPEATS -> {"seconds": best, "bytes": .., "tokens": ..}
//   tokenizer_probe prefixes VOCAB_DIR PADDED_VOCAB  -> the token prefix table, ids separated by spaces
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "llmc/tokenizer/parallel_encode.h"
#include "llmc/tokenizer/token_prefixes.h"
#include "llmc/tokenizer/tokenizer.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open for reading");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void print_ids(const std::vector<int32_t>& ids) {
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 4) {
      std::cerr << "usage: tokenizer_probe ids|lines|bench VOCAB_DIR FILE [THREADS REPEATS] | prefixes VOCAB_DIR PADDED_VOCAB\n";
      return 2;
    }
    const std::string mode = argv[1];
    if (mode == "prefixes") {
      print_ids(llmc::token_prefix_table(llmc::load_bpe_vocab_dir(argv[2]), std::stoi(argv[3])));
      return 0;
    }
    const llmc::Gpt2Tokenizer tokenizer = llmc::Gpt2Tokenizer::from_directory(argv[2]);
    const std::string text = read_file(argv[3]);
    llmc::EncodeContext context(tokenizer);
    if (mode == "ids") {
      print_ids(tokenizer.encode(context, text));
    } else if (mode == "lines") {
      std::istringstream lines(text);
      std::string line;
      while (std::getline(lines, line)) {
        print_ids(tokenizer.encode(context, nlohmann::json::parse(line).get<std::string>()));
      }
    } else if (mode == "bench" && argc == 6) {
      const int threads = std::stoi(argv[4]);
      const int repeats = std::stoi(argv[5]);
      double best = 1e30;
      size_t tokens = 0;
      for (int r = 0; r < repeats; ++r) {
        // A fresh context each round: the timing includes filling the piece cache.
        const auto start = std::chrono::steady_clock::now();
        std::vector<int32_t> ids;
        if (threads == 1) {
          llmc::EncodeContext fresh(tokenizer);
          ids = tokenizer.encode(fresh, text);
        } else {
          ids = llmc::encode_parallel(tokenizer, text, threads);
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        best = std::min(best, seconds);
        tokens = ids.size();
      }
      std::cout << nlohmann::json{{"seconds", best}, {"bytes", text.size()}, {"tokens", tokens}}.dump() << "\n";
    } else {
      std::cerr << "tokenizer_probe: unknown mode or wrong argument count\n";
      return 2;
    }
  } catch (const std::exception& e) {
    std::cerr << "tokenizer_probe: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
