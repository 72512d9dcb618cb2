#!/usr/bin/env bash
# docs/performance.md's "What fits where": for each GPU (24, 48, 80, 141 GB) and host (32, 64, 128,
# 256 GiB), the largest preset model that `ferry plan` finds a plan for, and its predicted tokens/s,
# with the exact optimizer state (fp32), the exact state with a 1 TB disk tier, and the leanest
# state (bf16sr_q8; the disk tier holds only fp32 state). Plan-only: no weights, no GPU. Prints the
# markdown table on stdout.
#
#   tools/what_fits.sh [FERRY]     (FERRY: the binary, default build/ferry; `make what-fits`)
#
# Every plan uses a stored profile of the lent H200 (bench/profiles/): the Llama shapes measured
# ones, the others the Llama-3.1-8B profile carried to their shape by FLOPs (ferry plan
# --scale-profile), with the process beside the engine pinned, so the table depends on the code and
# the profiles alone. A run of 32 x 2048 tokens a step with clipping, as the examples train.
set -euo pipefail
cd "$(dirname "$0")/.."
ferry="${1:-build/ferry}"
[ -x "$ferry" ] || { echo "what_fits: no ferry binary at $ferry; build first (make build)" >&2; exit 2; }
# Smallest first; each with its display name and the profile it is planned with.
models=(
  "llama/llama-3.2-1b|Llama-3.2-1B|bench/profiles/h200-llama-3.2-1b-s2048.json"
  "llama/llama-3.2-3b|Llama-3.2-3B|bench/profiles/h200-llama-3.2-3b-s2048.json"
  "llama/llama-3.1-8b|Llama-3.1-8B|bench/profiles/h200-llama-3.1-8b-s2048.json"
  "mistral/mistral-nemo-12b|Mistral-Nemo-12B|bench/profiles/h200-llama-3.1-8b-s2048.json"
  "qwen2/qwen2.5-14b|Qwen2.5-14B|bench/profiles/h200-llama-3.1-8b-s2048.json"
  "qwen3/qwen3-14b|Qwen3-14B|bench/profiles/h200-llama-3.1-8b-s2048.json"
  "mistral/mistral-small-24b|Mistral-Small-24B|bench/profiles/h200-llama-3.1-8b-s2048.json"
  "qwen3/qwen3-32b|Qwen3-32B|bench/profiles/h200-llama-3.1-8b-s2048.json"
  "llama/llama-3.3-70b|Llama-3.3-70B|bench/profiles/h200-llama-3.1-8b-s2048.json"
)
gpus=(24 48 80 141)
hosts=(32 64 128 256)
# Column: the extra settings of each state placement.
columns=("optimizer_state=fp32" "optimizer_state=fp32 disk_memory=1TB disk_dir=/tmp/ferry-what-fits" "optimizer_state=bf16sr_q8")
common=(--host-beside 388MiB --scale-profile seq_len=2048 global_batch=32 micro_batch=auto max_grad_norm=1.0)

# "1234" tokens/s when model index $1 plans on GPU $2 GB, host $3 GiB with column $4; else nothing.
plan_rate() {
  local spec="${models[$1]}"
  local preset="${spec%%|*}" profile="${spec##*|}"
  local extra
  read -r -a extra <<< "${columns[$4]}"
  "$ferry" plan --alternatives 0 --preset "$preset" "profile=$profile" "${common[@]}" "gpu_memory=${2}GB" \
    "host_memory=${3}GiB" "${extra[@]}" 2>/dev/null |
    sed -n 's/^predicted step time .* s, \([0-9]*\) tokens\/s.*/\1/p' || true
}

# The largest model that fits can only grow with the GPU's and the host's memory (more budget never
# removes a plan), so each search starts from the best of the smaller neighbours and goes up.
declare -A best
cell() {  # gpu index, host index, column -> "index rate" of the largest model that plans, or "-1"
  local g=$1 h=$2 c=$3 start=0 i rate found=-1 found_rate=""
  [ "$g" -gt 0 ] && start=$(( ${best[$((g-1)),$h,$c]%% *} > start ? ${best[$((g-1)),$h,$c]%% *} : start ))
  [ "$h" -gt 0 ] && start=$(( ${best[$g,$((h-1)),$c]%% *} > start ? ${best[$g,$((h-1)),$c]%% *} : start ))
  for ((i = start; i < ${#models[@]}; i++)); do
    rate=$(plan_rate "$i" "${gpus[$g]}" "${hosts[$h]}" "$c")
    [ -n "$rate" ] || break
    found=$i found_rate=$rate
  done
  best[$g,$h,$c]="$found $found_rate"
}

echo "| GPU | host | exact (fp32 state) | exact + 1 TB disk | lean (bf16sr_q8) |"
echo "|---|---|---|---|---|"
for g in "${!gpus[@]}"; do
  for h in "${!hosts[@]}"; do
    row="| ${gpus[$g]} GB | ${hosts[$h]} GiB |"
    for c in "${!columns[@]}"; do
      cell "$g" "$h" "$c"
      read -r index rate <<< "${best[$g,$h,$c]}"
      if [ "$index" -lt 0 ]; then
        row+=" none |"
      else
        spec="${models[$index]}"
        name="${spec#*|}"
        row+=" ${name%%|*}, $rate tok/s |"
      fi
    done
    echo "$row"
  done
done
