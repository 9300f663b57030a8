#!/usr/bin/env python3
"""The PyTorch GPT-2 baseline of scripts/bench_train.sh: the same model shape, batch and sequence length
as train_gpt2, trained the fast PyTorch way (torch.compile, bf16 autocast, fused scaled-dot-product
attention, fused AdamW) on random tokens. Prints one JSON line: ms/step, tokens/s, FLOPs per token and,
with --ceiling, the measured bf16 GEMM throughput of this GPU (the ceiling MFU is quoted against).
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, channels, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(channels)
        self.qkv = nn.Linear(channels, 3 * channels)
        self.attn_proj = nn.Linear(channels, channels)
        self.ln2 = nn.LayerNorm(channels)
        self.fc = nn.Linear(channels, 4 * channels)
        self.fc_proj = nn.Linear(4 * channels, channels)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # flash attention kernel on sm80+
        x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, layers, heads, channels, max_seq_len, padded_vocab):
        super().__init__()
        self.wte = nn.Embedding(padded_vocab, channels)
        self.wpe = nn.Embedding(max_seq_len, channels)
        self.blocks = nn.ModuleList(Block(channels, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(channels)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(T, device=tokens.device))
        for block in self.blocks:
            x = block(x)
        # Tied LM head, as GPT-2 and train_gpt2. The softmax runs over the 47 padding columns too (train_gpt2
        # masks them): a 0.1% difference in work, not worth a slice copy in the baseline.
        logits = self.ln_f(x) @ self.wte.weight.T
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def gemm_ceiling_tflops(n=8192, repeats=20):
    """bf16 GEMM throughput of this GPU, measured: the practical ceiling for MFU."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    torch.cuda.synchronize()
    return 2 * n ** 3 * repeats / (time.perf_counter() - start) / 1e12


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("-b", "--batch-size", type=int, default=16)
    parser.add_argument("-t", "--seq-len", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first (compilation, autotuning)")
    parser.add_argument("--ceiling", action="store_true", help="also measure the bf16 GEMM ceiling")
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    layers, channels, vocab, padded_vocab = args.layers, 64 * args.layers, 50257, 50304  # dN as train_gpt2
    model = GPT2(layers, layers, channels, 1024, padded_vocab).cuda()
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    compiled = torch.compile(model)
    B, T = args.batch_size, args.seq_len
    tokens = torch.randint(0, vocab, (B, T + 1), device="cuda")
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step():
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = compiled(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    torch.cuda.synchronize()
    ms_per_step = (time.perf_counter() - start) * 1000 / args.steps
    # Real parameters, as train_gpt2 counts them (the padded vocabulary rows of wte included).
    params = sum(p.numel() for p in model.parameters())
    result = {
        "ms_per_step": ms_per_step,
        "tokens_per_s": B * T / (ms_per_step / 1000),
        "flops_per_token": 6 * params + 6 * layers * channels * T,
        "loss": float(loss),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
    }
    if args.ceiling:
        result["ceiling_tflops"] = gemm_ceiling_tflops()
    if not math.isfinite(result["loss"]):
        raise SystemExit(f"bench_train_torch: the loss is {result['loss']}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
