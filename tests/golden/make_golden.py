#!/usr/bin/env python3
"""Generate golden logits from Hugging Face transformers for loom's parity tests.

Run:  python3 tests/golden/make_golden.py            (all cases)
      python3 tests/golden/make_golden.py llama qwen3 (a subset)

For each case, tests/golden/<case>/ gets:
  config.json, model.safetensors   -- written by save_pretrained (single file)
  generation_config.json           -- harmless leftover of save_pretrained
  golden.safetensors               -- ids_0/ids_1 (I64), logits_0/logits_1 (F32,
                                      [n, vocab]) + __metadata__ (prefill_0,
                                      prefill_1, decode_steps, versions, case)

Golden logits are computed from the model *re-loaded from the written files*
(so they test exactly what the C loader sees), in fp32, eager attention, full
causal forward of one unpadded sequence at a time.

Mistral sliding window (transformers 5.x, masking_utils.sliding_window_overlay):
    allowed(q, k) = (k <= q) and (k > q - sliding_window)
i.e. each query attends to exactly the last `sliding_window` keys INCLUDING
itself (positions q-W+1 .. q).  With W=4, position 6 sees keys 3,4,5,6.  This
script asserts that semantics empirically from the eager attention
probabilities (output_attentions=True), and asserts that the KV-cache decode
path (DynamicSlidingWindowLayer) agrees with the full forward.
"""
import inspect
import json
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import (  # noqa: E402
    GraniteConfig, GraniteForCausalLM,
    LlamaConfig, LlamaForCausalLM,
    MistralConfig, MistralForCausalLM,
    Qwen2Config, Qwen2ForCausalLM,
    Qwen3Config, Qwen3ForCausalLM,
    OlmoeConfig, OlmoeForCausalLM,
    MixtralConfig, MixtralForCausalLM,
    Qwen2MoeConfig, Qwen2MoeForCausalLM,
    Qwen3MoeConfig, Qwen3MoeForCausalLM,
    GraniteMoeConfig, GraniteMoeForCausalLM,
)

torch.set_num_threads(1)
HERE = os.path.dirname(os.path.abspath(__file__))

PREFILL = (7, 4)       # prefill lengths for sequence 0 and 1
DECODE_STEPS = 3       # teacher-forced single-token steps after the prefill
INCR_TOL = 1e-5        # HF cache path vs HF full forward
KEEP_FILES = {"config.json", "model.safetensors", "generation_config.json",
              "golden.safetensors"}

BASE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=96, vocab_size=128,
            max_position_embeddings=256, rms_norm_eps=1e-5,
            bos_token_id=1, eos_token_id=2)


MOE = dict(BASE, intermediate_size=48)


def case_defs():
    """name -> (model class, config class, config kwargs, options)."""
    return {
        "llama": (LlamaForCausalLM, LlamaConfig, dict(
            BASE, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
            rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0,
                             "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 32}), {}),
        "llama_tied": (LlamaForCausalLM, LlamaConfig, dict(
            BASE, tie_word_embeddings=True, head_dim=32, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), {}),
        "mistral": (MistralForCausalLM, MistralConfig, dict(
            BASE, sliding_window=4, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
            {"check_window": 4}),
        "qwen2": (Qwen2ForCausalLM, Qwen2Config, dict(
            BASE, tie_word_embeddings=False, use_sliding_window=False,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6}), {}),
        "qwen3": (Qwen3ForCausalLM, Qwen3Config, dict(
            BASE, head_dim=32, tie_word_embeddings=False, use_sliding_window=False,
            attention_bias=False, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6}), {}),
        # logits are divided by logits_scaling=8, so lm_head is initialised 8x
        # larger than the other weights to keep the softmax far from uniform.
        "granite": (GraniteForCausalLM, GraniteConfig, dict(
            BASE, tie_word_embeddings=False, embedding_multiplier=12.0,
            attention_multiplier=0.15, residual_multiplier=0.22,
            logits_scaling=8.0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
            {"lm_head_std_scale": 8.0}),
        "llama_bf16": (LlamaForCausalLM, LlamaConfig, dict(
            BASE, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
            {"half": "bfloat16"}),
        "llama_tp3": (LlamaForCausalLM, LlamaConfig, dict(
            BASE, hidden_size=96, num_attention_heads=6, num_key_value_heads=3,
            intermediate_size=96, vocab_size=120, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), {}),
        # f16 on disk: loom widens it to f32 at load (exact), so HF's fp32 compute on the
        # same f16-rounded weights is the oracle, as for bf16
        "llama_f16": (LlamaForCausalLM, LlamaConfig, dict(
            BASE, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
            {"half": "float16"}),
        # biases on every linear, row-parallel ones (o_proj, down_proj) included: under tensor
        # parallelism their bias must be counted once in the sum over ranks
        "llama_bias": (LlamaForCausalLM, LlamaConfig, dict(
            BASE, tie_word_embeddings=False, attention_bias=True, mlp_bias=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), {}),
        # Mixtures of experts: 8 experts of 48 features (divisible by 2, 3 and 4 ranks), top-k
        # >= 2. A decode step routes 2 tokens to at most 2k experts, so some get none.
        # OLMoE: q/k norms over the whole projections; 4 kv heads as in OLMoE-1B-7B.
        "olmoe": (OlmoeForCausalLM, OlmoeConfig, dict(
            MOE, num_key_value_heads=4, num_experts=8, num_experts_per_tok=2,
            norm_topk_prob=False, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), {}),
        # Mixtral, with a routing tie: experts 3 and 5 share router row and weights, so every
        # token's logits tie between them exactly (the output cannot depend on which wins)
        "mixtral": (MixtralForCausalLM, MixtralConfig, dict(
            MOE, num_local_experts=8, num_experts_per_tok=2, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
            {"tie_experts": (3, 5)}),
        # Qwen2-MoE: shared expert with a sigmoid gate, biases on q/k/v, a dense layer (1)
        "qwen2_moe": (Qwen2MoeForCausalLM, Qwen2MoeConfig, dict(
            MOE, num_hidden_layers=3, num_experts=8, num_experts_per_tok=2,
            moe_intermediate_size=48, shared_expert_intermediate_size=64,
            norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[1],
            tie_word_embeddings=False, use_sliding_window=False, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6}), {}),
        # Qwen3-MoE: per-head q/k norms, renormalised top 3, sparse every 2nd layer (layer 0 dense)
        "qwen3_moe": (Qwen3MoeForCausalLM, Qwen3MoeConfig, dict(
            MOE, head_dim=32, num_experts=8, num_experts_per_tok=3, moe_intermediate_size=48,
            norm_topk_prob=True, decoder_sparse_step=2, tie_word_embeddings=False,
            use_sliding_window=False, attention_bias=False, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6}), {}),
        # GraniteMoE: the router is a module of its own, experts in stacked tensors, multipliers
        "granitemoe": (GraniteMoeForCausalLM, GraniteMoeConfig, dict(
            MOE, num_local_experts=8, num_experts_per_tok=2, tie_word_embeddings=False,
            embedding_multiplier=12.0, attention_multiplier=0.15, residual_multiplier=0.22,
            logits_scaling=8.0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
            {"lm_head_std_scale": 8.0}),
    }


def tie_experts(model, a, b):
    """Copies expert a's router row and weights to expert b (every tensor whose first
    dimension is the expert count, in the MoE modules)."""
    n = model.config.num_local_experts
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2 and p.shape[0] == n and (".experts." in name or name.endswith("mlp.gate.weight")):
                p[b].copy_(p[a])


def reinit(model, opts):
    """Deterministic, non-trivial weights (caller seeds torch)."""
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied params appear once
            if name.endswith(".bias"):
                p.normal_(0.0, 0.1)
            elif "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                std = 0.15
                if name.startswith("lm_head."):
                    std *= opts.get("lm_head_std_scale", 1.0)
                p.normal_(0.0, std)


def make_ids(gen, vocab, n):
    while True:
        ids = torch.randint(0, vocab, (n,), generator=gen, dtype=torch.int64)
        if len(set(ids.tolist())) >= max(3, n // 2):
            return ids


@torch.no_grad()
def full_logits(model, ids):
    out = model(input_ids=ids[None, :], use_cache=False)
    return out.logits[0].float()


@torch.no_grad()
def incremental_logits(model, ids, prefill):
    """Prefill `prefill` tokens with use_cache=True, then one token per step."""
    # transformers >= 5.2x renamed `past_key_values` to `cache` (old name is
    # deprecated); support both.
    key = ("cache" if "cache" in inspect.signature(model.forward).parameters
           else "past_key_values")
    out = model(input_ids=ids[None, :prefill], use_cache=True)
    rows = [out.logits[0]]
    past = getattr(out, key)
    assert past is not None
    for t in range(prefill, ids.numel()):
        out = model(input_ids=ids[None, t:t + 1], use_cache=True, **{key: past})
        past = getattr(out, key)
        rows.append(out.logits[0])
    return torch.cat(rows, 0).float()


@torch.no_grad()
def check_sliding_window(model, ids, window):
    """Eager attention probabilities must be nonzero exactly on k in (q-W, q]."""
    out = model(input_ids=ids[None, :], use_cache=False, output_attentions=True)
    n = ids.numel()
    q = torch.arange(n)[:, None]
    k = torch.arange(n)[None, :]
    expected = (k <= q) & (k > q - window)
    for li, a in enumerate(out.attentions):  # [1, heads, n, n]
        nz = a[0] > 0
        assert torch.equal(nz, expected.expand_as(nz)), \
            f"layer {li}: sliding-window pattern differs from (q-W, q]"


def save_safetensors(tensors, path, metadata):
    """Like safetensors.torch.save_file, but with a deterministic header
    (save_file's Rust HashMap orders __metadata__ randomly, which would make
    every regeneration a spurious git diff).  Data is read back and checked."""
    dt = {torch.float32: "F32", torch.int64: "I64"}
    header = {"__metadata__": dict(sorted(metadata.items()))}
    blobs, off = [], 0
    for k in sorted(tensors):
        t = tensors[k].detach().cpu().contiguous()
        b = t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()
        header[k] = {"dtype": dt[t.dtype], "shape": list(t.shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)
    back = load_file(path)
    assert sorted(back) == sorted(tensors)
    assert all(torch.equal(back[k], tensors[k]) for k in tensors)
    with safe_open(path, "pt") as f:
        assert f.metadata() == metadata


def clean_dir(d):
    for f in os.listdir(d):
        if f not in KEEP_FILES:
            p = os.path.join(d, f)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)


def build_case(idx, name, model_cls, cfg_cls, cfg_kw, opts):
    out_dir = os.path.join(HERE, name)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)

    torch.manual_seed(1234 + idx)
    cfg = cfg_cls(**cfg_kw)
    cfg._attn_implementation = "eager"
    model = model_cls(cfg).eval()
    assert model.config._attn_implementation == "eager"
    reinit(model, opts)
    if "tie_experts" in opts:
        tie_experts(model, *opts["tie_experts"])
    if cfg.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == \
            model.model.embed_tokens.weight.data_ptr()

    gen = torch.Generator().manual_seed(4321 + idx)
    vocab = cfg.vocab_size
    ids = [make_ids(gen, vocab, p + DECODE_STEPS) for p in PREFILL]

    half = getattr(torch, opts["half"]) if "half" in opts else None
    bf16 = half is torch.bfloat16
    if half is not None:
        model = model.to(half)
    model.save_pretrained(out_dir, safe_serialization=True)
    clean_dir(out_dir)
    ref_sd = {k: v.clone() for k, v in model.state_dict().items()}
    # (half: model.to(half) also rounds the rotary inv_freq buffer; from_pretrained
    # recomputes it in fp32, as the C engine does, so compare logits only in fp32.)
    ref_mem = None if half is not None else [full_logits(model, s) for s in ids]
    del model

    # Reload what was written; golden logits come from the files on disk.
    load_dtype = half if half is not None else torch.float32
    m = model_cls.from_pretrained(out_dir, dtype=load_dtype,
                                  attn_implementation="eager").eval()
    sd = m.state_dict()
    assert sorted(sd) == sorted(ref_sd), f"{name}: reloaded state_dict keys differ"
    for k, v in ref_sd.items():
        assert sd[k].dtype == v.dtype and torch.equal(sd[k], v), \
            f"{name}: reloaded {k} differs"
    extra = {}
    if half is not None:
        assert all(p.dtype == half for p in m.parameters())
    if bf16:
        extra = {f"logits_bf16_{i}": full_logits(m, s).contiguous()
                 for i, s in enumerate(ids)}
    if half is not None:
        m = m.float()
    assert m.config._attn_implementation == "eager"
    logits = [full_logits(m, s) for s in ids]

    for i in range(2):
        if ref_mem is not None:
            d = (logits[i] - ref_mem[i]).abs().max().item()
            assert d == 0.0, f"{name}: reload changed logits_{i} by {d}"
        std = logits[i].std(dim=-1)
        assert std.min().item() > 0.5, \
            f"{name}: logits_{i} too flat (min row std {std.min().item():.3f})"
        inc = incremental_logits(m, ids[i], PREFILL[i])
        d = (inc - logits[i]).abs().max().item()
        assert d <= INCR_TOL, f"{name}: incremental vs full differ by {d}"
    if m.config.rope_parameters.get("rope_type") == "llama3":
        # The scaling must actually touch some (not all) frequencies.
        inv = m.model.rotary_emb.inv_freq
        hd = m.config.head_dim
        base = 1.0 / (m.config.rope_parameters["rope_theta"] **
                      (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        changed = ~torch.isclose(inv, base, rtol=1e-6, atol=0)
        assert 0 < int(changed.sum()) < inv.numel(), "llama3 rope not exercised"
        f = m.config.rope_parameters["factor"]
        assert torch.isclose(inv, base / f, rtol=1e-6, atol=0).any(), \
            "no frequency in the fully-scaled (low-frequency) band"
        assert (changed & ~torch.isclose(inv, base / f, rtol=1e-6, atol=0)).any(), \
            "no frequency in the smooth-interpolation band"
    if "check_window" in opts:
        assert m.config.sliding_window == opts["check_window"]
        for s in ids:
            check_sliding_window(m, s, opts["check_window"])

    tensors = {"ids_0": ids[0].contiguous(), "ids_1": ids[1].contiguous(),
               "logits_0": logits[0].contiguous(),
               "logits_1": logits[1].contiguous()}
    tensors.update(extra)
    meta = {"prefill_0": str(PREFILL[0]), "prefill_1": str(PREFILL[1]),
            "decode_steps": str(DECODE_STEPS),
            "transformers": transformers.__version__,
            "torch": torch.__version__, "case": name, "atol": "1e-4"}
    save_safetensors(tensors, os.path.join(out_dir, "golden.safetensors"), meta)

    info = {"max_abs_logit": max(l.abs().max().item() for l in logits),
            "min_row_std": min(l.std(dim=-1).min().item() for l in logits)}
    if bf16:
        info["bf16_vs_fp32_max_abs"] = max(
            (extra[f"logits_bf16_{i}"] - logits[i]).abs().max().item()
            for i in range(2))
    size = sum(os.path.getsize(os.path.join(out_dir, f))
               for f in os.listdir(out_dir))
    assert size < 1 << 20, f"{name}: {size} bytes, too big"
    info["bytes"] = size
    return info


def main():
    defs = case_defs()
    wanted = sys.argv[1:] or list(defs)
    for name in wanted:
        idx = list(defs).index(name)
        info = build_case(idx, name, *defs[name])
        print(f"{name:12s} " + json.dumps(info), flush=True)
    print(f"transformers {transformers.__version__}  torch {torch.__version__}"
          f"  numpy {np.__version__}")


if __name__ == "__main__":
    main()
