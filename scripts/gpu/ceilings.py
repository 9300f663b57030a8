#!/usr/bin/env python3
"""The two ceilings of this GPU, measured (scripts/gpu/check.sh, stage "kernels"): the bf16 matrix rate
of a large cuBLAS product through PyTorch on random data, and the bandwidth of a large device-to-device
copy counting bytes read plus bytes written. Each is the median of timed repeats (CUDA events) after
warm-ups. Prints one JSON line: device, torch and CUDA versions, gemm_bf16_tflops, copy_gbps.
"""
import argparse
import json
import statistics

import torch


def median_ms(work, warmup, repeats):
    """Median milliseconds of one call of work(), each timed alone between two CUDA events."""
    for _ in range(warmup):
        work()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gemm-size", type=int, default=8192, help="n of the n x n x n bf16 product")
    parser.add_argument("--copy-mib", type=int, default=4096, help="MiB copied (several times the L2)")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()

    n = args.gemm_size
    # Random operands: zeros run faster than real data (seen on this workplace's H200).
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    gemm_ms = median_ms(lambda: torch.matmul(a, b), warmup=3, repeats=args.repeats)
    del a, b

    copy_bytes = args.copy_mib << 20
    source = torch.randint(0, 255, (copy_bytes,), device="cuda", dtype=torch.uint8)
    target = torch.empty_like(source)
    copy_ms = median_ms(lambda: target.copy_(source), warmup=2, repeats=args.repeats)

    print(json.dumps({
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gemm_n": n,
        "gemm_bf16_tflops": 2.0 * n ** 3 / (gemm_ms * 1e-3) / 1e12,
        "copy_bytes": copy_bytes,
        "copy_gbps": 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9,
    }))


if __name__ == "__main__":
    main()
