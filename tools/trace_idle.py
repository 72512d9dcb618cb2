#!/usr/bin/env python3
"""Reads a ferry timeline trace (config `trace:`) and says where the GPU waited.

    tools/trace_idle.py TRACE.json [--gaps N] [--ops]

For each traced step: the numbers ferry logged (GPU idle over the step's wall time, and between its
first and last kernel; h2d, d2h and CPU-update busy), recomputed from the spans as a check, then the
N longest gaps of the compute stream: when, how long, the compute scope before and after, and what
the other tracks ran meanwhile (their scopes, with the share of the gap each covers). With --ops,
then the compute stream's time by kernel (span name): milliseconds, calls and share of the step,
longest first, which is where docs/performance.md's tables of where a step goes come from; then the
matrix products and attention by shape (the spans' detail), with their rate where the FLOPs follow
from the shapes.
Python's standard library only, so it runs wherever the trace is.
"""
import argparse
import json
import re
import sys


def union(intervals, lo, hi):
    """Seconds of [lo, hi] covered by the (begin, end) intervals, overlaps counted once."""
    covered, reach = 0.0, lo
    for b, e in sorted((max(b, lo), min(e, hi)) for b, e in intervals):
        if e <= reach:
            continue
        covered += e - max(b, reach)
        reach = e
    return covered


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("--gaps", type=int, default=10, help="longest compute gaps to list per step")
    parser.add_argument("--ops", action="store_true", help="also sum each step's compute time by kernel")
    args = parser.parse_args()
    with open(args.trace) as f:
        trace = json.load(f)

    tracks, spans, steps = {}, [], []
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            tracks[e["tid"]] = e["args"]["name"]
        elif e.get("ph") == "X":
            (steps if e.get("cat") == "step" else spans).append(e)
    by_track = {}
    for e in spans:
        by_track.setdefault((tracks[e["tid"]], e["cat"]), []).append(e)
    compute = sorted(by_track.get(("compute", "device"), []), key=lambda e: e["ts"])
    if not steps:
        sys.exit(f"{args.trace}: no traced step in this file")

    for step in steps:
        lo, hi = step["ts"], step["ts"] + step["dur"]
        logged = step["args"]
        busy = union([(e["ts"], e["ts"] + e["dur"]) for e in compute], lo, hi)
        print(f"{step['name']}: {step['dur'] / 1e3:.1f} ms; GPU idle {logged['gpu_idle_percent']:.2f}% "
              f"(recomputed {100 * (1 - busy / step['dur']):.2f}%), "
              f"{logged['gpu_idle_between_first_and_last_kernel_percent']:.2f}% between the first and last kernel; "
              f"h2d busy {logged['h2d_busy_percent']:.0f}%, d2h {logged['d2h_busy_percent']:.0f}%, "
              f"cpu update {logged['cpu_update_busy_percent']:.0f}%")

        inside = [e for e in compute if e["ts"] + e["dur"] > lo and e["ts"] < hi]
        gaps, reach, before = [], lo, None
        for e in inside:
            if e["ts"] > reach:
                gaps.append((e["ts"] - reach, reach, e["ts"], before, e))
            if e["ts"] + e["dur"] > reach:
                reach, before = e["ts"] + e["dur"], e
        if reach < hi:
            gaps.append((hi - reach, reach, hi, before, None))
        gaps.sort(key=lambda g: -g[0])
        print(f"  {len(gaps)} gaps on the compute stream; the longest:")
        for length, b, e, prev, nxt in gaps[: args.gaps]:
            name = lambda s: "(step edge)" if s is None else s.get("args", {}).get("scope", s["name"])
            print(f"  {length / 1e3:8.3f} ms at +{(b - lo) / 1e3:.3f} ms: after {name(prev)}, before {name(nxt)}")
            for track in ("host", "h2d", "d2h", "bulk h2d", "bulk d2h", "cpu update"):
                cat = "device" if track.endswith(("h2d", "d2h")) else "host"
                work = {}
                for s in by_track.get((track, cat), []):
                    share = union([(s["ts"], s["ts"] + s["dur"])], b, e)
                    if share > 0:
                        key = s.get("args", {}).get("scope", s["name"])
                        work[key] = work.get(key, 0.0) + share
                if work:
                    top = sorted(work.items(), key=lambda kv: -kv[1])[:4]
                    print(f"      {track:10s} " + ", ".join(f"{k} {100 * v / length:.0f}%" for k, v in top))

        if args.ops:
            print_op_sums(inside, lo, hi)


def print_op_sums(inside, lo, hi):
    """The compute stream's spans within [lo, hi] (the step) summed by name: ms, calls, share of the step."""
    step_us = hi - lo
    sums, shaped = {}, {}  # by name; by name and shape (the spans that carry one)

    def add(table, key, us):
        total = table.setdefault(key, [0.0, 0])
        total[0] += us
        total[1] += 1

    for e in inside:
        us = union([(e["ts"], e["ts"] + e["dur"])], lo, hi)
        add(sums, e["name"], us)
        if detail := e.get("args", {}).get("detail"):
            add(shaped, (e["name"], detail), us)
    print(f"  compute time by kernel ({sum(v[0] for v in sums.values()) / 1e3:.1f} ms in all):")
    for name, (us, calls) in sorted(sums.items(), key=lambda kv: -kv[1][0]):
        print(f"  {name:48s} {us / 1e3:9.2f} ms {calls:6d} calls {100 * us / step_us:6.2f}%")
    if shaped:
        print("  by shape:")
    for (name, detail), (us, calls) in sorted(shaped.items(), key=lambda kv: -kv[1][0]):
        flops = product_flops(name, detail) * calls
        rate = f" {flops / us * 1e-6:6.0f} TFLOP/s" if flops and us > 0 else ""
        print(f"  {us / 1e3:9.2f} ms {calls:6d} calls{rate}  {name} {detail}")


def product_flops(name, detail):
    """FLOPs of one linear_forward / linear_backward call from its detail ("x (T, K), w (N, K), dx,
    dw F32"): 2*T*K*N per product (forward: one; backward: one per gradient asked); 0 otherwise."""
    if name not in ("linear_forward", "linear_backward"):
        return 0
    dims = {label: [int(v) for v in shape.split(",")] for label, shape in re.findall(r"(\w+) \(([\d, ]+)\)", detail)}
    x, w = dims.get("x"), dims.get("w")
    if not x or not w or len(w) != 2:
        return 0
    tokens = 1
    for v in x[:-1]:
        tokens *= v
    one = 2 * tokens * w[0] * w[1]
    if name == "linear_forward":
        return one
    return one * ((" dx" in detail) + (" dw " in detail))


if __name__ == "__main__":
    main()
