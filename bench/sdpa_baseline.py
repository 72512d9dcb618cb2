#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention at flash_attention_bench's shapes, for comparison.

T = 16384 tokens as a batch of sequences of 2048, 4096, 8192 (batch 8, 4, 2), Hq 32, Hkv 8,
D 128, bf16, is_causal=True. Times forward and forward+backward with CUDA events and prints
TFLOP/s with the bench's count: forward 4 S^2 D Hq / 2 per sequence, backward 2.5 times that,
against ~776 TFLOP/s (the H200's measured dense bf16 peak, DESIGN.md section 5).

GQA goes through enable_gqa=True where this torch has it (2.5+), otherwise k and v are
repeat_interleave'd to Hq heads outside the timed forward (inside the autograd graph for the
backward, as a model would). Each SDPA backend is tried alone (flash, cuDNN, memory-efficient)
and then torch's default choice; a backend that refuses the shape is reported, not fatal.

Usage: python3 bench/sdpa_baseline.py [--iters N]
"""
import argparse
import inspect

import torch
import torch.nn.functional as F

PEAK_TFLOPS = 776.0
T, HQ, HKV, D = 16384, 32, 8, 128


def has_enable_gqa():
    try:
        return "enable_gqa" in inspect.signature(F.scaled_dot_product_attention).parameters
    except (TypeError, ValueError):
        # A builtin without a Python signature: probe it.
        try:
            x = torch.zeros(1, 2, 4, 8, device="cuda", dtype=torch.bfloat16)
            y = torch.zeros(1, 1, 4, 8, device="cuda", dtype=torch.bfloat16)
            F.scaled_dot_product_attention(x, y, y, is_causal=True, enable_gqa=True)
            return True
        except Exception:
            return False


def time_ms(fn, iters, warmup=3):
    for _ in range(warmup):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / iters


def backends():
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return [("default", None)]
    out = []
    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
        if hasattr(SDPBackend, name):
            out.append((name.lower(), lambda n=name: sdpa_kernel(getattr(SDPBackend, n))))
    out.append(("default", None))
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    gqa = has_enable_gqa()
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}; GQA via "
          f"{'enable_gqa' if gqa else 'repeat_interleave'}")
    print(f"T {T}, Hq {HQ}, Hkv {HKV}, D {D}, causal, bf16, {args.iters} iterations")
    print(f"  {'backend':>20} {'seq':>6} {'batch':>5} | {'fwd ms':>9} {'TFLOP/s':>8} {'%peak':>6} | "
          f"{'f+b ms':>9} {'TFLOP/s':>8} {'%peak':>6}")
    for seq in (2048, 4096, 8192):
        batch = T // seq
        fwd_flops = batch * 4.0 * seq * seq * D * HQ / 2
        both_flops = 3.5 * fwd_flops
        gen = torch.Generator(device="cuda").manual_seed(0)

        def rand(*shape):
            return torch.rand(*shape, device="cuda", dtype=torch.bfloat16, generator=gen) * 2 - 1

        q, k, v = rand(batch, HQ, seq, D), rand(batch, HKV, seq, D), rand(batch, HKV, seq, D)
        dout = rand(batch, HQ, seq, D)
        for name, ctx in backends():
            try:
                def attend(q_, k_, v_):
                    if gqa:
                        return F.scaled_dot_product_attention(q_, k_, v_, is_causal=True, enable_gqa=True)
                    rep = HQ // HKV
                    return F.scaled_dot_product_attention(
                        q_, k_.repeat_interleave(rep, dim=1), v_.repeat_interleave(rep, dim=1), is_causal=True)

                if gqa:
                    kf, vf = k, v
                else:
                    kf, vf = k.repeat_interleave(HQ // HKV, dim=1), v.repeat_interleave(HQ // HKV, dim=1)

                def fwd():
                    with torch.no_grad():
                        return F.scaled_dot_product_attention(
                            q, kf, vf, is_causal=True, **({"enable_gqa": True} if gqa else {}))

                qg, kg, vg = (x.detach().clone().requires_grad_(True) for x in (q, k, v))

                def both():
                    qg.grad = kg.grad = vg.grad = None
                    attend(qg, kg, vg).backward(dout)

                if ctx is None:
                    f_ms, b_ms = time_ms(fwd, args.iters), time_ms(both, args.iters)
                else:
                    with ctx():
                        f_ms, b_ms = time_ms(fwd, args.iters), time_ms(both, args.iters)
                f_tf = fwd_flops / (f_ms * 1e-3) / 1e12
                b_tf = both_flops / (b_ms * 1e-3) / 1e12
                print(f"  {name:>20} {seq:>6} {batch:>5} | {f_ms:>9.3f} {f_tf:>8.1f} {100 * f_tf / PEAK_TFLOPS:>5.1f}% | "
                      f"{b_ms:>9.3f} {b_tf:>8.1f} {100 * b_tf / PEAK_TFLOPS:>5.1f}%")
            except Exception as e:  # a backend that does not take this shape
                print(f"  {name:>20} {seq:>6} {batch:>5} | unavailable: {type(e).__name__}: {str(e).splitlines()[0][:80]}")
        del q, k, v, dout
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
