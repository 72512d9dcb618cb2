#!/usr/bin/env python3
"""ferry against the strongest PyTorch run, side by side in one GPU call: the speed table.

    python3 bench/speed_table.py --out DIR [--rows 1b,3b,8b-24gib,8b-24gib-noclip] [--steps N]
    python3 bench/speed_table.py --report DIR [DIR ...]

Each row trains one preset with random tokens (tools/gpu_session.sh: 32 sequences of 2,048 tokens
a step, host memory sampled each second beside the plan), then runs the strongest PyTorch run of
the same model on the same GPU (`gpucn`: per-layer torch.compile, no gradient checkpointing, the
largest micro-batch that fits the card; clipping at 1.0 when the row clips, PEER_CLIP=1), and
records both in DIR/speed_rows.jsonl. --report prints the table of every row recorded in the given
directories (several calls' rows in one table): ferry's steady steps (min-max and median, from the
third step on), its plan's prediction, the peer, their ratio, and the host and GPU memory's peaks
against the plan. Whole-GPU rows run at a fixed gpu_memory by default (--whole-gpu).

Rows: 1b and 3b on the whole GPU (below 100 GB the 3B's peer runs micro-batch 4, the most that fits),
8b on the whole GPU (needs a card of 100 GB or more),
8b-24gib and 8b-24gib-noclip (gpu_memory: 24GiB, micro-batch 4, with and without clipping: the
recipe every session has run), 8b-24gib-auto and 8b-24gib-auto-noclip (the same with the planner's
micro-batch, `micro_batch: auto`, what a config of examples/ runs). Run
from the repository root on the GPU machine, with the bundle unpacked in .device/bundle
(tools/make_gpu_bundle.sh) and the peer script at --peer (default .device/peer_baselines.py).
Python's standard library only.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

# name: (preset, whole_gpu, micro_batch, clip, peer model, peer micro-batch on a card of >= 100 GB
# and below it (0: the row does not fit that card))
ROWS = {
    "1b": ("llama-3.2-1b", True, "auto", True, "llama3.2-1b", 8, 8),
    # gpucn's 3B holds ~24 GiB of state and ~8.6 GiB of activations per sequence of 2,048 (93 GiB
    # at mb 8): mb 4 is the largest divisor of 32 that fits an 80 GB card.
    "3b": ("llama-3.2-3b", True, "auto", True, "llama3.2-3b", 8, 4),
    "8b": ("llama-3.1-8b", True, "auto", True, "llama3-8b", 2, 0),
    "8b-24gib": ("llama-3.1-8b", False, "4", True, "llama3-8b", 2, 1),
    "8b-24gib-noclip": ("llama-3.1-8b", False, "4", False, "llama3-8b", 2, 1),
    "8b-24gib-auto": ("llama-3.1-8b", False, "auto", True, "llama3-8b", 2, 1),
    "8b-24gib-auto-noclip": ("llama-3.1-8b", False, "auto", False, "llama3-8b", 2, 1),
}
GLOBAL_BATCH, SEQ = 32, 2048

STEP_RE = re.compile(r"\| (\d+) tok/s \|")
PREDICTED_RE = re.compile(r"predicted step time [0-9.]+ s \((\d+) tokens/s\)")
SIZE = r"([0-9.]+) (GiB|MiB|KiB|bytes)"
HOST_PHASE_RE = re.compile(r"host memory, ([a-z ]+): peak " + SIZE + " of " + SIZE + " planned")
GPU_PEAK_RE = re.compile(r"peak memory: GPU " + SIZE)
GPU_PLAN_RE = re.compile(r"device memory plan: " + SIZE)
RSS_RE = re.compile(r"peak RssAnon\+RssShmem \d+ MiB \(([0-9.]+) GiB\)")
# The run end's line (train/run_summary.h): the CPU AdamW's rate in the steps against the profile's.
CPU_ADAMW_RE = re.compile(r"CPU AdamW: ([0-9.]+) G params/s in the steps \(the profile: ([0-9.]+) alone, "
                          r"([0-9.]+) beside copies both ways\)")


def gib(value, unit):
    """A size as ferry's logs write it (core/byte_size.h), in GiB."""
    return float(value) / {"GiB": 1.0, "MiB": 1024.0, "KiB": 1048576.0, "bytes": 1073741824.0}[unit]


def read_ferry_log(text, rss_text=""):
    """What a `ferry train` log says of its speed and memory (None where it says nothing)."""
    steps = [int(m.group(1)) for m in STEP_RE.finditer(text)]
    steady = steps[2:] if len(steps) >= 4 else steps[1:]
    predicted = PREDICTED_RE.search(text)
    phases = [(m.group(1), gib(m.group(2), m.group(3)), gib(m.group(4), m.group(5)))
              for m in HOST_PHASE_RE.finditer(text)]
    gpu_peak, gpu_plan = GPU_PEAK_RE.search(text), GPU_PLAN_RE.search(text)
    rss = RSS_RE.search(rss_text)
    cpu = CPU_ADAMW_RE.search(text)
    return {
        "steps": steps,
        "steady": steady,
        "predicted": int(predicted.group(1)) if predicted else None,
        "host_plan_gib": max((p[2] for p in phases), default=None),
        "host_peak_gib": max((p[1] for p in phases), default=None),
        "host_worst_phase": max((p[1] / p[2] for p in phases if p[2] > 0), default=None),
        "rss_peak_gib": float(rss.group(1)) if rss else None,
        "gpu_peak_gib": gib(*gpu_peak.groups()) if gpu_peak else None,
        "gpu_plan_gib": gib(*gpu_plan.groups()) if gpu_plan else None,
        # G params/s: in the steps, and the profile's alone and beside copies both ways
        "cpu_adamw": [float(v) for v in cpu.groups()] if cpu else None,
    }


def read_peer_output(text):
    """The peer script's result: its last line that is a JSON object with tok_s, else None."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                result = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "tok_s" in result:
                return result
    return None


def card():
    """The GPU's memory in MiB and its name."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total,name", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout.splitlines()[0]
    mib, name = out.split(",", 1)
    return int(mib), name.strip()


def whole_gpu_budget(mib):
    """gpu_memory for a whole-GPU row, as docs/performance.md's rows ran: 130GiB of an H200's 141 GB,
    76GiB of an 80 GB card, else 93% of the card."""
    if mib >= 140000:
        return "130GiB"
    if mib >= 80000:
        return "76GiB"
    return f"{int(mib * 0.93 / 1024)}GiB"


def row_budget(whole, mib, whole_gpu):
    """A row's gpu_memory: 24GiB for the flagship rows; for whole-GPU rows the fixed budget above, or
    with whole_gpu "card", auto (ferry's default: the card's memory, 5% kept free)."""
    if not whole:
        return "24GiB"
    return whole_gpu_budget(mib) if whole_gpu == "fixed" else "auto"


def read_text(path):
    if not os.path.exists(path):
        return ""
    with open(path, errors="replace") as f:
        return f.read()


def run_row(name, args, gpu, logs_root, peer_runs):
    preset, whole, micro_batch, clip, peer_model, peer_mb_large, peer_mb_small = ROWS[name]
    mib, gpu_name = gpu
    peer_mb = peer_mb_large if mib >= 100000 else peer_mb_small
    if peer_mb == 0:
        return {"row": name, "gpu": gpu_name, "clip": clip,
                "skipped": f"needs a card of 100 GB or more ({mib / 1024:.0f} GiB here)"}
    budget = row_budget(whole, mib, args.whole_gpu)
    env = dict(os.environ, PARTS="train", MODELS=f"preset:llama/{preset}", BUDGETS=budget,
               GLOBAL_BATCH=str(GLOBAL_BATCH), MICRO_BATCH=micro_batch, STEPS=str(args.steps), TRACE="0",
               MAX_GRAD_NORM="1.0" if clip else "0", TAG=name, PEERS="none", KEEP_LOGS="1",
               TRAIN_TIMEOUT=str(args.train_timeout), GPU_LOGS_DIR=logs_root, OUT=os.path.abspath(args.out))
    started = time.time()
    subprocess.run(["bash", "tools/gpu_session.sh"], env=env, check=False)
    logs = os.path.join(logs_root, "logs")
    run_name = f"{preset}-{budget}-{name}"
    ferry = read_ferry_log(read_text(os.path.join(logs, f"train-{run_name}.log")),
                           read_text(os.path.join(logs, f"rss-{run_name}.log")))

    spec = f"{peer_model}:gpucn:{peer_mb}:{SEQ}:{GLOBAL_BATCH // peer_mb}:3"
    peer_text = peer_runs.get((spec, clip))
    if peer_text is None:
        # One run per peer setting and call: the 8B rows at 24 GiB and on the whole GPU (with
        # clipping) compare with the same run.
        peer_env = dict(os.environ, PEER_CLIP="1" if clip else "0")
        try:
            peer_run = subprocess.run([sys.executable, args.peer, spec], env=peer_env, capture_output=True,
                                      text=True, timeout=args.peer_timeout)
            peer_text = peer_run.stdout + peer_run.stderr
        except subprocess.TimeoutExpired as e:
            peer_text = f"timed out after {args.peer_timeout} s: {e}"
        peer_runs[(spec, clip)] = peer_text
        with open(os.path.join(logs, f"peer-{name}.log"), "w") as f:
            f.write(peer_text)
    subprocess.run(["tar", "-czf", os.path.join(args.out, "logs.tgz"), "-C", logs_root, "logs"], check=False)
    return {"row": name, "gpu": gpu_name, "budget": budget, "micro_batch": micro_batch, "clip": clip,
            "ferry": ferry, "peer_spec": spec, "peer": read_peer_output(peer_text),
            "seconds": round(time.time() - started)}


def fmt_range(values):
    return f"{min(values):,}-{max(values):,}" if values else "-"


def table(rows):
    lines = ["| row | GPU | ferry tok/s (median) | predicted | `gpucn` tok/s (mb) | ferry / `gpucn` | host peak "
             "(plan), sampled RSS | GPU peak (plan) |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['row']} | {r['gpu']} | skipped: {r['skipped']} | | | | | |")
            continue
        f, p = r["ferry"], r["peer"]
        steady = f["steady"]
        median = f" ({int(statistics.median(steady)):,})" if steady else ""
        peer = f"{p['tok_s']:,} (mb {p['mb']}{', clip' if p.get('clip') else ''})" if p else "failed"
        ratio = (f"{min(steady) / p['tok_s']:.3f}-{max(steady) / p['tok_s']:.3f}x" if p and steady else "-")
        host = (f"{f['host_peak_gib']:.2f} ({f['host_plan_gib']:.2f}) GiB" if f["host_peak_gib"] is not None else "-")
        if f["rss_peak_gib"] is not None:
            host += f", {f['rss_peak_gib']:.2f}"
        gpu = (f"{f['gpu_peak_gib']:.2f} ({f['gpu_plan_gib']:.2f}) GiB" if f["gpu_peak_gib"] is not None else "-")
        predicted = f"{f['predicted']:,}" if f["predicted"] else "-"
        lines.append(f"| {r['row']} | {r['gpu']} | {fmt_range(steady)}{median} | {predicted} | {peer} | {ratio} "
                     f"| {host} | {gpu} |")
    worst = [r["ferry"]["host_worst_phase"] for r in rows if "ferry" in r and r["ferry"]["host_worst_phase"]]
    if worst:
        lines.append("")
        lines.append(f"Host memory: every phase of every run peaked at {100 * max(worst):.1f}% of its plan or less.")
    cpu = [(r["row"], r["ferry"]["cpu_adamw"]) for r in rows if "ferry" in r and r["ferry"].get("cpu_adamw")]
    if cpu:
        lines.append("")
        lines.append("CPU AdamW in the steps against the profile's rate alone (G params/s): " + "; ".join(
            f"{row} {steps:.2f} of {alone:.2f} ({steps / alone:.2f}x)" for row, (steps, alone, _) in cpu) + ".")
    return "\n".join(lines)


def load_rows(dirs):
    rows = []
    for d in dirs:
        path = os.path.join(d, "speed_rows.jsonl")
        if not os.path.exists(path):
            sys.exit(f"speed_table: {path} does not exist; run with --out {d} first")
        with open(path) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="directory for this call's rows and logs")
    parser.add_argument("--report", nargs="+", metavar="DIR", help="print the table of the rows in DIRs")
    parser.add_argument("--rows", default="1b,3b,8b-24gib,8b-24gib-noclip",
                        help=f"comma-separated, of {', '.join(ROWS)}")
    parser.add_argument("--steps", type=int, default=6, help="ferry's steps a row (the first two are warm-up)")
    parser.add_argument("--peer", default=".device/peer_baselines.py", help="the peer script")
    parser.add_argument("--whole-gpu", choices=("fixed", "card"), default="fixed",
                        help="whole-GPU rows' gpu_memory: fixed (130GiB of an H200, 76GiB of an 80 GB card, as "
                        "docs/performance.md's rows ran) or card (left to ferry's default, the card's memory: "
                        "what a config without gpu_memory gets)")
    parser.add_argument("--train-timeout", type=int, default=300)
    parser.add_argument("--peer-timeout", type=int, default=300)
    parser.add_argument("--logs", default="/tmp/ferry-speed-table",
                        help="where the runs' logs gather (packed into OUT/logs.tgz after each row)")
    args = parser.parse_args()
    if args.report:
        print(table(load_rows(args.report)))
        return
    if not args.out:
        parser.error("--out DIR (to run rows) or --report DIR (to print their table)")
    names = [n for n in args.rows.split(",") if n]
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        parser.error(f"unknown rows {', '.join(unknown)}; the rows are {', '.join(ROWS)}")
    if not os.path.exists(args.peer):
        parser.error(f"{args.peer}: no peer script there (copy ../shared/bench/peer_baselines.py, or give --peer)")
    os.makedirs(args.out, exist_ok=True)
    gpu = card()
    peer_runs = {}  # (spec, clip): the peer's output
    for name in names:
        row = run_row(name, args, gpu, args.logs, peer_runs)
        with open(os.path.join(args.out, "speed_rows.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")
        print(table([row]).splitlines()[2], flush=True)
    print(table(load_rows([args.out])))


if __name__ == "__main__":
    main()
