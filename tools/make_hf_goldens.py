#!/usr/bin/env python3
"""Write Hugging Face golden fixtures for ferry's CPU tests.

    python3 tools/make_hf_goldens.py OUTDIR [--case NAME ...]

For every case this builds a tiny, seeded random model with transformers, saves it with
save_pretrained (float32, safetensors), reloads it in float64 with eager attention and writes
next to it:

  golden.safetensors  input_ids, labels, position_ids (int64); logits, loss, grad.<name>,
                      step<k>.<name> (k = 1..3), grad_norm, lr, step_loss (float32)
  golden.json         optimizer / schedule / clipping settings, losses, versions, notes

Everything is computed in float64 on the CPU. transformers keeps a few float32 "islands" even
in a float64 model (RMSNorm statistics, RoPE cos/sin, the eager softmax, the loss); for the
goldens these are lifted to float64 by instance-level forward overrides that keep HF's formulas
(see Float64Islands). The script checks that the overridden model agrees with stock
transformers to float32 accuracy and records the difference in golden.json.

Needs torch, transformers (5.x), safetensors. Runs on the device machine (tools/README.md).
"""

import argparse
import inspect
import json
import math
import os
import shutil
import sys
import traceback
import types

import torch
import torch.nn.functional as F

import safetensors
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

try:
    from transformers import get_cosine_schedule_with_warmup
except ImportError:  # pragma: no cover - older layouts
    from transformers.optimization import get_cosine_schedule_with_warmup


# ----------------------------------------------------------------------------------------------
# Settings shared by every case

VOCAB = 96
HIDDEN = 32
HEADS = 4
KV_HEADS = 2
LAYERS = 2
MAX_POS = 256

LR = 1e-2
BETAS = (0.9, 0.95)
EPS = 1e-8
WEIGHT_DECAY = 0.1
WARMUP_STEPS = 1
TOTAL_STEPS = 3

STD_MATRIX = 0.1  # linear and embedding weights: logits spread ~0.5, grads not tiny
STD_BIAS = 0.2  # q/k/v biases large enough to matter
STD_NORM = 0.1  # norm weights are 1 + STD_NORM * randn

IGNORE = -100


# ----------------------------------------------------------------------------------------------
# Float64 everywhere: lift HF's float32 islands while keeping its formulas


class Float64Islands:
    """Instance-level overrides that keep float64 inputs in float64.

    HF computes, even for a float64 model: RMSNorm in float32 (`hidden.to(torch.float32)`),
    RoPE angles/cos/sin in float32 (`inv_freq.float() @ position_ids.float()`), and the eager
    softmax with `dtype=torch.float32`. Each override below reproduces the same formula in
    float64 and falls back to the stock forward when inactive or when the input is not float64.
    """

    active = False
    disabled = False
    _orig_softmax = None
    calls = {"rmsnorm": 0, "rope": 0, "softmax": 0}  # float64 paths taken

    @classmethod
    def install_softmax(cls):
        if cls._orig_softmax is not None:
            return
        orig = torch.nn.functional.softmax
        cls._orig_softmax = orig

        def softmax(input, dim=None, _stacklevel=3, dtype=None):
            if cls.active and dtype == torch.float32 and input.dtype == torch.float64:
                dtype = torch.float64
                cls.calls["softmax"] += 1
            return orig(input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)

        torch.nn.functional.softmax = softmax

    @classmethod
    def patch_model(cls, model):
        patched = {}
        if cls.disabled:
            return patched
        for name, mod in model.named_modules():
            cname = type(mod).__name__
            if cname.endswith("RMSNorm") and hasattr(mod, "weight") and hasattr(mod, "variance_epsilon"):
                mod.forward = types.MethodType(_rmsnorm_forward64, mod)
                patched.setdefault(cname, []).append(name)
            elif cname.endswith("RotaryEmbedding") and hasattr(mod, "inv_freq"):
                mod.forward = types.MethodType(_rope_forward64, mod)
                patched.setdefault(cname, []).append(name)
        return {k: len(v) for k, v in patched.items()}


def _rmsnorm_forward64(self, hidden_states, *args, **kwargs):
    if not Float64Islands.active or hidden_states.dtype != torch.float64 or args or kwargs:
        return type(self).forward(self, hidden_states, *args, **kwargs)
    Float64Islands.calls["rmsnorm"] += 1
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def _rope_forward64(self, x, position_ids=None, *args, **kwargs):
    if not Float64Islands.active or x.dtype != torch.float64 or args or any(
        v is not None for v in kwargs.values()
    ):
        return type(self).forward(self, x, position_ids, *args, **kwargs)
    Float64Islands.calls["rope"] += 1
    # inv_freq holds HF's float32-computed frequencies (upcast by model.to / dtype=float64).
    inv = self.inv_freq.to(device=x.device, dtype=torch.float64)  # (head_dim/2,)
    freqs = position_ids.to(torch.float64)[:, :, None] * inv[None, None, :]  # (B, S, head_dim/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (B, S, head_dim)
    scale = float(getattr(self, "attention_scaling", 1.0))
    return emb.cos() * scale, emb.sin() * scale


# ----------------------------------------------------------------------------------------------
# Cases


def common_config(**kw):
    cfg = dict(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=MAX_POS,
        rms_norm_eps=1e-5,
        hidden_act="silu",
        initializer_range=0.02,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        dtype="float32",
        attn_implementation="eager",
    )
    cfg.update(kw)
    return cfg


# original_max_position_embeddings = 200 (not 64): with head_dim 8 and theta 5e5 the RoPE
# wavelengths are 6.3, 167, 4443, 1.2e5 tokens; the llama3 bands are [200/4, 200/1] = [50, 200],
# so one frequency is kept, one is smoothed and two are divided by `factor`. With 64 the band
# [16, 64] holds no frequency and the smoothing branch would go untested.
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 200,
}

# YaRN at head_dim 16, theta 1e4, original context 4096: the correction range is dimensions
# [2, 6], so two frequencies are interpolated, three blended and three kept, and the attention
# temperature is 0.1 ln 4 + 1.
YARN_ROPE = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 4.0,
    "original_max_position_embeddings": 4096,
}

CASES = {
    "llama3": dict(
        arch="LlamaForCausalLM",
        config=common_config(rope_parameters=dict(LLAMA3_ROPE), rms_norm_eps=1e-5),
        seed=1001,
    ),
    "mistral": dict(
        arch="MistralForCausalLM",
        config=common_config(
            intermediate_size=80,
            sliding_window=None,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-5,
        ),
        seed=1002,
    ),
    "qwen2": dict(
        arch="Qwen2ForCausalLM",
        config=common_config(
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            rms_norm_eps=1e-6,
            use_sliding_window=False,
        ),
        seed=1003,
    ),
    "qwen3": dict(
        arch="Qwen3ForCausalLM",
        config=common_config(
            intermediate_size=80,
            head_dim=16,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            rms_norm_eps=1e-6,
            use_sliding_window=False,
            attention_bias=False,
        ),
        seed=1004,
    ),
    "tied": dict(
        arch="Qwen2ForCausalLM",
        config=common_config(
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            rms_norm_eps=1e-6,
            use_sliding_window=False,
        ),
        seed=1005,
    ),
    "yarn": dict(
        arch="Qwen3ForCausalLM",
        config=common_config(
            intermediate_size=80,
            head_dim=16,
            rope_parameters=dict(YARN_ROPE),
            rms_norm_eps=1e-6,
            use_sliding_window=False,
            attention_bias=False,
        ),
        seed=1007,
    ),
    "packed": dict(
        arch="LlamaForCausalLM",
        config=common_config(
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-5,
        ),
        seed=1006,
        documents=[7, 9, 8],
    ),
    # One 4,096-token sequence (issue 22, long context: ferry's sequence tiles and full-length
    # attention against transformers). Full logits would be 1.5 MiB, so only LONG_LOGIT_ROWS rows
    # of them are stored (logits_at, at logit_positions); gradients and steps are stored whole.
    "long": dict(
        arch="LlamaForCausalLM",
        config=common_config(
            max_position_embeddings=4096,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-5,
        ),
        seed=1008,
        seq_len=4096,
    ),
}

LONG_LOGIT_ROWS = 32


def config_class(arch):
    return {
        "LlamaForCausalLM": transformers.LlamaConfig,
        "MistralForCausalLM": transformers.MistralConfig,
        "Qwen2ForCausalLM": transformers.Qwen2Config,
        "Qwen3ForCausalLM": transformers.Qwen3Config,
    }[arch]


# ----------------------------------------------------------------------------------------------
# Helpers


def is_no_decay(name):
    return "norm" in name or name.endswith(".bias")


def init_params(model, seed):
    """Deterministic init: norms 1 + 0.1 randn, biases 0.2 randn, matrices 0.1 randn."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied weights appear once
            r = torch.randn(p.shape, generator=g, dtype=torch.float64)
            if "norm" in name:
                v = 1.0 + STD_NORM * r
            elif name.endswith(".bias"):
                v = STD_BIAS * r
            else:
                v = STD_MATRIX * r
            p.copy_(v.to(p.dtype))


def save_model(model, path):
    kw = {}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        kw["safe_serialization"] = True
    model.save_pretrained(path, **kw)
    st = os.path.join(path, "model.safetensors")
    if not os.path.exists(st):
        raise RuntimeError(f"save_pretrained wrote no model.safetensors in {path}: {os.listdir(path)}")
    return st


def saved_names(model, st_path):
    """Map each parameter (by id) to the name(s) save_pretrained kept for it."""
    with safe_open(st_path, framework="pt") as f:
        keys = list(f.keys())
        meta = f.metadata()
    # Keyed by storage address: tied weights share it, whatever state_dict() returns.
    sd = model.state_dict(keep_vars=True)
    by_ptr = {}
    for k in keys:
        if k not in sd:
            raise RuntimeError(f"saved key {k} is not in the model's state_dict")
        by_ptr.setdefault(sd[k].data_ptr(), []).append(k)
    params = {p.data_ptr(): n for n, p in model.named_parameters()}
    missing = [n for i, n in params.items() if i not in by_ptr]
    if missing:
        raise RuntimeError(f"parameters not saved under any name: {missing}")
    extra = [ks for i, ks in by_ptr.items() if i not in params]
    if extra:
        raise RuntimeError(f"saved tensors that are not parameters: {extra}")
    # (saved name, parameter) in the order of model.named_parameters()
    named = []
    for n, p in model.named_parameters():
        for k in by_ptr[p.data_ptr()]:
            named.append((k, p))
    return named, keys, meta


def causal_ce(logits, labels):
    """(sum of token CE over counted targets, number of counted targets); HF shift convention."""
    v = logits.shape[-1]
    sl = logits[:, :-1, :].reshape(-1, v)
    tl = labels[:, 1:].reshape(-1)
    ce = F.cross_entropy(sl, tl, ignore_index=IGNORE, reduction="sum")
    return ce, int((tl != IGNORE).sum())


class Batch:
    def __init__(self, input_ids, labels, position_ids, documents=None):
        self.input_ids = input_ids
        self.labels = labels
        self.position_ids = position_ids
        self.documents = documents  # list of lengths for a single packed row, else None

    def segments(self):
        """(ids, labels, pos) pieces that are run as independent sequences."""
        if self.documents is None:
            return [(self.input_ids, self.labels, self.position_ids)]
        out, s = [], 0
        for n in self.documents:
            out.append(
                (
                    self.input_ids[:, s : s + n],
                    self.labels[:, s : s + n],
                    torch.arange(n, dtype=torch.int64)[None, :],
                )
            )
            s += n
        return out


def forward_logits(model, batch):
    parts = []
    for ids, _, pos in batch.segments():
        parts.append(model(input_ids=ids, position_ids=pos, use_cache=False).logits)
    return torch.cat(parts, dim=1)


def mean_loss(model, batch):
    total, count = None, 0
    for ids, labels, pos in batch.segments():
        logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits
        ce, n = causal_ce(logits, labels)
        total = ce if total is None else total + ce
        count += n
    return total / count, count


def make_batch(case, seed):
    g = torch.Generator().manual_seed(seed + 7919)
    docs = case.get("documents")
    if case.get("seq_len"):
        s = case["seq_len"]
        ids = torch.randint(0, VOCAB, (1, s), generator=g, dtype=torch.int64)
        ids[0, 5] = VOCAB - 1
        ids[0, s - 7] = 0
        labels = ids.clone()
        labels[0, :3] = IGNORE  # a masked prompt
        labels[0, s // 2] = IGNORE  # and one masked token mid-row
        pos = torch.arange(s, dtype=torch.int64)[None, :]
        return Batch(ids, labels, pos)
    if docs is None:
        b, s = 2, 16
        ids = torch.randint(0, VOCAB, (b, s), generator=g, dtype=torch.int64)
        ids[0, 5] = VOCAB - 1  # the edges of the vocabulary appear
        ids[1, 7] = 0
        labels = ids.clone()
        labels[0, :3] = IGNORE  # a masked prompt
        labels[1, 9] = IGNORE  # and one masked token mid-row
        pos = torch.arange(s, dtype=torch.int64)[None, :].repeat(b, 1)
        return Batch(ids, labels, pos)
    s = sum(docs)
    ids = torch.randint(0, VOCAB, (1, s), generator=g, dtype=torch.int64)
    ids[0, 3] = VOCAB - 1
    labels = ids.clone()
    pos = torch.empty((1, s), dtype=torch.int64)
    start = 0
    for n in docs:
        labels[0, start] = IGNORE  # a document's first token is never a target
        pos[0, start : start + n] = torch.arange(n)
        start += n
    return Batch(ids, labels, pos, documents=list(docs))


def nice(x):
    """Two significant digits, so the value is exact enough in any language's parser."""
    return float(f"{x:.2g}")


def load64(path):
    m = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float64, attn_implementation="eager"
    )
    m.to(torch.float64)
    m.eval()
    return m


def train(path, batch, max_norm, patch=True):
    """Three steps of clip + AdamW + cosine schedule from the saved weights, all in float64."""
    model = load64(path)
    if patch:
        Float64Islands.patch_model(model)
    named, _, _ = saved_names(model, os.path.join(path, "model.safetensors"))
    seen, decay, no_decay = set(), [], []
    for n, p in named:
        if id(p) in seen:
            continue
        seen.add(id(p))
        (no_decay if is_no_decay(n) else decay).append(p)
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": WEIGHT_DECAY},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=LR,
        betas=BETAS,
        eps=EPS,
        weight_decay=WEIGHT_DECAY,
        foreach=False,
    )
    sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=WARMUP_STEPS, num_training_steps=TOTAL_STEPS)
    params = [p for p in model.parameters()]
    rec = {"grad_norm": [], "lr": [], "loss": [], "steps": [], "grads0": None}
    for k in range(TOTAL_STEPS):
        opt.zero_grad(set_to_none=True)
        loss, _ = mean_loss(model, batch)
        loss.backward()
        if k == 0:
            rec["grads0"] = {n: p.grad.detach().clone() for n, p in named}
        gn = torch.nn.utils.clip_grad_norm_(params, max_norm)
        rec["grad_norm"].append(float(gn))
        rec["lr"].append(float(opt.param_groups[0]["lr"]))
        rec["loss"].append(float(loss.detach()))
        opt.step()
        sched.step()
        rec["steps"].append({n: p.detach().clone() for n, p in named})
    rec["named"] = [n for n, _ in named]
    rec["no_decay"] = [n for n, _ in named if is_no_decay(n)]
    return rec


def rel_diff(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


# ----------------------------------------------------------------------------------------------
# One case


def llama3_expected_inv_freq(head_dim, rp):
    """Llama 3.1 RoPE scaling, written out from the published formula, in float64."""
    base = rp["rope_theta"]
    inv = [1.0 / base ** (i / head_dim) for i in range(0, head_dim, 2)]
    lo = rp["original_max_position_embeddings"] / rp["low_freq_factor"]
    hi = rp["original_max_position_embeddings"] / rp["high_freq_factor"]
    out, regimes = [], []
    for f in inv:
        wl = 2 * math.pi / f
        if wl < hi:
            out.append(f)
            regimes.append("kept")
        elif wl > lo:
            out.append(f / rp["factor"])
            regimes.append("scaled")
        else:
            s = (rp["original_max_position_embeddings"] / wl - rp["low_freq_factor"]) / (
                rp["high_freq_factor"] - rp["low_freq_factor"]
            )
            out.append((1 - s) * f / rp["factor"] + s * f)
            regimes.append("smoothed")
    return inv, out, regimes


def run_case(name, case, outdir):
    print(f"\n=== {name} ({case['arch']}) ===", flush=True)
    path = os.path.join(outdir, name)
    if os.path.exists(path):
        shutil.rmtree(path)
    os.makedirs(path)
    seed = case["seed"]
    torch.manual_seed(seed)

    # 1. tiny float32 model, seeded weights, saved as HF would save it
    cfg = config_class(case["arch"])(**case["config"])
    model_cls = getattr(transformers, case["arch"])
    model32 = model_cls(cfg)
    model32.to(torch.float32)
    init_params(model32, seed)
    st_path = save_model(model32, path)
    with open(os.path.join(path, "config.json")) as f:
        saved_cfg = json.load(f)

    # 2. reload in float64 from the files (proves the files alone define the golden)
    model = load64(path)
    named, saved_keys, st_meta = saved_names(model, st_path)
    with safe_open(st_path, framework="pt") as f:
        for k in saved_keys:
            t = f.get_tensor(k)
            if t.dtype != torch.float32:
                raise RuntimeError(f"{k} saved as {t.dtype}, expected float32")
            p = dict(named)[k]
            if not torch.equal(p.detach().to(torch.float32), t):
                raise RuntimeError(f"{k}: reloaded float64 parameter differs from the saved float32 tensor")
    tied_info = None
    if cfg.tie_word_embeddings:
        emb = model.get_input_embeddings().weight
        head = model.get_output_embeddings().weight
        tied_info = {
            "same_parameter_after_load": emb is head or emb.data_ptr() == head.data_ptr(),
            "saved_keys_for_embedding": [k for k in saved_keys if "embed" in k or "lm_head" in k],
        }
        print("tied:", tied_info)
        if not tied_info["same_parameter_after_load"]:
            raise RuntimeError("tied embeddings are not one parameter after reload")

    batch = make_batch(case, seed)
    notes = {}

    # 3. stock transformers (float32 islands) vs float64 throughout
    with torch.no_grad():
        Float64Islands.active = False
        logits_stock = forward_logits(model, batch)
        hf_loss = None
        if batch.documents is None:
            out = model(
                input_ids=batch.input_ids,
                position_ids=batch.position_ids,
                labels=batch.labels,
                use_cache=False,
            )
            hf_loss = float(out.loss)
    patched = Float64Islands.patch_model(model)
    Float64Islands.active = True
    before = dict(Float64Islands.calls)
    with torch.no_grad():
        logits = forward_logits(model, batch)
        loss, count = mean_loss(model, batch)
    used = {k: Float64Islands.calls[k] - before[k] for k in before}
    print("float64 overrides:", patched, "calls:", used)
    notes["float64_overrides"] = patched
    notes["float64_override_calls"] = used
    if not all(used.values()):
        print(f"WARNING {name}: some float32 islands were not lifted: {used}")
    d = rel_diff(logits_stock, logits)
    print(f"stock-vs-float64 logits max|diff|/max|ref| = {d:.3e}")
    notes["stock_transformers_logits_rel_diff"] = d
    if not (d < 1e-5):
        # The overrides would change the model: drop them for good and use stock transformers.
        print(f"WARNING {name}: float64 overrides disagree with stock transformers ({d}); disabling them")
        Float64Islands.active = False
        Float64Islands.disabled = True
        with torch.no_grad():
            logits = forward_logits(model, batch)
            loss, count = mean_loss(model, batch)
        used = {k: 0 for k in used}
        notes["float64_overrides_disabled"] = True
    if hf_loss is not None:
        notes["hf_model_loss"] = hf_loss
        notes["hf_model_loss_rel_diff"] = abs(hf_loss - float(loss)) / abs(float(loss))
        print(f"loss {float(loss):.10f}  (HF labels= path: {hf_loss:.10f})")
        if notes["hf_model_loss_rel_diff"] > 1e-5:
            print(f"WARNING {name}: our loss disagrees with HF's labels= loss")
    else:
        print(f"loss {float(loss):.10f}")

    if batch.documents is not None:
        # What does transformers do with a packed row and reset position_ids, no mask given?
        with torch.no_grad():
            packed = model(
                input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False
            ).logits
        pd = float((packed - logits).abs().max())
        notes["hf_packed_row_with_position_ids_max_abs_diff"] = pd
        notes["hf_packed_row_with_position_ids_matches_documents"] = pd < 1e-9
        print(f"HF on the packed row with reset position_ids vs separate documents: max|diff| = {pd:.3e}")

    rope_info = None
    rp = saved_cfg.get("rope_parameters") or {}
    if rp.get("rope_type") == "llama3":
        rot = [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")][0]
        hd = saved_cfg.get("head_dim") or HIDDEN // HEADS
        default, expected, regimes = llama3_expected_inv_freq(hd, rp)
        got = [float(x) for x in rot.inv_freq.to(torch.float64)]
        err = max(abs(a - b) / b for a, b in zip(got, expected))
        changed = [abs(a - b) / b > 1e-6 for a, b in zip(got, default)]
        rope_info = {
            "inv_freq_unscaled": default,
            "inv_freq_hf": got,
            "inv_freq_formula": expected,
            "regimes": regimes,
            "hf_vs_formula_max_rel": err,
            "changed_by_scaling": changed,
        }
        print("llama3 rope:", json.dumps(rope_info))
        if err > 1e-6 or not any(changed) or set(regimes) != {"kept", "smoothed", "scaled"}:
            print("WARNING llama3 rope scaling is not what the case intends (see rope_llama3 in golden.json)")

    if rp.get("rope_type") == "yarn":
        rot = [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")][0]
        rope_info = {
            "inv_freq_hf": [float(x) for x in rot.inv_freq.to(torch.float64)],
            "attention_scaling_hf": float(getattr(rot, "attention_scaling", 1.0)),
        }
        print("yarn rope:", json.dumps(rope_info))

    # 4. training: pick max_norm so clipping is active at every step
    gn0 = None
    with torch.enable_grad():
        model.zero_grad(set_to_none=True)
        l0, _ = mean_loss(model, batch)
        l0.backward()
        gn0 = float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters())))
    max_norm = nice(0.5 * gn0)
    for attempt in range(6):
        rec = train(path, batch, max_norm)
        if min(rec["grad_norm"]) > max_norm * 1.01:
            break
        print(f"grad norms {rec['grad_norm']} not all above max_norm {max_norm}; retrying")
        max_norm = nice(0.5 * min(rec["grad_norm"]))
    else:
        raise RuntimeError(f"{name}: could not find a max_norm that clips every step")
    print(f"max_norm {max_norm}  grad_norm {rec['grad_norm']}  lr {rec['lr']}  step_loss {rec['loss']}")
    notes["step1_loss_minus_golden_loss"] = rec["loss"][0] - float(loss)
    if abs(rec["loss"][0] - float(loss)) > 1e-12 * max(1.0, abs(float(loss))):
        print(f"WARNING {name}: training step 1 loss differs from the golden loss")
    g0 = math.sqrt(sum(float((g**2).sum()) for g in rec["grads0"].values()))
    if abs(g0 - rec["grad_norm"][0]) > 1e-9 * g0:
        print(f"WARNING {name}: grad norm bookkeeping is off ({g0} vs {rec['grad_norm'][0]})")

    # 5. write golden.safetensors + golden.json
    out = {
        "input_ids": batch.input_ids.contiguous(),
        "labels": batch.labels.contiguous(),
        "position_ids": batch.position_ids.contiguous(),
        "loss": loss.detach().reshape(1).to(torch.float32),
        "grad_norm": torch.tensor(rec["grad_norm"], dtype=torch.float32),
        "lr": torch.tensor(rec["lr"], dtype=torch.float32),
        "step_loss": torch.tensor(rec["loss"], dtype=torch.float32),
    }
    if case.get("seq_len"):
        # Rows spread over the sequence, the first and the last ones included.
        s = batch.input_ids.shape[1]
        at = torch.linspace(0, s - 1, LONG_LOGIT_ROWS).round().to(torch.int64)
        out["logit_positions"] = at.contiguous()
        out["logits_at"] = logits[0, at].to(torch.float32).contiguous()
    else:
        out["logits"] = logits.to(torch.float32).contiguous()
    for n, g in rec["grads0"].items():
        out[f"grad.{n}"] = g.to(torch.float32).contiguous()
    for k, params in enumerate(rec["steps"], start=1):
        for n, p in params.items():
            out[f"step{k}.{n}"] = p.to(torch.float32).contiguous()
    save_file(out, os.path.join(path, "golden.safetensors"), metadata={"format": "pt"})

    shapes = {n: list(p.shape) for n, p in named}
    golden = {
        "case": name,
        "architecture": case["arch"],
        "seed": seed,
        "batch": list(batch.input_ids.shape),
        "lr": LR,
        "betas": list(BETAS),
        "eps": EPS,
        "weight_decay": WEIGHT_DECAY,
        "no_decay": "norm weights and biases",
        "no_decay_params": rec["no_decay"],
        "max_grad_norm": max_norm,
        "warmup_steps": WARMUP_STEPS,
        "total_steps": TOTAL_STEPS,
        "schedule": "cosine",
        "lr_per_step": rec["lr"],
        "grad_norm_per_step": rec["grad_norm"],
        "loss": float(loss),
        "loss_per_step": rec["loss"],
        "num_label_tokens": count,
        "params": shapes,
        "saved_tensor_names": saved_keys,
        "model_safetensors_metadata": st_meta,
        "semantics": {
            "labels": "HF convention, unshifted: logits[:, t] predicts labels[:, t+1]; -100 is ignored",
            "loss": "sum of token cross-entropy over counted targets / number of counted targets (whole batch)",
            "grad": "grad.<name>: gradient of the mean loss at the initial (saved) weights, before clipping",
            "step": "step<k>.<name>: parameters after k optimizer steps; each step = zero_grad, forward on the "
            "same batch, backward, clip_grad_norm_(max_grad_norm), AdamW.step(), scheduler.step()",
            "grad_norm": "total L2 norm over all parameters returned by clip_grad_norm_ (before clipping); "
            "torch clips with coef = min(1, max_norm / (total_norm + 1e-6))",
            "lr": "lr used by step k (cosine with 1 warmup step: 0, then lr, then lr/2)",
            "adamw": "torch.optim.AdamW foreach=False: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; "
            "v = b2*v + (1-b2)*g^2; p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps); "
            "t counts every step, the lr=0 first step included",
            "precision": (
                "float64 throughout (HF float32 islands lifted, see notes); stored as float32"
                if all(used.values())
                else f"float64 with some HF float32 islands left (override calls {used}); stored as float32"
            ),
        },
        "notes": notes,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "safetensors": safetensors.__version__,
    }
    if batch.documents is not None:
        golden["documents"] = [batch.documents]
        golden["semantics"]["packed"] = (
            "one row holding documents of the listed lengths, position_ids reset to 0 at each start; "
            "logits/loss/grads are those of the documents run separately (document-masked attention), "
            "concatenated; each document's first label is -100"
        )
    if case.get("seq_len"):
        golden["semantics"]["logits_at"] = (
            "logits_at[i] = logits[0, logit_positions[i]]: only these rows of the logits are stored"
        )
    if tied_info is not None:
        golden["tied"] = tied_info
    if rope_info is not None:
        golden["rope_" + rp.get("rope_type")] = rope_info
    with open(os.path.join(path, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(path, x)) for x in os.listdir(path))
    print(f"wrote {path}: {sorted(os.listdir(path))}, {size / 1024:.0f} KiB")
    return {
        "case": name,
        "loss": float(loss),
        "max_grad_norm": max_norm,
        "grad_norm": rec["grad_norm"],
        "step_loss": rec["loss"],
        "notes": notes,
        "saved_keys": len(saved_keys),
        "kib": round(size / 1024),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="only these cases")
    args = ap.parse_args()
    torch.set_default_dtype(torch.float32)
    Float64Islands.install_softmax()
    print(
        f"python {sys.version.split()[0]}  torch {torch.__version__}  transformers {transformers.__version__}  "
        f"safetensors {safetensors.__version__}  threads {torch.get_num_threads()}",
        flush=True,
    )
    os.makedirs(args.outdir, exist_ok=True)
    summary, failed = [], []
    for name in args.case or list(CASES):
        try:
            summary.append(run_case(name, CASES[name], args.outdir))
        except Exception:  # keep going: one broken case must not cost the others
            traceback.print_exc()
            failed.append(name)
    print("\nSUMMARY")
    for s in summary:
        print(json.dumps(s))
    if failed:
        print(f"FAILED cases: {failed}")
        sys.exit(1)


if __name__ == "__main__":
    main()
