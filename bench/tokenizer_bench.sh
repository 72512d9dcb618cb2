#!/usr/bin/env bash
# Tokenizer throughput, ferry vs Hugging Face tokenizers (Rust, through its Node binding), on the
# same ~10 MB of mixed documents, both encoding the batch on THREADS threads (default 2).
#
#   bench/tokenizer_bench.sh [BUILD_DIR] [MB] [THREADS]
#
# Needs the fixtures (scripts/fetch_tokenizer_fixtures.sh) and the tokenizer_bench target:
#   cmake --build BUILD_DIR --target tokenizer_bench
# Prints MB/s of each and the ratio per tokenizer; fails when the ids differ (checksums).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
mb="${2:-10}"
threads="${3:-2}"
bench="$build/bench/tokenizer_bench"
[ -x "$bench" ] || { echo "no $bench; build it: cmake --build $build --target tokenizer_bench" >&2; exit 1; }
"$root/scripts/fetch_tokenizer_fixtures.sh"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
node "$root/bench/tokenizer_bench.mjs" corpus "$work/corpus.jsonl" "$mb"

field() { sed -E "s/.*\"$1\": ?([0-9.]+).*/\1/" <<<"$2"; }
status=0
printf '%-8s %12s %12s %8s  %s\n' tokenizer "ferry MB/s" "HF MB/s" ratio ids
for name in llama3 qwen3 llama2; do
  dir="$root/tests/fixtures/tokenizers/$name"
  ours="$("$bench" "$dir" "$work/corpus.jsonl" "$threads")"
  theirs="$(RAYON_NUM_THREADS="$threads" node "$root/bench/tokenizer_bench.mjs" oracle "$dir" "$work/corpus.jsonl")"
  a="$(field mb_per_s "$ours")"; b="$(field mb_per_s "$theirs")"
  same="same"
  if [ "$(field checksum "$ours")" != "$(field checksum "$theirs")" ] || [ "$(field tokens "$ours")" != "$(field tokens "$theirs")" ]; then
    same="DIFFERENT ($(field tokens "$ours") vs $(field tokens "$theirs") tokens)"
    status=1
  fi
  printf '%-8s %12.2f %12.2f %7.2fx  %s\n' "$name" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { print a / b }')" "$same"
done
exit $status
