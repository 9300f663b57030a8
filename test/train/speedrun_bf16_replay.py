#!/usr/bin/env python3
"""The record's bf16 arithmetic beside this build's, on the first step of speedrun_agreement_probe.

Runs the probe with --dump for each batch seed, then replays that step in PyTorch on the CPU: the 2025-10-31
model (docs/recipes.md) written here from the record's code idioms, once in float64 (the oracle; it must
agree with the C++ double-precision model's loss and gradients) and once with the record's dtypes and
rounding points in eager mode ("record"): bf16 embeddings, gates and head, fp32 block matrices cast to bf16
at each GEMM (fp32 accumulation), fp32 scalars, every elementwise op of bf16 tensors rounded to bf16, norms
computed in fp32 with a bf16 result, RoPE in fp32 on bf16 tables, attention probabilities rounded to bf16
before P V (as FlashAttention does), bf16 logits soft-capped in bf16. Prints per seed the step-1 loss error
per token and the gradients' errors against float64, for the record's arithmetic and for this build.

Needs torch and numpy (`pip install torch numpy`); a probe, not a test (docs/speedrun_model.md).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reference"))
from check_speedrun_jax import window_masks  # noqa: E402  the (short, long) document-causal window masks

FLT_EPSILON = float(np.finfo(np.float32).eps)  # rms_norm's eps=None for bf16/fp32 inputs
ATTENTION_BLOCKS = [1, 2, 3, 4, 5, 6, 8, 9, 10, 11]
VALUE_EMBED_OF_BLOCK = {1: 1, 2: 2, 9: 0, 10: 1, 11: 2}
LONG_WINDOW_BLOCKS = {4, 11}
SKIP_PUSH_BLOCKS = [1, 2, 3, 4, 5]
SKIP_POP_BLOCKS = [6, 7, 8, 9, 10]
BACKOUT_BLOCK = 8
BF16_TENSORS = ("embed", "ve0", "ve1", "ve2", "smear_gate", "head")  # and every attn_gate: the record's bf16 ones


class Arithmetic:
    """float64 everywhere, or the record's: `act` is the activations' dtype, `param_dtype(name)` a parameter's."""

    def __init__(self, record):
        self.record = record
        self.act = torch.bfloat16 if record else torch.float64

    def param_dtype(self, name):
        if not self.record:
            return torch.float64
        return torch.bfloat16 if name in BF16_TENSORS or name.endswith(".attn_gate") else torch.float32

    def linear(self, x, w):  # F.linear(x, w.type_as(x)): bf16 operands, fp32 accumulation, bf16 result
        return torch.nn.functional.linear(x, w.to(x.dtype))

    def norm(self, x):  # computed in fp32 (float64 for the oracle), result in the activations' dtype
        wide = x.to(torch.float32 if self.record else torch.float64)
        return (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + FLT_EPSILON)).to(x.dtype)

    def rotary(self, x, cos, sin):  # x (T, H, D); tables (T, D/2) in the record's bf16
        wide = x.to(torch.float32 if self.record else torch.float64)
        x1, x2 = wide.chunk(2, dim=-1)
        c, s = cos[:, None, :], sin[:, None, :]
        return torch.cat((x1 * c + x2 * s, x1 * (-s) + x2 * c), dim=-1).type_as(x)


def attention(a, p, i, x, ve, sa, rope, H, D):
    masks, cos, sin, attn_scale = rope
    T, C = x.shape
    qkvo = p[f"blocks.{i}.qkvo"].reshape(4 * C, C)  # W_q, W_k, W_v, W_o stacked (out, in)
    q, k, v = a.linear(x, qkvo[: 3 * C]).view(T, 3 * H, D).chunk(3, dim=-2)
    q, k = a.rotary(a.norm(q), cos, sin), a.rotary(a.norm(k), cos, sin)
    v = sa[0] * v + sa[1] * ve.view_as(v) if ve is not None else sa[0] * v
    wide = torch.float32 if a.record else torch.float64
    scores = torch.einsum("ihd,jhd->hij", q.to(wide), k.to(wide)) * attn_scale
    scores = scores.masked_fill(~masks[int(i in LONG_WINDOW_BLOCKS)][None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(a.act)  # P in bf16 before P V, as FlashAttention
    y = torch.einsum("hij,jhd->ihd", probs.to(wide), v.to(wide)).to(a.act)
    y = y * torch.sigmoid(a.linear(x[:, :12], p[f"blocks.{i}.attn_gate"])).view(T, H, 1)
    return a.linear(y.reshape(T, C), qkvo[3 * C:])


def mlp(a, p, i, x):
    h = torch.relu(a.linear(x, p[f"blocks.{i}.fc"].T)).square()
    return a.linear(h, p[f"blocks.{i}.proj"])


def model_loss(a, p, meta, tokens, targets, rope):
    """The SUM cross-entropy over the batch; the mean per-token loss in float64, of the logits and of the logits
    soft-capped in float64."""
    L, H, D = meta["config"]["L"], meta["config"]["H"], meta["config"]["D"]
    s = p["scalars"]
    e = p["embed"][tokens]
    ve = [p[f"ve{n}"][tokens] for n in range(3)]
    gate = torch.sigmoid(a.linear(e[1:, :12], p["smear_gate"]))
    x = torch.cat([e[:1], e[1:] + s[5 * L] * gate * e[:-1]])
    x = x0 = a.norm(x)
    stack, x_backout = [], None
    for i in range(1, L):
        if i in SKIP_POP_BLOCKS:
            x = x + torch.sigmoid(s[i - 6]) * stack.pop()
        x = s[L + 2 * i] * x + s[L + 2 * i + 1] * x0
        if i in ATTENTION_BLOCKS:
            ve_i = ve[VALUE_EMBED_OF_BLOCK[i]] if i in VALUE_EMBED_OF_BLOCK else None
            x = x + attention(a, p, i, a.norm(x), ve_i, (s[3 * L + 2 * i], s[3 * L + 2 * i + 1]), rope, H, D)
        x = x + mlp(a, p, i, a.norm(x))
        if i in SKIP_PUSH_BLOCKS:
            stack.append(x)
        if i == BACKOUT_BLOCK:
            x_backout = x
    x = a.norm(x - s[5 * L + 1] * x_backout)
    z = a.linear(x, p["head"])
    logits = 30 * torch.sigmoid(z / 7.5)
    # The record's loss is torch's cross-entropy of these logits; the per-token losses are read in float64
    # so that the comparison sees the forward's error, not the rounding of the loss value itself; and once
    # more with the soft-cap in fp32 (as this build's kernel), to show what rounding the logits costs.
    per_token = torch.nn.functional.cross_entropy(logits.double(), targets, reduction="none")
    capped_wide = 30 * torch.sigmoid(z.double() / 7.5)
    per_token_wide_cap = torch.nn.functional.cross_entropy(capped_wide, targets, reduction="none")
    loss = torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
    return loss, per_token.detach().mean().item(), per_token_wide_cap.detach().mean().item()


def load(directory):
    with open(os.path.join(directory, "meta.json")) as f:
        meta = json.load(f)

    def tensors(kind):
        data = np.fromfile(os.path.join(directory, f"{kind}.bin"), dtype=np.float64)
        out, pos = {}, 0
        for t in meta["tensors"]:
            n = int(np.prod(t["shape"]))
            out[t["name"]] = data[pos:pos + n].reshape(t["shape"])
            pos += n
        assert pos == data.size, f"{kind}.bin: {data.size} values, the tensor list has {pos}"
        return out

    return meta, tensors("params"), tensors("device_grads"), tensors("reference_grads")


def replay(meta, params, record):
    """(mean loss per token, the same with the soft-cap in float64, gradients of the SUM loss as float64
    arrays) in one arithmetic."""
    a = Arithmetic(record)
    p = {name: torch.tensor(v, dtype=a.param_dtype(name), requires_grad=True) for name, v in params.items()}
    T, half = meta["T"], meta["config"]["D"] // 2
    table = torch.bfloat16 if record else torch.float64  # the record's tables are bf16 (docs/recipes.md)
    cos = torch.tensor(meta["rope_cos"], dtype=torch.float64).view(T, half).to(table)
    sin = torch.tensor(meta["rope_sin"], dtype=torch.float64).view(T, half).to(table)
    masks = torch.from_numpy(window_masks(T, meta["cu_seqlens"], meta["window_short"], meta["window_long"]))
    rope = (masks, cos, sin, meta["attn_scale"])
    tokens, targets = torch.tensor(meta["tokens"]), torch.tensor(meta["targets"])
    loss, mean_loss, mean_loss_wide_cap = model_loss(a, p, meta, tokens, targets, rope)
    loss.backward()
    return mean_loss, mean_loss_wide_cap, {name: t.grad.double().numpy() for name, t in p.items()}


GROUPS = (("scalars", lambda n: n == "scalars"), ("tables", lambda n: n in ("embed", "ve0", "ve1", "ve2")),
          ("gates", lambda n: "gate" in n), ("block matrices", lambda n: n.startswith("blocks.") and "gate" not in n),
          ("head", lambda n: n == "head"))


def gradient_error(grads, oracle, select):
    """Largest |g - g64| over the group, relative to the group's largest |g64|."""
    names = [n for n in oracle if select(n)]
    scale = max(float(np.abs(oracle[n]).max()) for n in names)
    return max(float(np.abs(grads[n] - oracle[n]).max()) for n in names) / max(scale, 1e-300)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--probe", required=True, help="speedrun_agreement_probe_{bf16,fp32}_emu")
    parser.add_argument("--seeds", type=int, default=8, help="batch seeds 500, 501, ...")
    parser.add_argument("--heads", type=int, default=2, help="the probe's --heads (speedrun-tiny: 2)")
    parser.add_argument("--head-dim", type=int, default=16,
                        help="the probe's --head-dim (speedrun-tiny: 16; 128 runs the window attention kernel)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # deterministic CPU reductions
    rows, oracle_checks = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.seeds):
            case = os.path.join(tmp, str(n))
            subprocess.run([args.probe, "--steps", "4", "--micro-steps", "1", "--batch-seed", str(500 + n),
                            "--heads", str(args.heads), "--head-dim", str(args.head_dim), "--dump", case],
                           check=True, stdout=subprocess.DEVNULL)
            meta, params, device_grads, reference_grads = load(case)
            loss64, _, grads64 = replay(meta, params, record=False)
            loss_record, loss_record_wide_cap, grads_record = replay(meta, params, record=True)
            oracle_checks.append(max(abs(loss64 - meta["reference_loss"]) / loss64,
                                     max(gradient_error(reference_grads, grads64, s) for _, s in GROUPS)))
            rows.append((500 + n, loss_record - loss64, loss_record_wide_cap - loss64, meta["device_loss"] - loss64,
                         [(gradient_error(grads_record, grads64, s), gradient_error(device_grads, grads64, s))
                          for _, s in GROUPS]))
    c = meta["config"]
    print(f"# step 1 of speedrun_agreement_probe ({meta['precision']} build), speedrun-tiny H={c['H']} D={c['D']} "
          f"T={meta['T']}, {args.seeds} batches, "
          f"against float64 PyTorch; the C++ double model agrees with it to {max(oracle_checks):.1e}")
    print("| batch seed | loss/token: record | record, fp32 soft-cap | this build | " +
          " | ".join(f"d{name}: record | this build" for name, _ in GROUPS) + " |")
    print("|---" * (4 + 2 * len(GROUPS)) + "|")
    for seed, record, record_wide_cap, ours, errors in rows:
        print(f"| {seed} | {record:+.1e} | {record_wide_cap:+.1e} | {ours:+.1e} | " +
              " | ".join(f"{r:.1e} | {o:.1e}" for r, o in errors) + " |")
    rms = lambda values: float(np.sqrt(np.mean(np.square(values))))
    print(f"| RMS | " + " | ".join(f"{rms([r[k] for r in rows]):.1e}" for k in (1, 2, 3)) + " | " +
          " | ".join(f"{rms([r[4][g][0] for r in rows]):.1e} | {rms([r[4][g][1] for r in rows]):.1e}"
                     for g in range(len(GROUPS))) + " |")
    return 0 if max(oracle_checks) < 1e-9 else 1


if __name__ == "__main__":
    sys.exit(main())
