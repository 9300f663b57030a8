// train_gpt2: trains GPT-2 on token shards, data-parallel over MPI ranks (one GPU each) with a ZeRO-1
// AdamW whose communication overlaps the backward pass. main() holds the options and the training
// loop, which reads top to bottom like the algorithm; everything else lives in llmc/.
#include <CLI/CLI.hpp>

#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "llmc/model/checkpoint.h"
#include "llmc/dist/comm.h"
#include "llmc/cuda_common.h"
#include "llmc/data/dataloader.h"
#include "llmc/model/gpt2.h"
#include "llmc/train/lr_schedule.h"
#include "llmc/train/mfu.h"
#include "llmc/model/param_init.h"
#include "llmc/train/run_info.h"
#include "llmc/dist/trace.h"
#include "llmc/train/log.h"
#include "llmc/train/options.h"
#include "llmc/train/state.h"
#include "llmc/optim/zero.h"

using namespace llmc;

namespace {

using Clock = std::chrono::steady_clock;
double elapsed_ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

bool is_regular_file(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

// Creates the directory and any missing parents (like mkdir -p).
void make_directory(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw std::runtime_error(dir + ": cannot create output directory: " + error.message());
}

// "embeddings", "layer 3", "lm_head+final_norm": what the backward computes just before a bucket is final.
std::string bucket_label(const ParamLayout& layout, int bucket) {
  if (bucket == 0) return "embeddings";
  if (bucket == layout.final_norm_bucket()) return "lm_head+final_norm";
  return "layer " + std::to_string(bucket - 1);
}

// Wraps the optimizer's bucket hook so that the backward shows up on the compute track as one slice per
// bucket, each ending where that bucket's gradients become final.
class BackwardTracing {
 public:
  BackwardTracing(Tracer& tracer, cudaStream_t stream, const ParamLayout& layout, BucketHook inner)
      : tracer_(tracer), stream_(stream), layout_(layout), inner_(std::move(inner)) {
    const int first = layout_.final_norm_bucket();
    open_ = tracer_.begin(stream_, TraceTrack::kCompute, "backward " + bucket_label(layout_, first), {{"bucket", first}});
  }
  BucketHook hook() {
    return [this](int bucket) {
      tracer_.end(open_, stream_);
      if (inner_) inner_(bucket);
      const int next = bucket - 1;  // buckets become final in decreasing order
      if (bucket != 0)
        open_ = tracer_.begin(stream_, TraceTrack::kCompute, "backward " + bucket_label(layout_, next), {{"bucket", next}});
    };
  }

 private:
  Tracer& tracer_;
  cudaStream_t stream_;
  const ParamLayout& layout_;
  BucketHook inner_;
  Tracer::SliceId open_ = 0;
};

constexpr CheckpointDtype kModelFileDtype =
    std::is_same<floatX, float>::value ? CheckpointDtype::fp32 : CheckpointDtype::bf16;

// Model file once (rank 0), then every rank's optimizer shard; a barrier so that no rank runs ahead of
// a checkpoint that is not complete yet.
void save_checkpoint(const std::string& prefix, GPT2& model, ZeroOptimizer& optimizer, CommContext& comm,
                     const TrainState& loop_state) {
  optimizer.wait_for_all_params();
  if (comm.is_main_rank()) {
    const std::vector<float> params = model.download_params();
    write_checkpoint(checkpoint_model_path(prefix), model.layout(), params.data(), kModelFileDtype);
  }
  TrainState state = loop_state;
  optimizer.download_state(state.master, state.adam_m, state.adam_v);
  write_train_state(checkpoint_state_path(prefix, comm.rank()), state);
  comm.barrier();
}

double evaluate(GPT2& model, ZeroOptimizer& optimizer, ValLoader& val_loader, CommContext& comm,
                std::vector<int>& inputs, std::vector<int>& targets) {
  val_loader.reset();
  double loss_sum = 0.0;
  for (int64_t s = 0; s < val_loader.num_steps(); s++) {
    val_loader.next_batch(inputs.data(), targets.data());
    model.forward(inputs.data(), targets.data(), 0, /*compute_dlogits=*/false, 0.0f, optimizer.before_bucket_use());
    loss_sum += model.mean_loss(1);
  }
  return comm.all_reduce_mean(loss_sum / double(val_loader.num_steps()));
}

// For scripts/reference_check.py: the batch of step 1, its loss and the gradients (layout order).
void dump_step(const std::string& dir, const std::vector<int>& inputs, const std::vector<int>& targets, double loss,
               const std::vector<float>& grads, const GPT2& model) {
  auto write_binary = [&](const std::string& name, const void* data, size_t bytes) {
    std::FILE* f = std::fopen((dir + "/" + name).c_str(), "wb");
    if (!f || std::fwrite(data, 1, bytes, f) != bytes || std::fclose(f) != 0)
      throw std::runtime_error(dir + "/" + name + ": cannot write dump file");
  };
  write_binary("inputs.bin", inputs.data(), inputs.size() * sizeof(int));
  write_binary("targets.bin", targets.data(), targets.size() * sizeof(int));
  write_binary("grads.bin", grads.data(), grads.size() * sizeof(float));
  const std::string meta = "{\"loss\": " + std::to_string(loss) + ", \"B\": " + std::to_string(model.batch_size()) +
                           ", \"T\": " + std::to_string(model.seq_len()) + ", \"precision\": \"" + kPrecisionName +
                           "\"}\n";
  write_binary("meta.json", meta.data(), meta.size());
}

int train(const TrainOptions& opt, const std::string& options_text, CommContext& comm) {
  validate_train_options(opt, comm.world_size());
  const bool writer = comm.is_main_rank();
  if (!opt.output_dir.empty() && writer) make_directory(opt.output_dir);
  comm.barrier();
  TrainLog log(opt.output_dir.empty() ? "" : opt.output_dir + "/log.txt", writer);

  // ---- model: a preset shape, or an llm.c model file; optionally resumed from a checkpoint ----
  std::string resume_prefix = opt.resume == "latest" ? latest_checkpoint_prefix(opt.output_dir) : opt.resume;
  if (opt.resume == "latest" && resume_prefix.empty()) log.line("# --resume latest: no checkpoint in " + opt.output_dir + ", starting fresh");
  const std::string model_file = !resume_prefix.empty() ? checkpoint_model_path(resume_prefix)
                                 : is_regular_file(opt.model) ? opt.model : "";
  ParamLayout layout_from_file;
  std::vector<float> host_params;
  GPT2Config config;
  if (!model_file.empty()) {
    host_params = load_checkpoint(model_file, comm.world_size(), &layout_from_file);
    config = layout_from_file.config;
  } else {
    config = config_from_name(opt.model);
  }
  const int B = opt.batch_size, T = opt.seq_len, accum = opt.grad_accum_steps(comm.world_size());
  cudaStream_t compute_stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&compute_stream));
  GPT2 model(config, comm.world_size(), B, T, accum, compute_stream);
  if (host_params.empty()) host_params = init_gpt2_params(model.layout(), opt.seed);
  model.upload_params(host_params);

  OptimizerSettings settings;
  settings.weight_decay = float(opt.weight_decay);
  settings.grad_clip = float(opt.grad_clip);
  settings.overlap = parse_overlap_mode(opt.overlap);
  Tracer tracer(!opt.trace_dir.empty(), comm.rank());
  ZeroOptimizer optimizer(model, comm, settings, &tracer);
  optimizer.init_master(host_params);

  DataLoaderConfig train_config;
  train_config.pattern = opt.train_data;
  train_config.batch_size = B;
  train_config.seq_len = T;
  train_config.rank = comm.rank();
  train_config.world_size = comm.world_size();
  train_config.vocab_size = config.vocab_size;
  train_config.shuffle = opt.shuffle;
  train_config.seed = opt.seed;
  train_config.prefetch = true;
  DataLoader train_loader(train_config);
  std::unique_ptr<ValLoader> val_loader;
  if (opt.val_tokens > 0) {
    ValLoaderConfig val_config;
    val_config.pattern = opt.val_data;
    val_config.batch_size = B;
    val_config.seq_len = T;
    val_config.rank = comm.rank();
    val_config.world_size = comm.world_size();
    val_config.vocab_size = config.vocab_size;
    val_config.val_tokens = opt.val_tokens;
    val_loader = std::make_unique<ValLoader>(val_config);
  }

  int start_step = 0;
  double train_time_ms = 0.0;
  if (!resume_prefix.empty()) {
    const std::string state_path = checkpoint_state_path(resume_prefix, comm.rank());
    // A checkpoint of another world size has more or fewer state files: say so on whichever rank notices
    // first, rather than "cannot open" on one rank and a world-size mismatch on another.
    const std::string ranks_hint = " than this run's " + std::to_string(comm.world_size()) +
                                   " (resharding is not supported: resume with the same number of ranks)";
    if (!is_regular_file(state_path))
      throw std::runtime_error(state_path + ": missing: the checkpoint was written by fewer ranks" + ranks_hint);
    if (is_regular_file(checkpoint_state_path(resume_prefix, comm.world_size())))
      throw std::runtime_error(checkpoint_state_path(resume_prefix, comm.world_size()) +
                               " exists: the checkpoint was written by more ranks" + ranks_hint);
    TrainState state = read_train_state(state_path);
    if (state.world_size != comm.world_size())
      throw std::runtime_error(state_path + ": checkpoint was written by " + std::to_string(state.world_size) +
                               " ranks, this run has " + std::to_string(comm.world_size()) +
                               " (resharding is not supported: resume with the same number of ranks)");
    if (describe_config(state.config) != describe_config(config))
      throw std::runtime_error(state_path + ": optimizer state is for " + describe_config(state.config) +
                               ", the model file is " + describe_config(config));
    optimizer.upload_state(state.master, state.adam_m, state.adam_v);
    train_loader.seek(state.train_position);
    start_step = int(state.step);
    train_time_ms = state.train_time_ms;
  }

  // ---- the header of the log: everything needed to reproduce the run ----
  const RunInfo run_info = collect_run_info();
  log.line("# train_gpt2 " + run_info.git_commit + " precision:" + kPrecisionName + " ranks:" +
           std::to_string(comm.world_size()));
  log.line("# device: " + run_info.device_name + " driver:" + run_info.driver_version + " runtime:" +
           run_info.runtime_version);
  log.line("# model: " + describe_config(config) + " parameters:" + std::to_string(model.layout().num_parameters) +
           (model_file.empty() ? " init seed " + std::to_string(opt.seed) : " from " + model_file));
  for (size_t begin = 0, end; begin < options_text.size(); begin = end + 1) {
    end = options_text.find('\n', begin);
    if (end == std::string::npos) end = options_text.size();
    if (end > begin) log.line("# option " + options_text.substr(begin, end - begin));
  }
  log.line("# batch: B=" + std::to_string(B) + " T=" + std::to_string(T) + " grad_accum=" + std::to_string(accum) +
           " tokens/step=" + std::to_string(int64_t(B) * T * accum * comm.world_size()) +
           " activations:" + std::to_string(model.activation_bytes() >> 20) + "MiB optimizer_state/rank:" +
           std::to_string(optimizer.state_bytes()) + "B overlap:" + opt.overlap);
  if (!resume_prefix.empty()) log.line("# resumed from " + resume_prefix + " at step " + std::to_string(start_step));

  const LrSchedule schedule{opt.lr, opt.warmup_steps, opt.steps, opt.final_lr_frac, parse_lr_decay(opt.lr_schedule)};
  const double tokens_per_step = double(B) * T * accum * comm.world_size();
  const double flops_per_token = training_flops_per_token(int64_t(model.layout().num_parameters), config.num_layers,
                                                           config.channels, T);
  const std::optional<double> peak = kModelFileDtype == CheckpointDtype::bf16 ? bf16_peak_flops(run_info.device_name)
                                                                               : std::nullopt;
  std::vector<int> inputs(size_t(B) * T), targets(size_t(B) * T);
  std::string last_checkpoint = resume_prefix;
  if (!opt.dump_dir.empty() && writer) {
    make_directory(opt.dump_dir);
    const std::vector<float> params = model.download_params();  // exactly what the model computes with
    write_checkpoint(opt.dump_dir + "/model.bin", model.layout(), params.data(), CheckpointDtype::fp32);
  }

  for (int step = start_step + 1; step <= opt.steps; step++) {
    const Clock::time_point step_start = Clock::now();
    const float lr = float(schedule.at(step - 1));
    const float dloss = 1.0f / float(int64_t(B) * T * accum);
    for (int micro = 0; micro < accum; micro++) {
      const bool last_micro = micro == accum - 1;
      train_loader.next_batch(inputs.data(), targets.data());
      const Tracer::SliceId forward_slice =
          tracer.begin(compute_stream, TraceTrack::kCompute, "forward", {{"micro_step", micro}});
      model.forward(inputs.data(), targets.data(), micro, /*compute_dlogits=*/true, dloss, optimizer.before_bucket_use());
      tracer.end(forward_slice, compute_stream);
      if (last_micro) optimizer.begin_step(step, lr);
      BackwardTracing backward_tracing(tracer, compute_stream, model.layout(),
                                       last_micro ? optimizer.on_bucket_ready() : BucketHook());
      model.backward(inputs.data(), micro == 0, backward_tracing.hook());
    }
    optimizer.finish_step();
    double loss = comm.all_reduce_mean(model.mean_loss(accum));
    const float grad_norm = optimizer.last_grad_norm();
    const double step_ms = elapsed_ms(step_start);
    train_time_ms += step_ms;
    if (step == opt.debug_nan_at_step) loss = std::nan("");
    if (!std::isfinite(loss)) {
      log.line("error: step " + std::to_string(step) + ": the loss is " + std::to_string(loss) +
               "; stopping. Last good checkpoint: " + (last_checkpoint.empty() ? "none" : last_checkpoint));
      return 1;
    }
    if (step == 1 && !opt.dump_dir.empty() && writer)
      dump_step(opt.dump_dir, inputs, targets, loss, model.download_grads(), model);

    TrainStepRecord record;
    record.step = step;
    record.total_steps = opt.steps;
    record.loss = loss;
    record.train_time_ms = train_time_ms;
    record.step_avg_ms = train_time_ms / step;
    record.tokens_per_second = tokens_per_step / (step_ms / 1000.0);
    record.mfu = format_mfu(flops_per_token * record.tokens_per_second / comm.world_size(), peak);
    record.lr = lr;
    record.grad_norm = grad_norm;
    record.eta_seconds = (opt.steps - step) * record.step_avg_ms / 1000.0;
    std::string line = format_train_line(record);
    if (tracer.enabled()) {
      const OverlapFigures overlap = tracer.flush_step();
      char figures[128];
      std::snprintf(figures, sizeof figures, " comm:%.2fms exposed_comm:%.2fms overlapped:%.1f%%", overlap.comm_us / 1000,
                    overlap.exposed_comm_us / 1000, 100.0 * overlap.overlapped_fraction);
      line += figures;
    }
    log.line(line);

    const bool last_step = step == opt.steps;
    if (val_loader && ((opt.val_every > 0 && step % opt.val_every == 0) || last_step)) {
      const double val_loss = evaluate(model, optimizer, *val_loader, comm, inputs, targets);
      log.line(format_val_line(step, opt.steps, val_loss, train_time_ms, train_time_ms / step));
    }
    if (!opt.output_dir.empty() && ((opt.checkpoint_every > 0 && step % opt.checkpoint_every == 0) || last_step)) {
      TrainState state;
      state.step = step;
      state.rank = comm.rank();
      state.world_size = comm.world_size();
      state.config = config;
      state.train_position = train_loader.position();
      state.train_time_ms = train_time_ms;
      last_checkpoint = checkpoint_prefix(opt.output_dir, step);
      save_checkpoint(last_checkpoint, model, optimizer, comm, state);
      log.line("# checkpoint " + last_checkpoint);
    }
  }
  if (!opt.trace_dir.empty()) {
    if (writer) make_directory(opt.trace_dir);
    comm.barrier();
    tracer.write(opt.trace_dir + "/trace_rank" + std::to_string(comm.rank()) + ".json");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"train_gpt2: train GPT-2 on token shards (data-parallel under mpirun, ZeRO-1 AdamW)"};
  TrainOptions options;
  add_train_options(app, options);
  CLI11_PARSE(app, argc, argv);
  int status = 1;
  try {
    // Inside the try: a failure while setting up MPI, the GPU or NCCL (no GPU, say) is one clear line too.
    CommContext comm;
    status = train(options, app.config_to_str(/*default_also=*/true, /*write_description=*/false), comm);
  } catch (const std::exception& error) {
    abort_all_ranks(error.what());
  }
  return status;
}
