#!/usr/bin/env bash
# Regenerate the HF golden fixtures and self-test check_hf_output.py, on a machine that has
# torch + transformers (the device machine). Writes $OUT/goldens.tgz, $OUT/gen.log, $OUT/check.log.
#   OUT=/some/dir bash tools/hf_goldens_device.sh
# Then, here: tar -C tests/fixtures/hf -xzf <files_at>/goldens.tgz
set -uo pipefail
: "${OUT:?set OUT to a folder for the results}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 -c "import sys, torch, transformers, safetensors, numpy; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'safetensors', safetensors.__version__, 'numpy', numpy.__version__)" || exit 1
echo "cores: $(nproc)"
G=$(mktemp -d)
python3 tools/make_hf_goldens.py "$G" 2>&1 | tee "$OUT/gen.log"
gen_rc=${PIPESTATUS[0]}
tar -C "$G" -czf "$OUT/goldens.tgz" .

# check_hf_output.py against the goldens themselves: every case must PASS (packed splits documents)
{
  for d in "$G"/*/; do
    c=$(basename "$d")
    [ "$c" = long ] && continue  # stores logits at a few positions only (logits_at), not what the checker reads
    echo "--- check $c"
    python3 tools/check_hf_output.py "$d" "$d/golden.safetensors"; echo "rc=$?"
  done
  # a tokenizer in the model dir must load; perturbed logits must FAIL with rc 1
  T=$(mktemp -d); cp "$G"/llama3/* "$T"/
  python3 - "$T" "$G/llama3/golden.safetensors" <<'EOF'
import sys
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
d, g = sys.argv[1], sys.argv[2]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(["hello ferry world"] * 8, trainers.BpeTrainer(vocab_size=280, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(d)
t = load_file(g)
save_file({"input_ids": t["input_ids"], "logits": t["logits"] * 1.001}, d + "/bad.safetensors")
EOF
  echo "--- check llama3 + tokenizer (expect PASS)"
  python3 tools/check_hf_output.py "$T" "$G/llama3/golden.safetensors"; echo "rc=$?"
  echo "--- check perturbed logits (expect FAIL, rc=1)"
  python3 tools/check_hf_output.py "$T" "$T/bad.safetensors"; echo "rc=$?"
} 2>&1 | tee "$OUT/check.log"
echo "--- llama3/config.json"; cat "$G/llama3/config.json"
echo "--- tied/config.json"; cat "$G/tied/config.json"
ls -l "$G"/*
echo "gen_rc=$gen_rc"
exit "$gen_rc"
