// Helper of check_bos_loader.py: runs the speedrun loaders (llmc/data/bos_loader.h, packed_val_loader.h)
// for every rank of a configuration and writes their sequences in slot order (step, micro-step * world
// + rank; validation: call * world + rank) as int32: inputs[T], targets[T], cu_seqlens[L], documents.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/data/bos_loader.h"
#include "llmc/data/packed_val_loader.h"

namespace {

void write_sequence(std::ofstream& out, const llmc::PackedSequence& s) {
  auto write = [&](const std::vector<int32_t>& values) {
    out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * 4));
  };
  write(s.inputs);
  write(s.targets);
  write(s.cu_seqlens);
  write({s.num_documents});
}

}  // namespace

int main(int argc, char** argv) {
  llmc::BosLoaderConfig train;
  llmc::PackedValConfig val;
  int steps = 1;
  std::string output;
  CLI::App app{"Writes the sequences of every rank of a speedrun loader configuration"};
  app.add_option("--pattern", train.pattern, "Shard glob")->required();
  app.add_option("--seq-len", train.seq_len, "T")->required();
  app.add_option("--max-doc", train.max_document_tokens, "Document cut");
  app.add_option("--world", train.world_size, "Ranks");
  app.add_option("--accum", train.grad_accum, "Micro-steps per step");
  app.add_option("--steps", steps, "Steps to write");
  app.add_option("--cu-length", train.cu_seqlens_length, "cu_seqlens entries (0: default)");
  app.add_option("--val-tokens", val.val_tokens, "Validation mode: tokens to read (0: training mode)")->default_val(0);
  app.add_option("--out", output, "Output file")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    std::ofstream out(output, std::ios::binary);
    if (!out) throw std::runtime_error(output + ": cannot open for writing");
    if (val.val_tokens > 0) {
      val.pattern = train.pattern;
      val.seq_len = train.seq_len;
      val.world_size = train.world_size;
      val.cu_seqlens_length = train.cu_seqlens_length;
      std::vector<std::unique_ptr<llmc::PackedValLoader>> loaders;
      for (int rank = 0; rank < val.world_size; ++rank) {
        val.rank = rank;
        loaders.push_back(std::make_unique<llmc::PackedValLoader>(val));
      }
      llmc::PackedSequence s;
      for (int64_t call = 0; call < loaders[0]->num_calls(); ++call)
        for (auto& loader : loaders) {
          loader->next(&s);
          write_sequence(out, s);
        }
    } else {
      std::vector<std::unique_ptr<llmc::BosLoader>> loaders;
      for (int rank = 0; rank < train.world_size; ++rank) {
        train.rank = rank;
        loaders.push_back(std::make_unique<llmc::BosLoader>(train));
      }
      llmc::PackedSequence s;
      for (int step = 0; step < steps; ++step)
        for (int micro = 0; micro < train.grad_accum; ++micro)
          for (auto& loader : loaders) {
            loader->next(&s);
            write_sequence(out, s);
          }
    }
    out.close();
    if (!out) throw std::runtime_error(output + ": write failed");
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bos_loader_probe: %s\n", error.what());
    return 1;
  }
  return 0;
}
