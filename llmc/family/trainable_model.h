// What the training loop and the optimizer need from a model of any family (GPT-2: llmc/model/gpt2/gpt2.h;
// the #44 speedrun model: llmc/model/modded44/speedrun_model.h): parameters and gradients in one bucketed
// buffer each (ParamLayout), and forward and backward passes that call a hook per bucket, so that the
// optimizer can start each bucket's communication the moment its gradients are final and the next forward
// waits per bucket. FamilyModel adds what only the family knows of its model (its model file, FLOPs,
// decoder, attention windows), which the trainer asks for. The trainer sees only these two;
// layers and kernels stay inside the family.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/base/atomic_file.h"
#include "llmc/checkpoint/state_file.h"
#include "llmc/family/decoder.h"
#include "llmc/kernels/gemm_plan_cache.h"
#include "llmc/kernels/mtp_loss_weights.h"
#include "llmc/family/param_layout.h"
#include "llmc/family/table_rows.h"
#include "llmc/cuda/precision.h"

namespace llmc {

// Called with a bucket index. Forward: before the first kernel that reads the bucket's parameters
// (so the caller can make the compute stream wait for that bucket's all-gather). Backward: right
// after the last kernel that writes the bucket's gradients or reads its parameters has been enqueued.
using BucketHook = std::function<void(int bucket)>;

// A tensor the model keeps in fp32 beside its floatX slots in the parameter buffer (the speedrun model's
// scalars, fp32 in the record): `count` values from layout offset `offset`. Empty: none.
struct Fp32Params {
  float* values = nullptr;  // device
  size_t offset = 0, count = 0;
  bool empty() const { return count == 0; }
};

class TrainableModel {
 public:
  virtual ~TrainableModel() = default;

  // The buffers (layout order). The backward makes buckets final in decreasing index order.
  virtual const ParamLayout& layout() const = 0;
  virtual floatX* params() = 0;
  virtual floatX* grads() = 0;
  virtual cudaStream_t stream() const = 0;  // the compute stream every pass is enqueued on
  // What the backward computes just before `bucket` is final ("layer 3"), for traces.
  virtual std::string bucket_name(int bucket) const = 0;
  // Device bytes of everything but the parameter and gradient buffers (activations, workspaces).
  virtual size_t activation_bytes() const = 0;
  // How the GEMMs choose their algorithm (llmc/kernels/matmul.cuh); set before the first pass.
  virtual void set_gemm_algo_selection(GemmAlgoSelection selection) = 0;

  // Forward over one micro-batch (host token arrays). With targets, the per-position losses go to loss
  // slot `loss_slot`; with compute_dlogits the backward's starting gradient is prepared, scaled by dloss
  // (1 / (tokens per step) for a mean). Asynchronous on stream(). The two calls it makes can be made apart
  // (a CUDA graph of a step: docs/emulation.md).
  void forward(const int* inputs_host, const int* targets_host, int loss_slot, bool compute_dlogits, float dloss,
               const BucketHook& before_bucket_use = nullptr) {
    upload_batch(inputs_host, targets_host, /*training=*/compute_dlogits);
    forward_uploaded(loss_slot, compute_dlogits, dloss, before_bucket_use);
  }
  // The host's part of a forward: checks the micro-batch's tokens (and targets unless null) and enqueues their
  // copies to the device on stream(), with what the passes derive from them on the host (document bounds; with
  // `training` the embedding backward's plans). It may wait for the previous upload's copies: never call it
  // inside a stream capture.
  virtual void upload_batch(const int* inputs_host, const int* targets_host, bool training) = 0;
  // The device's part: the forward over the last uploaded batch (losses only if it had targets; compute_dlogits
  // only after a training upload). In the speedrun families it enqueues kernels and device-side work alone, the
  // same calls for every batch of one shape: captured once, it replays each later upload's batch.
  virtual void forward_uploaded(int loss_slot, bool compute_dlogits, float dloss,
                                const BucketHook& before_bucket_use = nullptr) = 0;
  // Backward of the last forward, which must have computed dlogits. With first_micro_step the step's
  // gradients start here: the model overwrites them (each bucket's first writer stores instead of adding)
  // or zeroes them first; otherwise gradients accumulate. on_bucket_ready is called as each bucket becomes
  // final. The model keeps what it needs of the forward's tokens.
  virtual void backward(bool first_micro_step, const BucketHook& on_bucket_ready = nullptr) = 0;
  // Enqueues the mean of the losses in slots [0, num_slots) into result `result` (0 or 1), which
  // read_mean_loss(result) returns once the stream has reached it (waiting for that point only). Two
  // results let a trainer read step s's loss after enqueuing step s + 1, so the device never idles.
  virtual void enqueue_mean_loss(int num_slots, int result) = 0;
  virtual double read_mean_loss(int result) = 0;
  // Both at once (waits for the stream).
  double mean_loss(int num_slots) {
    enqueue_mean_loss(num_slots, 0);
    return read_mean_loss(0);
  }
  // Host <-> device copies of the whole buffers (layout order, as float). Synchronous.
  virtual void upload_params(const std::vector<float>& host_params) = 0;
  virtual std::vector<float> download_params() const = 0;
  virtual std::vector<float> download_grads() const = 0;
  // The fp32 parameters, for an optimizer that updates them in fp32 (the speedrun optimizer, which requires
  // them). By default the
  // forward widens such a tensor from its floatX slots each time; once taken, it reads the fp32 values as
  // they are, the taker writes them (and keeps the floatX slots a rounded copy), and download_params()
  // returns them exactly. upload_params() sets them either way. Empty where the model has none.
  virtual Fp32Params take_fp32_params() { return {}; }
  // The tensors whose gradients are row-sparse (the embedding tables, the 2026-07-17 model's bigram table: only
  // the rows the step's tokens select get one), each with the rows the micro-batches of the last backward's step
  // touched, sorted and distinct: every other row's gradient in grads() is exactly zero. Valid from the hook that
  // reports the tensor's bucket final until the next step's first backward. Empty: the model has none. Such a
  // model zeroes only the rows that may be nonzero before a step's backward writes them: who writes other rows
  // of grads() says so (grad_rows_written).
  virtual const std::vector<RowSparseGrad>& row_sparse_grads() const { return no_row_sparse_grads(); }
  // Rows of row-sparse tensor `tensor` in grads() written outside the backward (an optimizer adding a saved
  // step's gradients; sorted, distinct), or every row: the next backward zeroes them with its own.
  virtual void grad_rows_written(int /*tensor*/, const std::vector<int>& /*rows*/) {}
  virtual void all_grad_rows_written(int /*tensor*/) {}
  // Step `step` (0-based) is about to be enqueued (enqueue_train_step calls it first); from step 1 on the
  // parameters carry step - 1's update. For state derived from the parameters (the 2026-07-17 model's FP8
  // weight copies); most models keep none.
  virtual void before_step(int /*step*/) {}
  // CUDA graphs of whole steps (llmc/train/step_graphs.h): the host state the launches of the next forward_uploaded
  // and backward depend on besides the uploaded batch (lengths, windows, loss weights, scales, buffers that may be
  // reallocated, pending weight refreshes), as text: steps of one shape replay one graph. Empty: this model's
  // passes cannot be captured.
  virtual std::string step_shape() const { return ""; }
  // What a training micro-step's forward_uploaded and backward change of that host state, for one replayed from a
  // graph (which runs no host code): the 2026-07-17 model's FP8 weight copies are fresh afterwards.
  virtual void replayed_micro_step() {}
};

// A family's device model as the trainer holds it (ModelFamily::build).
class FamilyModel : public TrainableModel {
 public:
  // The family's model file of `params` (layout order) at `path`, atomically: fp32 with `fp32` or in the
  // fp32 build, else the family's 16-bit format. Returns its size and checksum, for the manifest.
  virtual WrittenFile write_model_file(const std::string& path, const std::vector<float>& params, bool fp32) const = 0;
  // Training FLOPs per token at sequences of seq_len tokens, for the MFU figure.
  virtual double flops_per_token(int seq_len) const = 0;
  // A KV-cache decoder over this model's live parameter buffer (the trainer's samples), with activations for
  // chunks of at most max_chunk tokens. Throws std::invalid_argument naming --sample-every without one.
  virtual std::unique_ptr<CausalDecoder> make_decoder(int max_chunk) = 0;
  // The attention windows, in blocks (with apply_yarn a change of the long window applies YaRN); returns the
  // attention scale in force. Throws std::invalid_argument naming --window-schedule for a model without
  // windows.
  virtual double set_attention_windows(int short_blocks, int long_blocks, bool apply_yarn) = 0;
  // Undoes every YaRN update: the RoPE tables and attention scale the model was built with (the untimed
  // warm-up's restore; a model without RoPE has nothing to undo).
  virtual void reset_yarn() = 0;
  // The training objective's weights of its multi-token and prefix terms, from the next forward on. Throws
  // std::invalid_argument naming --loss-schedule for a model whose loss is the next token's alone.
  virtual void set_loss_weights(const MtpLossWeights& weights) = 0;
  // The tokens of each following step's sequences, at most the build's seq_len; between steps. Throws
  // std::invalid_argument naming --batch-schedule and --val-seq-len for a model whose steps keep one length.
  virtual void set_seq_len(int seq_len) = 0;
  // Whether sequence_losses takes sequences longer than the buffers (the 2026-07-17 model: the record validates
  // 262,144 contiguous tokens per rank as one sequence).
  virtual bool evaluates_long_sequences() const { return false; }
  // The validation loss of each of `length` positions of one contiguous sequence (host tokens and targets),
  // evaluated as one forward over all of it would, though longer than seq_len: in forwards that carry the
  // context a row reads of the rows before it. Synchronous. Throws std::logic_error where unsupported.
  virtual std::vector<float> sequence_losses(const int* /*inputs_host*/, const int* /*targets_host*/,
                                             int /*length*/) {
    throw std::logic_error("this model evaluates only sequences that fit its buffers");
  }
  // The rows sequence_losses carries from one forward to the next with a long attention window of long_blocks
  // blocks (0: the windows in force); seq_len must be at least twice it. 0 where unsupported.
  virtual int long_sequence_context(int /*long_blocks*/) const { return 0; }
  // State of the model's own that a resumed run needs to continue bit for bit (names start with
  // kModelStatePrefix; most models keep none), saved with each rank's optimizer state; restore takes the
  // arrays save wrote (this rank's, or another rank's when the number of ranks changed).
  virtual std::vector<NamedStateArray> save_model_state() const { return {}; }
  virtual void restore_model_state(const std::vector<NamedStateArray>& /*arrays*/) {}
};

}  // namespace llmc
