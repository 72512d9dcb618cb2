#!/usr/bin/env bash
# One batched run on the GPU machine (the `device` tool): GPU tests, the transformers round trip,
# kernel benchmarks with their PyTorch counterparts, and end-to-end training beside the peers.
# Expects the binaries and the Debian libraries they need unpacked in .device/bundle (see
# tools/make_gpu_bundle.sh) and writes its logs to $OUT/logs.tgz (and $OUT/summary.log).
# PARTS: tests roundtrip goldens bench adamw attention_long profiles losscurve train.
# Knobs (environment): PARTS, GPU_TESTS, PROFILE_MODELS, MODELS, BUDGETS, GLOBAL_BATCH, MICRO_BATCH,
# STEPS, TRAIN_TIMEOUT (seconds a run may take, 420), TRACE (0: no trace), TRACE_STEPS, MAX_GRAD_NORM (0: no clipping, as the peers train), HOST_MEMORY,
# EXTRA_YAML (more config lines), TAG (suffix of the train logs, for several settings in one call),
# HAND_TARGET + HAND_PLANS, PEERS, KEEP_LOGS, SEQ_LEN (train: tokens per sequence and per random
# document, 2048), DOC_LEN (train: documents of 1 to 2 * DOC_LEN tokens instead, packed several to
# a row) and SEQ_TILE (auto).
set -u
root="$(pwd)"
B="$root/.device/bundle"
export LD_LIBRARY_PATH="$B/lib:${LD_LIBRARY_PATH:-}"
export FERRY_FIXTURES_DIR="$root/tests/fixtures"
export PYTHONUNBUFFERED=1
# The logs gather outside $OUT (the device tool returns at most 8 files from it) and are packed
# into $OUT/logs.tgz at the end of every session, so a call of several sessions returns them all
# whichever ends it.
L="${GPU_LOGS_DIR:-/tmp/ferry-gpu-logs}/logs"
mkdir -p "$L"
stage() { echo "== $1 $(date +%T)" | tee -a "$L/summary.log"; }
run() {  # NAME TIMEOUT COMMAND...
  local name="$1" limit="$2"; shift 2
  stage "$name"
  timeout "$limit" "$@" > "$L/$name.log" 2>&1
  echo "   rc=$? $(tail -1 "$L/$name.log")" | tee -a "$L/summary.log"
}
nvidia-smi > "$L/nvidia-smi.log" 2>&1
for part in ${PARTS:-tests roundtrip bench train}; do
  case "$part" in
    tests)
      # Every GPU test binary of the bundle, or those named in GPU_TESTS.
      for t in ${GPU_TESTS:-$(cd "$B" && ls *_gpu_test)}; do run "$t" 300 "$B/$t"; done ;;
    roundtrip)
      stage roundtrip
      for d in .device/roundtrip/*/; do
        [ -d "$d/model" ] || continue
        echo "# $d" >> "$L/roundtrip.log"
        timeout 120 python3 tools/check_hf_output.py "$d/model" "$d/logits.safetensors" >> "$L/roundtrip.log" 2>&1
        echo "   $d rc=$?" | tee -a "$L/summary.log"
      done ;;
    goldens)
      # HF goldens of the cases in GOLDEN_CASES (tools/make_hf_goldens.py), into $OUT/goldens.tgz.
      G=$(mktemp -d)
      args=""; for c in ${GOLDEN_CASES:-yarn}; do args="$args --case $c"; done
      run goldens 300 python3 tools/make_hf_goldens.py "$G" $args
      tar -C "$G" -czf "$OUT/goldens.tgz" . ;;
    bench)
      run flash_attention_bench 180 "$B/flash_attention_bench"
      run sdpa_baseline 180 python3 bench/sdpa_baseline.py
      run torch_head_baseline 180 python3 bench/torch_head_baseline.py
      run kernel_bench 180 "$B/ferry_kernel_bench" --kernel all
      run cpu_adamw_bench 120 "$B/cpu_adamw_bench"
      run torch_cpu_adamw 120 python3 bench/torch_cpu_adamw.py ;;
    adamw)
      # The CPU AdamW kernels alone, exact and lean, on this host's threads.
      run cpu_adamw_bench 180 "$B/cpu_adamw_bench" ;;
    attention_long)
      # Attention over one sequence of 16K-256K tokens: ferry's kernels and cuDNN's.
      run flash_attention_long 300 "$B/flash_attention_bench" --no-check --long --iters 2 ;;
    profiles)
      # The machine profile of each shape (bench/profiles/ keeps the lent H200's).
      mkdir -p "$OUT/profiles"
      for model in ${PROFILE_MODELS:-llama-3.2-1b llama-3.2-3b llama-3.1-8b}; do
        run "profile-$model" 300 "$B/ferry" profile /dev/null device=cuda seq_len=2048 \
          --preset "llama/$model" --disk-dir "$root/.device/disk-probe" \
          --out "$OUT/profiles/h200-$model-s2048.json"
      done ;;
    losscurve)
      # 200 steps of a small model on Markov-chain data against transformers: resident, offloaded,
      # and offloaded with the fp32 masters uploaded and converted on the GPU; then the loss on
      # held-out records of the same chain.
      stage losscurve
      python3 - <<'PY'
import json, random
rng = random.Random(1)
vocab, seq = 2048, 512
succ = [[rng.randrange(vocab) for _ in range(4)] for _ in range(vocab)]
def write(path, n):  # n records of the same chain; the held-out ones follow the training ones
    with open(path, "w") as f:
        for _ in range(n):
            t = [rng.randrange(vocab)]
            while len(t) < seq:
                t.append(succ[t[-1]][min(3, int(rng.expovariate(1.5)))])
            f.write(json.dumps({"input_ids": t}) + "\n")
write("/tmp/markov.jsonl", 1024)
write("/tmp/markov-heldout.jsonl", 128)
PY
      [ -d /tmp/small ] || "$B/ferry" init --arch llama --preset small --dtype float32 --out /tmp/small >> "$L/init.log" 2>&1
      # CURVE_MODES: resident, offloaded, converted, and lean-FORMAT (offloaded with optimizer_state FORMAT).
      curves=""
      for mode in ${CURVE_MODES:-resident offloaded converted}; do
        extra=""
        [ "$mode" = offloaded ] && extra="gpu_slots=2 offload_activations=all resident_layers=0 weight_upload=bf16-host-shadow"
        [ "$mode" = converted ] && extra="gpu_slots=2 offload_activations=all resident_layers=0 weight_upload=convert-on-upload"
        case "$mode" in lean-*) extra="gpu_slots=2 offload_activations=all resident_layers=0 optimizer_state=${mode#lean-}" ;; esac
        curves="$curves --ferry $mode=/tmp/curve-$mode/metrics.jsonl"
        rm -rf "/tmp/curve-$mode"
        run "losscurve-ferry-$mode" 300 "$B/ferry" train /dev/null model=/tmp/small data=/tmp/markov.jsonl \
          output_dir=/tmp/curve-$mode seq_len=512 global_batch=16 micro_batch=4 max_steps=200 learning_rate=1e-3 \
          warmup_steps=20 weight_decay=0.1 max_grad_norm=1.0 shuffle=false packing=false device=cuda logging_steps=20 \
          eval_data=/tmp/markov-heldout.jsonl $extra
      done
      run losscurve-check 600 python3 tools/loss_curve_check.py --model /tmp/small --data /tmp/markov.jsonl --steps 200 \
        --heldout /tmp/markov-heldout.jsonl $curves --report "$L/losscurve.json" ;;
    train)
      stage train
      # Documents of SEQ_LEN tokens (one fills a row: long-context runs attend over all of it),
      # 512K tokens in all, at least 32 documents; with DOC_LEN, documents of 1 to 2 * DOC_LEN tokens
      # instead, which packing lays several to a row.
      SEQ_LEN=${SEQ_LEN:-2048} DOC_LEN=${DOC_LEN:-0} python3 - <<'PY'
import json, os, random
rng = random.Random(0)
n, mean = int(os.environ["SEQ_LEN"]), int(os.environ["DOC_LEN"])
with open("/tmp/tokens.jsonl", "w") as f:
    total, docs = 0, 0
    while total < 524288 or docs < 32:
        length = rng.randint(1, 2 * mean) if mean > 0 else n
        f.write(json.dumps({"input_ids": [rng.randrange(128000) for _ in range(length)]}) + "\n")
        total, docs = total + length, docs + 1
PY
      # MODELS: llama preset names written to /tmp by `ferry init`, or preset:ARCH/NAME (in-memory random
      # weights, nothing on disk).
      for model_spec in ${MODELS:-llama-3.2-1b}; do
      case "$model_spec" in
        preset:*) model="${model_spec##*/}"; model_line="model: $model_spec" ;;
        *) model="$model_spec"; model_line="model: /tmp/$model"
           [ -d "/tmp/$model" ] || timeout 180 "$B/ferry" init --arch llama --preset "$model" --out "/tmp/$model" >> "$L/init.log" 2>&1 ;;
      esac
      for budget in ${BUDGETS:-24GiB 130GiB}; do
        name="$model-$budget${TAG:+-$TAG}"
        trace_lines=""
        [ "${TRACE:-1}" = 1 ] && trace_lines="trace: $L/trace-$name.json
trace_steps: ${TRACE_STEPS:-3}"
        cat > /tmp/train.yaml <<YAML
$model_line
data: /tmp/tokens.jsonl
output_dir: /tmp/out-$model-$budget
seq_len: ${SEQ_LEN:-2048}
seq_tile: ${SEQ_TILE:-auto}
global_batch: ${GLOBAL_BATCH:-16}
micro_batch: ${MICRO_BATCH:-4}
max_steps: ${STEPS:-4}
learning_rate: 1.0e-5
warmup_steps: 0
device: cuda
gpu_memory: $budget
max_grad_norm: ${MAX_GRAD_NORM:-1.0}
${HOST_MEMORY:+host_memory: $HOST_MEMORY}
save_steps: 0
$trace_lines
${EXTRA_YAML:-}
YAML
        # The host memory sampled each second beside the plan (the run writes its own per-phase
        # report, host_memory.json, into its output_dir).
        run "train-$name" "${TRAIN_TIMEOUT:-420}" tools/sample_rss.sh "$L/rss-$name.log" "$B/ferry" train /tmp/train.yaml
        cp "/tmp/out-$model-$budget/host_memory.json" "$L/host_memory-$name.json" 2>/dev/null
        # Hand-written plans beside the planner's, for one model and budget (HAND_TARGET=MODEL@BUDGET):
        # HAND_PLANS lists override sets separated by '|', e.g. "gpu_slots=3|resident_layers=0".
        if [ "${HAND_TARGET:-}" = "$model@$budget" ]; then
          IFS='|' read -ra hand_plans <<< "${HAND_PLANS:-}"
          for k in "${!hand_plans[@]}"; do
            rm -rf "/tmp/out-$model-$budget"
            run "hand$k-$name" 300 "$B/ferry" train /tmp/train.yaml trace= ${hand_plans[$k]}
          done
        fi
        # The traced step's GPU idle is in the train log; where the GPU waited, from the trace:
        [ -f "$L/trace-$name.json" ] &&
          python3 tools/trace_idle.py --ops "$L/trace-$name.json" > "$L/idle-$name.log" 2>&1
        rm -rf "/tmp/out-$model-$budget"
      done
      done
      [ "${PEERS:-}" = none ] || run peer_gpu 600 python3 .device/peer_baselines.py ${PEERS:-llama3.2-1b:gpu:8:2048:2:4} ;;
  esac
done
# The machine profiles the runs measured (or found cached), so that their plans can be replayed
# here with `ferry plan profile=...`.
if [ -n "${FERRY_CACHE_DIR:-}" ] && [ -d "$FERRY_CACHE_DIR/profiles" ]; then
  mkdir -p "$L/profiles" && cp "$FERRY_CACHE_DIR"/profiles/*.json "$L/profiles/" 2>/dev/null || true
fi
# The GEMM choices the runs kept (train/gemm_choice_cache.h), to see what each shape runs on.
if [ -n "${FERRY_CACHE_DIR:-}" ] && [ -d "$FERRY_CACHE_DIR/gemm-choices" ]; then
  mkdir -p "$L/gemm-choices" && cp "$FERRY_CACHE_DIR"/gemm-choices/*.json "$L/gemm-choices/" 2>/dev/null || true
fi
# Several sessions in one device call: all but the last set KEEP_LOGS=1 (the next one adds to the
# same logs); each packs what has gathered so far, and the last also clears it.
touch "$L/summary.log"
tar -czf "$OUT/logs.tgz" -C "$(dirname "$L")" logs && cp "$L/summary.log" "$OUT/summary.log"
[ "${KEEP_LOGS:-0}" = 1 ] || rm -rf "$L"
