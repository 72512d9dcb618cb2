#!/usr/bin/env bash
# Writes the plan of every example config (examples/plans.tsv) for 24, 48, 80 and 141 GB GPUs beside
# it, as examples/<dir>/plan-<N>GB.txt: `ferry plan` with the stored H200 profile the table names and
# a pinned host_memory, so that the files depend on the code alone, not on the machine that writes
# them. `make examples` runs it; with --check it writes nothing, and fails naming every file that
# differs from what this ferry plans (the CPU test examples_plans runs that).
#
#   tools/plan_examples.sh [--check] [FERRY]      (FERRY: the binary, default build/ferry)
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
ferry="${1:-build/ferry}"
[ -x "$ferry" ] || { echo "plan_examples: no ferry binary at $ferry; build first (make build)" >&2; exit 2; }
# The host of the plans: the lent H200 machine's RAM, large enough for each example's exact state.
host_memory=128GiB
# The process beside the engine as measured on the lent H200 with its CUDA context (132 MiB) plus
# the planner's allowance (256 MiB), instead of this process's own: a few KiB between machines.
host_beside=388MiB
gpus="24 48 80 141"
stale=()
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
while IFS=$'\t' read -r dir preset profile; do
  case "$dir" in ''|'#'*) continue ;; esac
  config="examples/$dir/config.yaml"
  [ -f "$config" ] || { echo "plan_examples: $config is missing (examples/plans.tsv names it)" >&2; exit 1; }
  for gb in $gpus; do
    args=("$config" --preset "$preset" "profile=$profile" --scale-profile "gpu_memory=${gb}GB" "host_memory=$host_memory" --host-beside "$host_beside")
    out="$scratch/plan-${gb}GB.txt"
    { echo "\$ ferry plan ${args[*]}"; echo; } > "$out"
    if ! "$ferry" plan "${args[@]}" >> "$out" 2> "$scratch/stderr"; then
      echo "plan_examples: $config does not plan on a ${gb} GB GPU:" >&2
      cat "$scratch/stderr" >&2
      exit 1
    fi
    target="examples/$dir/plan-${gb}GB.txt"
    if [ $check = 1 ]; then
      cmp -s "$out" "$target" || { stale+=("$target"); diff "$target" "$out" >&2 || true; }
    else
      cp "$out" "$target"
    fi
  done
done < examples/plans.tsv
if [ ${#stale[@]} -gt 0 ]; then
  echo "plan_examples: these plans differ from what this ferry plans (the planner, a preset or a profile" >&2
  echo "changed); run \`make examples\` and commit them:" >&2
  printf '  %s\n' "${stale[@]}" >&2
  exit 1
fi
[ $check = 1 ] && echo "plan_examples: every example plans, and its plan files are current"
exit 0
