#!/usr/bin/env python3
"""Golden logits for the KV cache's rounding dtypes (loom's --kv-cache-dtype bfloat16, fp8, int8).

Run:  python3 tests/golden/make_kv_golden.py

For each case in CASES and each dtype, tests/golden/kv_cache/<case>_<dtype>.safetensors holds two
prompts and the logits transformers computes for them when every key and value its cache stores
is first rounded as loom's cache rounds it (src/kernels/kv_format.c):
  bfloat16  each value to bf16 (nearest even);
  fp8       each head's values of a position (a latent cache: each group of gcd(kv_lora, rope)
            of them) divided by s = max|x| / 448, cast to float8_e4m3fn (nearest even), times s;
  int8      the same with s = max|x| / 127 and torch.round (nearest even), clamped to +-127;
an all-zero head gives zeros. The rounding is applied inside transformers' own cache layers
(DynamicLayer.update and DynamicSlidingWindowLayer.update take the rounded states), so the
attention of the pass that writes a position already reads it rounded, as loom's does. The model
is the case's folder, fp32, eager attention, one unpadded sequence at a time.

Rounding is a step function: two fp32 computations of one key that differ in the last bits
(loom's ordered sums against a BLAS) round to neighbouring values where the key lies near the
middle between two, and the logits then part by far more than 1e-4. So the prompts are drawn
(seeded, reproducible) until every stored value is far from such a middle: the same prompts run
in fp64 too, and each value's distance to its rounding boundary must exceed MARGIN times the gap
between its fp32 and fp64 values (at least an fp32 ulp; both in units of the rounding step). Any
fp32 computation whose error on each value is within MARGIN times transformers' own then rounds
every value as transformers did. The prompts are short (LENGTHS), because the chance that none of N values lies
near a boundary falls with N.

The script also checks that the cache path (prefill, then one token a step) agrees with the full
forward to 1e-5, and that the rounding moves the logits (else the hook did nothing). The layout
is golden.safetensors' (README.md), with `kv_cache_dtype`, `seed` and `margin` in the metadata.
"""
import math
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import full_logits, incremental_logits, make_ids, save_safetensors  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
# plain GQA; Gemma 2's soft-capped scores and alternating sliding layers; Gemma 3's q/k norms,
# local rotary base and sliding layers; DeepSeek-V3's latent cache, whose kv_c and k_pe transformers
# caches as loom does (one latent row a token), in scale groups of gcd(kv_lora, rope). Gemma 3 in bf16 is left out: its keys and values sit too
# close to bf16's boundaries for their fp32 error (8 to 24 of 4224 values under MARGIN in each of
# the first seeds), and bf16 has no scale whose use the other two cases leave unexercised.
CASES = {"llama": ["bfloat16", "fp8", "int8"], "gemma2": ["bfloat16", "fp8", "int8"], "gemma3": ["fp8", "int8"],
         "deepseek_v3": ["bfloat16", "fp8", "int8"]}
LENGTHS, PREFILL = (6, 5), (4, 3)  # two decode steps each, as golden_run takes them together
MARGIN = 4.0
TRIES = 5000
GROUP = 0  # values that share a scale: a head, or gcd(kv_lora_rank, qk_rope_head_dim) (set per case)
ORIGINAL_UPDATES = {cls: cls.__dict__["update"] for cls in (DynamicLayer, DynamicSlidingWindowLayer)}


def groups(x):
    """x [..., n] as [..., n / GROUP, GROUP]: the values that share a scale."""
    return x.reshape(*x.shape[:-1], x.shape[-1] // GROUP, GROUP)


def scale(x, dtype):
    s = x.abs().amax(-1, keepdim=True) / (448.0 if dtype == "fp8" else 127.0)
    return s, torch.where(s > 0, s, torch.ones_like(s))


def round_like_loom(x, dtype):
    """x as loom's cache holds it, widened back to x's dtype."""
    if dtype == "bfloat16":
        return x.to(torch.bfloat16).to(x.dtype)
    g = groups(x)
    s, safe = scale(g, dtype)
    y = g / safe
    q = y.to(torch.float8_e4m3fn).to(x.dtype) if dtype == "fp8" else torch.round(y).clamp(-127, 127)
    return torch.where(s > 0, q * s, torch.zeros_like(q)).reshape(x.shape)


def in_steps(x, dtype):
    """x in units of its rounding step (fp64), so that the boundaries lie at half-integers."""
    x = x.double()
    if dtype == "int8":
        return groups(x) / scale(groups(x), dtype)[1]
    if dtype == "fp8":
        y = groups(x) / scale(groups(x), dtype)[1]
        exp = torch.floor(torch.log2(y.abs().clamp_min(2.0**-20))).clamp_min(-6)
        return y / torch.pow(2.0, exp - 3)
    exp = torch.floor(torch.log2(x.abs().clamp_min(2.0**-120)))
    return x / torch.pow(2.0, exp - 7)


class RoundingCache:
    """Makes transformers' dynamic cache layers store (and return) the states rounded to dtype,
    keeping the unrounded ones in `seen` when recording."""

    def __init__(self, dtype, record=False):
        self.dtype, self.record, self.seen = dtype, record, []

    def __enter__(self):
        for cls, orig in ORIGINAL_UPDATES.items():
            def update(layer, k, v, *args, _orig=orig, **kwargs):
                if self.record:
                    self.seen += [k.detach().clone(), v.detach().clone()]
                return _orig(layer, round_like_loom(k, self.dtype), round_like_loom(v, self.dtype), *args, **kwargs)

            cls.update = update
        return self

    def __exit__(self, *exc):
        for cls, orig in ORIGINAL_UPDATES.items():
            cls.update = orig


@torch.no_grad()
def cached_full_logits(model, ids):
    """The full forward with use_cache=True: its keys and values pass through the cache."""
    return model(input_ids=ids[None, :], use_cache=True).logits[0].float()


def margin_ratio(m32, m64, ids, dtype):
    """Over every value both prompts store: the least ratio of its distance to a rounding boundary
    to its fp32 error (at least one fp32 ulp), and that distance and error."""
    values = []
    for model in (m32, m64):
        with RoundingCache(dtype, record=True) as rc:
            for s in ids:
                cached_full_logits(model, s)
        values.append(rc.seen)
    worst = (float("inf"), 0.5, 0.0)
    for x32, x64 in zip(*values):
        y32, y64 = in_steps(x32, dtype), in_steps(x64, dtype)
        gap = torch.maximum((y32 - y64).abs(), y64.abs() * 2.0**-24)
        closest = ((y64 - torch.floor(y64)) - 0.5).abs()
        ratio = closest / gap
        i = int(ratio.argmin())
        if ratio.flatten()[i] < worst[0]:
            worst = (ratio.flatten()[i].item(), closest.flatten()[i].item(), gap.flatten()[i].item())
    return worst


def rounded_logits(model, ids, dtype):
    """Both prompts' logits through the rounding cache, and the largest gap between its cache path
    (prefill, then a token a step) and its full forward."""
    logits, gap = [], 0.0
    with RoundingCache(dtype):
        for s, prefill in zip(ids, PREFILL):
            logits.append(cached_full_logits(model, s))
            gap = max(gap, (logits[-1] - incremental_logits(model, s, prefill)).abs().max().item())
    return logits, gap


def main():
    os.makedirs(os.path.join(HERE, "kv_cache"), exist_ok=True)
    for case, dtypes in CASES.items():
        d = os.path.join(HERE, case)
        m32 = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        m64 = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64, attn_implementation="eager",
                                                   experts_implementation="eager").eval()  # grouped_mm takes no fp64
        vocab = m32.config.vocab_size
        global GROUP
        cfg = m32.config
        GROUP = (math.gcd(cfg.kv_lora_rank, cfg.qk_rope_head_dim) if getattr(cfg, "kv_lora_rank", None)
                 else getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        for dtype in dtypes:
            for seed in range(TRIES):
                gen = torch.Generator().manual_seed(seed)
                ids = [make_ids(gen, vocab, n) for n in LENGTHS]
                ratio, closest, gap = margin_ratio(m32, m64, ids, dtype)
                if ratio < MARGIN:
                    continue
                logits, path_gap = rounded_logits(m32, ids, dtype)
                if path_gap < 1e-5:
                    break
            else:
                sys.exit(f"{case} {dtype}: no prompts in {TRIES} tries keep {MARGIN}x the fp32 error from a boundary")
            tensors = {}
            for s in range(2):
                moved = (logits[s] - full_logits(m32, ids[s])).abs().max().item()
                assert moved > 1e-3, f"{case} {dtype} seq {s}: rounding moved the logits by only {moved}"
                tensors[f"ids_{s}"], tensors[f"logits_{s}"] = ids[s], logits[s].contiguous()
            print(f"{case} {dtype}: seed {seed}; the tightest value lies {closest:.2g} steps from a boundary, "
                  f"its fp32 error {gap:.2g} steps ({ratio:.0f}x); cache path within {path_gap:.2g}")
            md = {"group": str(GROUP), "prefill_0": str(PREFILL[0]), "prefill_1": str(PREFILL[1]),
                  "decode_steps": str(LENGTHS[0] - PREFILL[0]), "case": case, "atol": "1e-4",
                  "kv_cache_dtype": dtype, "seed": str(seed), "margin": f"{ratio:.1f}",
                  "transformers": transformers.__version__, "torch": torch.__version__}
            save_safetensors(tensors, os.path.join(HERE, "kv_cache", f"{case}_{dtype}.safetensors"), md)


if __name__ == "__main__":
    main()
