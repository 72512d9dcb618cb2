#!/usr/bin/env python3
"""PyTorch's language-model head and loss at bench_flce's shape, for comparison with ferry's fused
linear + cross-entropy: logits = x w^T in bf16, then cross_entropy on the fp32 logits (what
transformers' LlamaForCausalLM computes), forward and backward to x and w.

T = 8192 tokens, H = 4096, V = 128256 (Llama-3 8B's head), bf16. Times forward+backward with CUDA
events and prints TFLOP/s with the bench's count (three GEMMs, 6 T H V) and the working memory:
the peak allocation above the inputs, the weight and their gradients. Eager, and the same
function through torch.compile (which may fuse the upcast into the loss).

Usage: python3 bench/torch_head_baseline.py [--iters N]
"""
import argparse
import json

import torch
import torch.nn.functional as F

PEAK_TFLOPS = 776.0
T, H, V = 8192, 4096, 128256


def head_loss(x, w, targets):
    logits = x @ w.t()
    return F.cross_entropy(logits.float(), targets)


def measure(name, fn, x, w, targets, iters):
    def step():
        x.grad = None
        w.grad = None
        fn(x, w, targets).backward()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    x.grad = None
    w.grad = None
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    # The gradients of x and w stay allocated after the step; they are outputs, not working memory.
    working = torch.cuda.max_memory_allocated() - base - (x.numel() + w.numel()) * 2
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        step()
    stop.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(stop) / iters
    tflops = 6.0 * T * H * V / (ms * 1e-3) / 1e12
    print(json.dumps({"head": name, "T": T, "H": H, "V": V, "ms": round(ms, 3), "tflops": round(tflops, 1),
                      "peak_fraction": round(tflops / PEAK_TFLOPS, 3), "working_mib": round(working / 2**20)}),
          flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    x = (torch.rand(T, H, device="cuda") * 2 - 1).to(torch.bfloat16).requires_grad_()
    w = ((torch.rand(V, H, device="cuda") * 2 - 1) * 0.02).to(torch.bfloat16).requires_grad_()
    targets = (torch.arange(T, device="cuda") * 7919) % V
    measure("eager", head_loss, x, w, targets, args.iters)
    try:
        measure("torch.compile", torch.compile(head_loss), x, w, targets, args.iters)
    except Exception as e:  # a compiler that cannot build here is reported, not fatal
        print(json.dumps({"head": "torch.compile", "error": str(e)[:300]}), flush=True)


if __name__ == "__main__":
    main()
