#!/usr/bin/env bash
# CPU proxy of gpu_session.sh's lean loss curves: trains one model for STEPS steps on the CPU on the
# same Markov-chain data, once per optimizer_state, and compares each lean curve with the exact
# (fp32 state) run by the window distance tools/loss_curve_check.py applies on the GPU:
#   per 10-step window of mean loss, |lean - fp32|; printed as the largest and the last window.
# Shorter sequences and batches than the GPU run keep it within minutes on two cores.
#
#   tools/lean_loss_proxy.sh [BUILD_DIR]    env: STEPS (200) SEQ (128) BATCH (8) FORMATS THREADS (2)
#                                                PRESET (small) WORK (/tmp/lean-proxy)
#                                                FP32_FROM (a WORK dir whose fp32 run to reuse)
set -euo pipefail
B=${1:-build}
STEPS=${STEPS:-200}
SEQ=${SEQ:-128}
BATCH=${BATCH:-8}
THREADS=${THREADS:-2}
PRESET=${PRESET:-small}
FORMATS=${FORMATS:-fp32_q8 bf16c8_q8 bf16sr_q8}
W=${WORK:-/tmp/lean-proxy}
mkdir -p "$W"
# gpu_session.sh's generator (vocabulary 2048, 4 successors per token), records of SEQ tokens.
python3 - "$W/markov.jsonl" "$SEQ" <<'PY'
import json, random, sys
rng = random.Random(1)
vocab, seq = 2048, int(sys.argv[2])
succ = [[rng.randrange(vocab) for _ in range(4)] for _ in range(vocab)]
with open(sys.argv[1], "w") as f:
    for _ in range(1024):
        t = [rng.randrange(vocab)]
        while len(t) < seq:
            t.append(succ[t[-1]][min(3, int(rng.expovariate(1.5)))])
        f.write(json.dumps({"input_ids": t}) + "\n")
PY
[ -d "$W/model-$PRESET" ] || "$B/ferry" init --arch llama --preset "$PRESET" --dtype float32 --out "$W/model-$PRESET" >/dev/null
runs="fp32 $FORMATS"
if [ -n "${FP32_FROM:-}" ]; then
  rm -rf "$W/run-fp32" && cp -r "$FP32_FROM/run-fp32" "$W/run-fp32"
  runs="$FORMATS"
fi
for fmt in $runs; do
  rm -rf "$W/run-$fmt"
  "$B/ferry" train /dev/null model="$W/model-$PRESET" data="$W/markov.jsonl" output_dir="$W/run-$fmt" \
    seq_len="$SEQ" global_batch="$BATCH" micro_batch="$BATCH" max_steps="$STEPS" learning_rate=1e-3 \
    warmup_steps=20 weight_decay=0.1 max_grad_norm=1.0 shuffle=false packing=false device=cpu \
    threads="$THREADS" logging_steps=50 save_steps=0 optimizer_state="$fmt" >"$W/run-$fmt.log" 2>&1
done
python3 - "$W" $FORMATS <<'PY'
import json, sys
w, formats = sys.argv[1], sys.argv[2:]
def losses(fmt):
    out = {}
    for line in open(f"{w}/run-{fmt}/metrics.jsonl"):
        r = json.loads(line)
        if "loss" in r and "step" in r:
            out[r["step"]] = r["loss"]
    return [out[k] for k in sorted(out)]
def windows(l):
    return [sum(l[i:i + 10]) / len(l[i:i + 10]) for i in range(0, len(l), 10)]
ref = windows(losses("fp32"))
print(f"fp32: first window {ref[0]:.4f}, last {ref[-1]:.4f}")
for fmt in formats:
    win = windows(losses(fmt))
    d = [a - b for a, b in zip(win, ref)]
    worst = max(range(len(d)), key=lambda i: abs(d[i]))
    print(f"{fmt}: max |window - fp32| {abs(d[worst]):.4f} (window {worst}, {d[worst]:+.4f}), last {d[-1]:+.4f}")
PY
