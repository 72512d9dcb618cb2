#!/usr/bin/env bash
# Builds the inputs of the transformers round-trip check (tools/check_hf_output.py, run on a
# machine with transformers): for several architectures, a model ferry created or was given is
# trained a few steps, and ferry's logits on the output directory are written beside it.
#
#   tools/make_roundtrip.sh BUILD_DIR OUT_DIR
#   then, where transformers is installed:
#   for d in OUT_DIR/*/; do python3 tools/check_hf_output.py $d/model $d/logits.safetensors; done
set -euo pipefail
ferry="$(cd "$1" && pwd)/ferry"
out="$(mkdir -p "$2" && cd "$2" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
rm -rf "$out"
mkdir -p "$out"

make_data() {  # FILE VOCAB SEED
  python3 - "$1" "$2" "$3" <<'PY'
import json, random, sys
path, vocab, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
with open(path, "w") as f:
    for _ in range(64):
        n = rng.randint(8, 40)
        f.write(json.dumps({"input_ids": [rng.randrange(vocab) for _ in range(n)]}) + "\n")
PY
}

run_case() {  # NAME INPUT_MODEL_DIR VOCAB
  local name="$1" input="$2" vocab="$3" dir="$out/$1"
  mkdir -p "$dir"
  make_data "$dir/train.jsonl" "$vocab" 5
  cat > "$dir/train.yaml" <<YAML
model: $input
data: train.jsonl
output_dir: model
seq_len: 64
global_batch: 4
micro_batch: 2
max_steps: 3
learning_rate: 1.0e-3
warmup_steps: 0
YAML
  "$ferry" train "$dir/train.yaml" logging_steps=3
  "$ferry" eval --model "$dir/model" --data "$dir/train.jsonl" --seq-len 64 --dump-logits "$dir/logits.safetensors" --dump-rows 2 --max-rows 2 > "$dir/eval.json"
  rm -f "$dir/model/metrics.jsonl"
}

for arch in llama mistral qwen2 qwen3; do
  "$ferry" init --arch "$arch" --preset tiny --out "$out/init-$arch" --seed 3
  run_case "$arch" "$out/init-$arch" 320
done
run_case tied "$root/tests/fixtures/hf/tied" 96
run_case llama3-scaling "$root/tests/fixtures/hf/llama3" 96
