#!/usr/bin/env python3
"""Round-trip check: does transformers agree with ferry on a model directory ferry wrote?

    python3 tools/check_hf_output.py MODEL_DIR FERRY_LOGITS.safetensors [--tol 1e-4]

MODEL_DIR is a Hugging Face model directory (for instance one ferry saved after training).
FERRY_LOGITS.safetensors holds what ferry computed on it:
  input_ids     (B, S) integer
  position_ids  (B, S) integer, optional. A row whose positions restart at 0 is a packed row:
                each document (a run starting at position 0) is run as its own sequence, which is
                what packing with document masking means
  logits        (B, S, V) any float dtype

The model is loaded with AutoModelForCausalLM in float32 with eager attention, run on the CPU,
and compared with ferry's logits. Prints the max absolute error, the max error relative to
max|logits|, and the max elementwise relative error over entries with |logit| >= 1e-2 * max.
Exit status: 0 when max|diff| / max|ref| <= tol (default 1e-4, fp32), 1 when above or NaN, or
when the tokenizer files present in MODEL_DIR do not load; 2 for bad inputs.
"""

import argparse
import os
import sys

import torch
from safetensors.torch import load_file

import transformers

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
)


def documents(row_pos):
    """Split one row of position_ids into (start, length) runs that begin at position 0."""
    pos = row_pos.tolist()
    starts = [0] + [t for t in range(1, len(pos)) if pos[t] == 0]
    ends = starts[1:] + [len(pos)]
    out = []
    for s, e in zip(starts, ends):
        if pos[s:e] != list(range(pos[s], pos[s] + (e - s))):
            raise ValueError(f"position_ids are not consecutive inside a document: {pos[s:e]}")
        out.append((s, e - s))
    return out


@torch.no_grad()
def hf_logits(model, input_ids, position_ids):
    if position_ids is None:
        return model(input_ids=input_ids, use_cache=False).logits
    rows = []
    for b in range(input_ids.shape[0]):
        docs = documents(position_ids[b])
        if len(docs) == 1:
            rows.append(
                model(input_ids=input_ids[b : b + 1], position_ids=position_ids[b : b + 1], use_cache=False).logits
            )
            continue
        parts = []
        for s, n in docs:
            parts.append(
                model(
                    input_ids=input_ids[b : b + 1, s : s + n],
                    position_ids=position_ids[b : b + 1, s : s + n] - position_ids[b, s],
                    use_cache=False,
                ).logits
            )
        rows.append(torch.cat(parts, dim=1))
    return torch.cat(rows, dim=0)


def check_tokenizer(model_dir):
    present = [f for f in TOKENIZER_FILES if os.path.exists(os.path.join(model_dir, f))]
    if not present:
        print("tokenizer: no tokenizer files in the model directory (skipped)")
        return True
    try:
        tok = transformers.AutoTokenizer.from_pretrained(model_dir)
        text = "Hello, ferry! ünïcödé 123\n\tend"
        ids = tok(text)["input_ids"]
        back = tok.decode(ids, skip_special_tokens=True)
        print(f"tokenizer: {type(tok).__name__} from {present}; vocab {len(tok)}; {len(ids)} ids; decode {back!r}")
        return True
    except Exception as e:  # report any failure to load or run
        print(f"tokenizer: FAILED to load/run from {present}: {type(e).__name__}: {e}")
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("ferry_logits")
    ap.add_argument("--tol", type=float, default=1e-4, help="max|diff| / max|ref| allowed (default 1e-4)")
    args = ap.parse_args()

    t = load_file(args.ferry_logits)
    for k in ("input_ids", "logits"):
        if k not in t:
            print(f"error: {args.ferry_logits} has no '{k}' tensor (has {sorted(t)})")
            return 2
    input_ids = t["input_ids"].to(torch.int64)
    position_ids = t["position_ids"].to(torch.int64) if "position_ids" in t else None
    ferry = t["logits"].to(torch.float32)
    if input_ids.dim() != 2 or ferry.dim() != 3 or ferry.shape[:2] != input_ids.shape:
        print(f"error: shapes input_ids {tuple(input_ids.shape)} and logits {tuple(ferry.shape)} do not match")
        return 2
    if position_ids is not None and position_ids.shape != input_ids.shape:
        print(f"error: position_ids {tuple(position_ids.shape)} vs input_ids {tuple(input_ids.shape)}")
        return 2

    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.model_dir, dtype=torch.float32, attn_implementation="eager"
    )
    model.to(torch.float32)
    model.eval()
    print(
        f"model: {type(model).__name__}, {sum(p.numel() for p in model.parameters())} params, "
        f"transformers {transformers.__version__}, torch {torch.__version__}"
    )
    ref = hf_logits(model, input_ids, position_ids)
    if ref.shape != ferry.shape:
        print(f"error: HF logits {tuple(ref.shape)} vs ferry logits {tuple(ferry.shape)}")
        return 2

    ok_tok = check_tokenizer(args.model_dir)

    diff = (ferry - ref).abs()
    if not torch.isfinite(ferry).all():
        print("FAIL: ferry's logits contain NaN or Inf")
        return 1
    scale = float(ref.abs().max())
    max_abs = float(diff.max())
    rel = max_abs / max(scale, 1e-30)
    big = ref.abs() >= 1e-2 * scale
    elem_rel = float((diff[big] / ref.abs()[big]).max()) if bool(big.any()) else 0.0
    print(f"logits {tuple(ref.shape)}: max|ref| {scale:.6g}")
    print(f"max abs error           {max_abs:.3e}")
    print(f"max rel error (/max|ref|) {rel:.3e}   tolerance {args.tol:.1e}")
    print(f"max elementwise rel error (|ref| >= 1e-2 max) {elem_rel:.3e}")
    ok = rel <= args.tol
    print("PASS" if ok and ok_tok else "FAIL")
    return 0 if ok and ok_tok else 1


if __name__ == "__main__":
    sys.exit(main())
