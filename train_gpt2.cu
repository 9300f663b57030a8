// train_gpt2: trains a model of any family (GPT-2, the speedrun record's) on token shards, data-parallel
// over MPI ranks (one GPU each) with sharded optimizers whose communication overlaps the backward pass.
// This file is main(): it parses the options and runs the trainer (llmc/train/trainer.h), turning its
// errors into one line and an exit status on every rank.
#include <memory>
#include <string>

#include "llmc/dist/comm.h"
#include "llmc/train/options.h"
#include "llmc/train/trainer.h"

int main(int argc, char** argv) {
  llmc::TrainOptions options;
  std::string config;
  const int parse_exit = llmc::parse_train_command_line(
      argc, argv, "train_gpt2: train GPT-2 or the speedrun model on token shards (data-parallel under mpirun)", options,
      config);
  if (parse_exit >= 0) return parse_exit;
  // Outside the try: it must outlive the error path (see stop_after_error).
  std::unique_ptr<llmc::CommContext> comm;
  try {
    // What the options alone decide, checked before MPI and the GPU are touched (as for one rank: a combination
    // that fails there fails on any number of ranks): a bad command line is named even where no GPU is, so the GPU
    // kit's dry run (docs/gpu_check.md) catches it. The trainer checks again with the real number of ranks.
    llmc::validate_train_options(options, 1);
    comm = std::make_unique<llmc::CommContext>();
    llmc::Trainer trainer(options, config, *comm);
    return trainer.run();
  } catch (const llmc::AgreedError& error) {  // every rank knows it: all stop normally
    return llmc::stop_after_agreed_error(error, *comm);
  } catch (const std::exception& error) {
    return llmc::stop_after_error(error.what(), comm.get());
  }
}
