#!/usr/bin/env python3
"""Times PyTorch's CPU AdamW on --params fp32 parameters (default 1e8): the fused kernel
(torch.optim.AdamW(fused=True) on CPU tensors) and torch's default for CPU tensors (the for-loop
path), to compare with bench/cpu_adamw_bench on the same machine.

Bytes per parameter for torch: read grad, param, exp_avg, exp_avg_sq (4 x 4) and write param,
exp_avg, exp_avg_sq (3 x 4) = 28 bytes. The DRAM roofline fraction printed is
    fraction = 28 B/param x params/s / B_dram
with B_dram the attainable bandwidth, measured here as a STREAM triad (a = b + s*c, 12 bytes per
element) with torch on the same threads, and also reported against --dram-gbs when given (e.g. the
same-traffic figure that cpu_adamw_bench prints).

    python3 bench/torch_cpu_adamw.py [--params N] [--steps K] [--threads T] [--dram-gbs G]
"""
import argparse
import time

import torch


def best_seconds(fn, steps):
    fn()
    best = float("inf")
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", type=int, default=100_000_000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--dram-gbs", type=float, default=0.0, help="a DRAM bandwidth to report against")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    n = args.params
    print(f"torch {torch.__version__}, {n} params, {torch.get_num_threads()} threads")

    a = torch.empty(n, dtype=torch.float32)
    b = torch.full((n,), 0.25, dtype=torch.float32)
    c = torch.full((n,), 1.0, dtype=torch.float32)
    triad_s = best_seconds(lambda: torch.add(b, c, alpha=0.5, out=a), args.steps)
    triad_gbs = 12.0 * n / triad_s / 1e9
    print(f"{'triad (STREAM convention)':36s} {triad_s * 1e3:8.2f} ms  {triad_gbs:6.1f} GB/s (12 B/element)")
    del a, b, c

    for label, kwargs in (("torch AdamW fused=True", {"fused": True}), ("torch AdamW default (for-loop)", {})):
        param = torch.nn.Parameter(torch.full((n,), 0.5, dtype=torch.float32))
        param.grad = torch.full((n,), 0.25, dtype=torch.float32)
        opt = torch.optim.AdamW([param], lr=1e-5, weight_decay=0.01, **kwargs)
        seconds = best_seconds(opt.step, args.steps)
        rate = n / seconds
        gbs = 28.0 * rate / 1e9
        line = (f"{label:36s} {seconds * 1e3:8.2f} ms  {rate / 1e9:6.2f} G params/s  {gbs:6.1f} GB/s (28 B/param)"
                f"  triad {100 * gbs / triad_gbs:5.1f}%")
        if args.dram_gbs > 0:
            line += f"  of {args.dram_gbs:.0f} GB/s {100 * gbs / args.dram_gbs:5.1f}%"
        print(line)
        del opt, param
    print("roofline fraction = 28 B/param x params/s / DRAM GB/s (triad measured above, or --dram-gbs)")


if __name__ == "__main__":
    main()
