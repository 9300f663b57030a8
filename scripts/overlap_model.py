#!/usr/bin/env python3
"""Predicts the exposed communication per optimizer step of train_gpt2's ZeRO-1 data parallelism on
8xH100 (NVLink/NVSwitch, NCCL ring collectives) for each --overlap mode, from per-layer backward times
and the bucket sizes. The per-layer times come from a 1-GPU Chrome trace (train_gpt2 --trace: the
compute-track slices "backward layer N", "backward embeddings", "backward lm_head+final_norm" and
"forward") or are derived from FLOPs (--synthetic). The result is a model, not a measurement.

The written model of the machine (every number is a parameter; defaults and their sources):
  * Ring reduce-scatter / all-gather of a bucket of S bytes over n GPUs takes
        t(S) = latency + S * (n-1)/n / peak_busbw,
    i.e. bus bandwidth busbw(S) = S*(n-1)/n / t(S), rising with the message size as nccl-tests show.
    peak_busbw = 370 GB/s: NCCL's effective NVLink4 bandwidth after protocol overhead, "which you can
      observe as BusBw when running non-allreduce operations" (S. Jeaugey, NVIDIA, in
      https://github.com/NVIDIA/nccl-tests/issues/212; line rate 450 GB/s per direction).
    latency = 60 us: fitted so that t(128 MiB) matches the 8xH100 ring reduce_scatter_perf figure of
      https://github.com/NVIDIA/nccl/issues/1047 (134217728 B, fp32: 377.2 us, busbw 311.3 GB/s); the
      same issue's larger sizes follow the formula within 4% (256 MiB: 331 GB/s measured, 338 model;
      1 GiB: 349 measured, 361 model). Published 8xH100 figures: ~310-360 GB/s for large messages, less for ~10 MB.
      Smaller messages (our 14 MB layer buckets) are an extrapolation of this fit: ~133 GB/s.
  * The shard update (AdamW, memory-bound) reads bf16 param + grad and fp32 master, m, v and writes
    bf16 param and fp32 master, m, v: 30 bytes per element at 3.35 TB/s (H100 SXM HBM3), on the comm
    stream; its slowdown of compute (NCCL/optimizer kernels take SMs) is not modelled.
  * Collectives and updates run in order on one comm stream, as in llmc/optim/zero.cu: `none` after the
    backward; `rs` reduce-scatters as buckets become ready, updates + all-gathers after the backward;
    `full` reduce-scatter, update and all-gather of each bucket as soon as it is ready.
  * The next forward waits per bucket: embeddings before the first layer (they are first in the
    forward and last in the backward), layer l before layer l, the final norm before the LM head.
Exposed communication = the time the compute stream waits, i.e. (end of the next forward with comm)
minus (end of it without comm). Total communication = the summed reduce-scatter and all-gather times.

usage: overlap_model.py --synthetic d12 [-B 64] [-T 1024] [--tflops 374]
       overlap_model.py --trace trace_rank0.json --model d12
"""
import argparse
import json
import sys

# Defaults of the machine model (see the docstring for the sources).
PEAK_BUSBW = 370e9       # bytes/s
RING_LATENCY = 60e-6     # s
HBM_BANDWIDTH = 3.35e12  # bytes/s
ADAMW_BYTES_PER_ELEMENT = 2 + 2 + 4 + 4 + 4 + 2 + 4 + 4 + 4
# llm.c: GPT-2 124M on 8xH100, ~140 ms per step of 524,288 tokens = 65,536 tokens per GPU at
# ~0.80 GFLOP per token (6N + 6LCT at T = 1024): ~374 TFLOP/s achieved per GPU (38% of the 989 TFLOP/s bf16 peak).
ACHIEVED_FLOPS = 65536 * 0.80e9 / 0.140


def model_shape(name):
    """(layers, channels, padded vocab, max positions) of a dN model as train_gpt2 builds it."""
    if not (name.startswith("d") and name[1:].isdigit()):
        raise SystemExit(f"overlap_model.py: unknown model '{name}' (expected dN, e.g. d12)")
    depth = int(name[1:])
    return depth, 64 * depth, 50304, 1024


def bucket_elements(layers, channels, padded_vocab, max_positions):
    """Parameters per bucket in train_gpt2's order: 0 = embeddings (wte, wpe), 1..L = layers, L+1 = final LN."""
    C = channels
    per_layer = 12 * C * C + 13 * C  # qkv 3C^2+3C, attproj C^2+C, fc 4C^2+4C, fcproj 4C^2+C, two LNs 4C
    return [padded_vocab * C + max_positions * C] + [per_layer] * layers + [2 * C]


def ring_time(num_bytes, ranks, peak_busbw, latency):
    return latency + num_bytes * (ranks - 1) / ranks / peak_busbw


def synthetic_times(layers, channels, padded_vocab, batch, seq_len, flops_per_second):
    """Backward and forward seconds per bucket from FLOPs: a layer's forward is 2 FLOPs per weight per
    token plus 2*C*T for attention; its backward twice that; the tied LM head likewise with V*C."""
    tokens = batch * seq_len
    C = channels
    layer_forward = tokens * (2 * 12 * C * C + 2 * C * seq_len) / flops_per_second
    head_forward = tokens * 2 * padded_vocab * C / flops_per_second
    backward = {"final": 2 * head_forward, "embeddings": 0.0, "layers": [2 * layer_forward] * layers}
    forward = {"embeddings": 0.0, "layers": [layer_forward] * layers, "final": head_forward}
    return backward, forward


def trace_times(path, layers):
    """Mean per-bucket backward and forward seconds over the steps of a train_gpt2 trace (skipping the
    first step, which warms up); the forward is split over the buckets in the backward's proportions."""
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("tid") == 1]
    steps = sorted({e["args"]["step"] for e in events})
    if len(steps) > 1:
        steps = steps[1:]
    chosen = [e for e in events if e["args"]["step"] in steps]

    def mean(name):
        durations = [e["dur"] for e in chosen if e["name"] == name]
        if not durations:
            raise SystemExit(f"overlap_model.py: {path} has no compute slice '{name}' (a train_gpt2 --trace file?)")
        return sum(durations) / len(durations) * 1e-6

    backward = {"final": mean("backward lm_head+final_norm"), "embeddings": mean("backward embeddings"),
                "layers": [mean(f"backward layer {l}") for l in range(layers)]}
    backward_total = backward["final"] + backward["embeddings"] + sum(backward["layers"])
    scale = mean("forward") / backward_total
    forward = {"embeddings": backward["embeddings"] * scale, "final": backward["final"] * scale,
               "layers": [t * scale for t in backward["layers"]]}
    return backward, forward


def simulate(mode, backward, forward, sizes_bytes, elements, ranks, peak_busbw, latency):
    """Timeline of one step's backward, the comm stream, and the next forward. Returns a dict."""
    layers = len(backward["layers"])
    final_bucket = layers + 1
    # When each bucket's gradients are final (time 0 = start of the backward), in ready order.
    ready, t = [], backward["final"]
    ready.append((final_bucket, t))
    for layer in reversed(range(layers)):
        t += backward["layers"][layer]
        ready.append((layer + 1, t))
    t += backward["embeddings"]
    ready.append((0, t))
    backward_end = t

    def collective(bucket):
        return ring_time(sizes_bytes[bucket], ranks, peak_busbw, latency)

    def update(bucket):
        return elements[bucket] / ranks * ADAMW_BYTES_PER_ELEMENT / HBM_BANDWIDTH

    comm_free, param_ready, total_comm = 0.0, {}, 0.0
    if mode == "none":
        comm_free = backward_end
        for bucket, _ in ready:
            comm_free += collective(bucket)
            total_comm += collective(bucket)
        for bucket, _ in ready:
            comm_free += update(bucket) + collective(bucket)
            total_comm += collective(bucket)
            param_ready[bucket] = comm_free
    elif mode == "rs":
        for bucket, when in ready:
            comm_free = max(comm_free, when) + collective(bucket)
            total_comm += collective(bucket)
        for bucket, _ in ready:
            comm_free += update(bucket) + collective(bucket)
            total_comm += collective(bucket)
            param_ready[bucket] = comm_free
    elif mode == "full":
        for bucket, when in ready:
            comm_free = max(comm_free, when) + collective(bucket) + update(bucket) + collective(bucket)
            total_comm += 2 * collective(bucket)
            param_ready[bucket] = comm_free
    else:
        raise ValueError(mode)

    # The next forward: embeddings, layers 0..L-1, final norm + LM head, each after its bucket.
    order = [(0, forward["embeddings"])] + [(l + 1, forward["layers"][l]) for l in range(layers)] + \
            [(final_bucket, forward["final"])]
    t = backward_end
    for bucket, duration in order:
        t = max(t, param_ready[bucket]) + duration
    forward_end_without_comm = backward_end + sum(d for _, d in order)
    exposed = t - forward_end_without_comm
    embedding_chain = 2 * collective(0) + update(0)
    return {"mode": mode, "comm": total_comm, "exposed": exposed, "compute": forward_end_without_comm,
            "embedding_chain": embedding_chain}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", help="a 1-GPU train_gpt2 Chrome trace (trace_rank0.json)")
    source.add_argument("--synthetic", metavar="MODEL", help="times from FLOPs for a dN model, e.g. d12")
    parser.add_argument("--model", default="d12", help="dN shape for the bucket sizes with --trace (default d12)")
    parser.add_argument("-B", type=int, default=64, help="--synthetic: sequences per GPU per step (default 64)")
    parser.add_argument("-T", type=int, default=1024, help="--synthetic: sequence length (default 1024)")
    parser.add_argument("--tflops", type=float, default=ACHIEVED_FLOPS / 1e12,
                        help="--synthetic: achieved TFLOP/s per GPU (default %(default).0f, llm.c's 8xH100 rate)")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--busbw", type=float, default=PEAK_BUSBW / 1e9, help="peak ring bus bandwidth, GB/s")
    parser.add_argument("--latency-us", type=float, default=RING_LATENCY * 1e6, help="per-collective latency")
    parser.add_argument("--bytes-per-element", type=int, default=2, help="gradient/parameter bytes (bf16: 2)")
    args = parser.parse_args(argv)

    shape_name = args.synthetic or args.model
    layers, channels, padded_vocab, positions = model_shape(shape_name)
    elements = bucket_elements(layers, channels, padded_vocab, positions)
    sizes = [e * args.bytes_per_element for e in elements]
    if args.synthetic:
        backward, forward = synthetic_times(layers, channels, padded_vocab, args.B, args.T, args.tflops * 1e12)
        source = f"synthetic: FLOPs of {shape_name}, B={args.B} T={args.T}, at {args.tflops:.0f} TFLOP/s"
    else:
        backward, forward = trace_times(args.trace, layers)
        source = f"per-layer times from {args.trace}"

    peak, latency = args.busbw * 1e9, args.latency_us * 1e-6
    print(f"# overlap model: {args.ranks} GPUs, ring busbw(S) = S*(n-1)/n / ({args.latency_us:.0f} us + "
          f"S*(n-1)/n / {args.busbw:.0f} GB/s); {source}")
    layer_bytes = sizes[1]
    print(f"# buckets: embeddings {sizes[0] / 1e6:.1f} MB, {layers} layers x {layer_bytes / 1e6:.1f} MB, "
          f"final LN {sizes[-1] / 1e3:.1f} kB; one layer's reduce-scatter {ring_time(layer_bytes, args.ranks, peak, latency) * 1e6:.0f} us "
          f"(busbw {layer_bytes * (args.ranks - 1) / args.ranks / ring_time(layer_bytes, args.ranks, peak, latency) / 1e9:.0f} GB/s), "
          f"the embeddings' {ring_time(sizes[0], args.ranks, peak, latency) * 1e6:.0f} us")
    backward_total = backward["final"] + backward["embeddings"] + sum(backward["layers"])
    print(f"# backward {backward_total * 1e3:.2f} ms (a layer {backward['layers'][0] * 1e3:.3f} ms), "
          f"forward {(forward['final'] + forward['embeddings'] + sum(forward['layers'])) * 1e3:.2f} ms")
    print(f"{'mode':<6} {'comm_ms':>9} {'exposed_ms':>11} {'exposed/comm':>13} {'step_ms':>9}")
    results = [simulate(mode, backward, forward, sizes, elements, args.ranks, peak, latency)
               for mode in ("none", "rs", "full")]
    for r in results:
        print(f"{r['mode']:<6} {r['comm'] * 1e3:>9.3f} {r['exposed'] * 1e3:>11.3f} "
              f"{100 * r['exposed'] / r['comm']:>12.1f}% {(r['compute'] + r['exposed']) * 1e3:>9.2f}")
    full = results[-1]
    print(f"# full: the embedding bucket's reduce-scatter + update + all-gather is {full['embedding_chain'] * 1e3:.3f} ms "
          f"of the {full['exposed'] * 1e3:.3f} ms exposed; goal exposed < 10% of comm: "
          f"{'met' if full['exposed'] < 0.1 * full['comm'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
