#!/usr/bin/env python3
"""Does ferry's loss curve track transformers' on the same model, data and optimizer?

    python3 tools/loss_curve_check.py --model DIR --data tokens.jsonl --steps 200 \
        --ferry resident=out-a/metrics.jsonl --ferry offloaded=out-b/metrics.jsonl [--report FILE]

The reference trains the same Hugging Face model directory with transformers + torch.optim.AdamW,
torch.nn.utils.clip_grad_norm_ and transformers' cosine schedule with warmup, on the same batches:
the data must be pre-tokenized records of exactly seq_len tokens and ferry must have run with
`shuffle: false` and `packing: false`, so that step k reads records [k*B, (k+1)*B) (wrapping at
the end of the file). The loss of a step is the sum of the token losses over every micro-batch
divided by the number of predicted tokens in the whole step, as ferry (and transformers' Trainer
with num_items_in_batch) defines it. Weight decay skips 1-D parameters (norms, biases), as
transformers' Trainer and ferry's default do.

Two references are trained: fp32 (TF32 off) and bf16 autocast over fp32 parameters (transformers'
`bf16=True`). Their distance is the precision noise of the problem: two correct implementations
that round differently drift apart by about that much. The tolerance is derived from it:

    per 10-step window of mean loss: |ferry - ref_bf16| <= 2 * max_window |ref_bf16 - ref_fp32| + 0.01
    step 1 (same weights, same batch, no update yet): |ferry - ref_fp32| <= 1% of the loss

With --heldout FILE (records as --data's, none of them trained on), the trained models' held-out
loss is compared too. ferry's is the last `eval_loss` in its metrics (train with
`eval_data=FILE`). The seed noise is how far the bf16 reference's held-out loss moves when only the
order of the training records changes (--seed-orders more references, each on the records shuffled
with its own seed):

    |ferry - ref_bf16| <= max(seed noise, 2 * |ref_bf16 - ref_fp32|)

Exit status 0 when every ferry curve passes, 1 otherwise. Needs torch and transformers (the GPU
machine).
"""

import argparse
import json
import math
import random
import sys

import torch
import transformers


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--global-batch", type=int, default=16)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--ferry", action="append", default=[], help="LABEL=metrics.jsonl (repeatable)")
    p.add_argument("--heldout", help="records never trained on: compare the trained models' loss on them")
    p.add_argument("--seed-orders", type=int, default=5,
                   help="bf16 references on shuffled record orders that measure the seed noise (with --heldout)")
    p.add_argument("--report", help="write the curves and the verdict as JSON here")
    return p.parse_args()


def read_records(path):
    with open(path) as f:
        return [json.loads(line)["input_ids"] for line in f if line.strip()]


def read_ferry_losses(path, steps):
    """The step losses and the last held-out loss (None when the run evaluated nothing)."""
    losses = {}
    heldout = None
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                if "eval_loss" in r:
                    heldout = float(r["eval_loss"])
                elif "loss" in r:
                    losses[int(r["step"])] = float(r["loss"])
    missing = [s for s in range(1, steps + 1) if s not in losses]
    if missing:
        sys.exit(f"{path}: no loss for steps {missing[:5]}... (did ferry run {steps} steps?)")
    return [losses[s] for s in range(1, steps + 1)], heldout


@torch.no_grad()
def heldout_loss(model, records, micro_batch, bf16):
    """Mean loss over every predicted token of `records`, as ferry's evaluation counts it."""
    model.eval()
    total, counted = 0.0, 0
    for start in range(0, len(records), micro_batch):
        chunk = torch.tensor(records[start:start + micro_batch], dtype=torch.long, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=chunk).logits
        total += torch.nn.functional.cross_entropy(
            logits[:, :-1].float().reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1), reduction="sum").item()
        counted += chunk[:, 1:].numel()
    model.train()
    return total / counted


def train_reference(args, records, bf16, heldout=None):
    """The step losses of one reference run, and its held-out loss after the last step (or None)."""
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32,
                                                              attn_implementation="sdpa").cuda()
    model.train()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps, foreach=False)
    sched = transformers.get_cosine_schedule_with_warmup(opt, args.warmup, args.steps)
    losses = []
    cursor = 0
    for step in range(args.steps):
        rows = []
        for _ in range(args.global_batch):
            rows.append(records[cursor % len(records)])
            cursor += 1
        ids = torch.tensor(rows, dtype=torch.long, device="cuda")
        counted = ids[:, 1:].numel()
        total = 0.0
        for start in range(0, args.global_batch, args.micro_batch):
            chunk = ids[start:start + args.micro_batch]
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
                logits = model(input_ids=chunk).logits
            token_loss = torch.nn.functional.cross_entropy(
                logits[:, :-1].float().reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1), reduction="sum")
            (token_loss / counted).backward()
            total += token_loss.item()
        if args.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(total / counted)
    return losses, (heldout_loss(model, heldout, args.micro_batch, bf16) if heldout else None)


def windows(curve, size=10):
    return [sum(curve[i:i + size]) / len(curve[i:i + size]) for i in range(0, len(curve), size)]


def main():
    args = parse_args()
    records = read_records(args.data)
    lengths = {len(r) for r in records}
    if len(lengths) != 1:
        sys.exit(f"{args.data}: records must all have seq_len tokens (found lengths {sorted(lengths)[:5]})")
    heldout = read_records(args.heldout) if args.heldout else None
    if heldout and {len(r) for r in heldout} != lengths:
        sys.exit(f"{args.heldout}: held-out records must have the training records' length {lengths.pop()}")
    ferry, ferry_heldout = {}, {}
    for item in args.ferry:
        label, _, path = item.partition("=")
        ferry[label], ferry_heldout[label] = read_ferry_losses(path, args.steps)
        if heldout and ferry_heldout[label] is None:
            sys.exit(f"{path}: no eval_loss; train with eval_data={args.heldout} to compare held-out losses")

    ref32, held32 = train_reference(args, records, bf16=False, heldout=heldout)
    ref16, held16 = train_reference(args, records, bf16=True, heldout=heldout)
    w32, w16 = windows(ref32), windows(ref16)
    noise = max(abs(a - b) for a, b in zip(w16, w32))
    tolerance = 2 * noise + 0.01
    print(f"reference: fp32 {ref32[0]:.4f} -> {ref32[-1]:.4f}, bf16 {ref16[0]:.4f} -> {ref16[-1]:.4f}; "
          f"precision noise (max 10-step window |bf16 - fp32|) {noise:.4f}; tolerance {tolerance:.4f}")

    ok = True
    report = {"reference_fp32": ref32, "reference_bf16": ref16, "noise": noise, "tolerance": tolerance, "ferry": {}}
    if heldout:
        # The same training records in other orders: the spread a change of the data seed alone makes.
        shuffled = []
        for seed in range(1, args.seed_orders + 1):
            order = list(records)
            random.Random(seed).shuffle(order)
            shuffled.append(train_reference(args, order, bf16=True, heldout=heldout)[1])
        seed_noise = max((abs(h - held16) for h in shuffled), default=0.0)
        held_tolerance = max(seed_noise, 2 * abs(held16 - held32))
        report.update({"heldout_fp32": held32, "heldout_bf16": held16, "heldout_shuffled_bf16": shuffled,
                       "heldout_seed_noise": seed_noise, "heldout_tolerance": held_tolerance})
        print(f"held-out: reference fp32 {held32:.4f}, bf16 {held16:.4f}, bf16 on {len(shuffled)} other record "
              f"orders {', '.join(f'{h:.4f}' for h in shuffled)}; seed noise {seed_noise:.4f}; "
              f"tolerance {held_tolerance:.4f}")
    for label, curve in ferry.items():
        wf = windows(curve)
        worst = max(abs(a - b) for a, b in zip(wf, w16))
        first = abs(curve[0] - ref32[0])
        passed = worst <= tolerance and first <= 0.01 * ref32[0] and all(math.isfinite(x) for x in curve)
        entry = {"losses": curve, "max_window_diff": worst, "step1_diff": first}
        held_text = ""
        if heldout:
            held_diff = abs(ferry_heldout[label] - held16)
            passed &= held_diff <= held_tolerance
            entry.update({"heldout": ferry_heldout[label], "heldout_diff": held_diff})
            held_text = (f"; held-out {ferry_heldout[label]:.4f}, |ferry - ref_bf16| {held_diff:.4f} "
                         f"(tolerance {held_tolerance:.4f})")
        ok &= passed
        entry["pass"] = passed
        report["ferry"][label] = entry
        print(f"{label}: {curve[0]:.4f} -> {curve[-1]:.4f}; max window |ferry - ref_bf16| {worst:.4f} "
              f"(tolerance {tolerance:.4f}); step 1 |ferry - ref_fp32| {first:.5f}{held_text}; "
              f"{'PASS' if passed else 'FAIL'}")
    print("step   ref_fp32  ref_bf16  " + "  ".join(f"{label:>10}" for label in ferry))
    for s in list(range(0, args.steps, 20)) + [args.steps - 1]:
        print(f"{s + 1:4d}   {ref32[s]:8.4f}  {ref16[s]:8.4f}  " +
              "  ".join(f"{ferry[label][s]:10.4f}" for label in ferry))
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
