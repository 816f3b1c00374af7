#!/usr/bin/env python3
"""Writes a Hugging Face folder of random bf16 weights for a Qwen3-Next or Qwen3.5 (text)
config, named and laid out as the released checkpoints are (Qwen3-Next: each expert's
projections apart, in_proj_qkvz and in_proj_ba fused per key head; Qwen3.5: in_proj_qkv, z, b
and a apart, dense MLPs), so that llama.cpp's convert_hf_to_gguf.py (through
benches/hf_to_gguf.py) and loom read the same weights.

Usage: make_hf_random.py CONFIG.json OUT_DIR [--seed N] [--std S]

Weights are normal(0, S) (default 0.02), the zero-centred norms 0 (a scale of 1), the gated
norm's weight 1, A_log log(1..16) and dt_bias 0 as transformers initialises them. Tensors are
written in shards of about 2 GB with an index, one shard held in memory at a time. No tokenizer
is written: both engines are fed token ids.
"""
import argparse
import json
import math
import os
import shutil

import torch
from safetensors.torch import save_file


def qwen_hybrid_shapes(c, next_layout):
    """(name, shape, kind) of every tensor, kind one of normal, zero, one, a_log; next_layout:
    Qwen3-Next's (fused projections, experts), else Qwen3.5's (apart, dense)."""
    H, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    kh, vh, kd, vd = (c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"],
                      c["linear_value_head_dim"])
    nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    E, I, S = c.get("num_experts"), c.get("moe_intermediate_size"), c.get("shared_expert_intermediate_size")
    interval = c.get("full_attention_interval", 4)
    types = c.get("layer_types") or ["full_attention" if (l + 1) % interval == 0 else "linear_attention"
                                     for l in range(L)]
    out = [("model.embed_tokens.weight", (V, H), "normal"), ("model.norm.weight", (H,), "zero")]
    if not c.get("tie_word_embeddings"):
        out.append(("lm_head.weight", (V, H), "normal"))
    for l in range(L):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", (H,), "zero"), (p + "post_attention_layernorm.weight", (H,), "zero")]
        if types[l] == "linear_attention":
            a = p + "linear_attn."
            conv = 2 * kh * kd + vh * vd
            if next_layout:
                out += [(a + "in_proj_qkvz.weight", (2 * kh * kd + 2 * vh * vd, H), "normal"),
                        (a + "in_proj_ba.weight", (2 * vh, H), "normal")]
            else:
                out += [(a + "in_proj_qkv.weight", (conv, H), "normal"), (a + "in_proj_z.weight", (vh * vd, H), "normal"),
                        (a + "in_proj_b.weight", (vh, H), "normal"), (a + "in_proj_a.weight", (vh, H), "normal")]
            out += [(a + "conv1d.weight", (conv, 1, c["linear_conv_kernel_dim"]), "normal"),
                    (a + "dt_bias", (vh,), "zero"), (a + "A_log", (vh,), "a_log"),
                    (a + "norm.weight", (vd,), "one"), (a + "out_proj.weight", (H, vh * vd), "normal")]
        else:
            a = p + "self_attn."
            out += [(a + "q_proj.weight", (2 * nh * hd, H), "normal"), (a + "k_proj.weight", (nkv * hd, H), "normal"),
                    (a + "v_proj.weight", (nkv * hd, H), "normal"), (a + "o_proj.weight", (H, nh * hd), "normal"),
                    (a + "q_norm.weight", (hd,), "zero"), (a + "k_norm.weight", (hd,), "zero")]
        m = p + "mlp."
        if not next_layout:
            F = c["intermediate_size"]
            out += [(m + "gate_proj.weight", (F, H), "normal"), (m + "up_proj.weight", (F, H), "normal"),
                    (m + "down_proj.weight", (H, F), "normal")]
            continue
        out += [(m + "gate.weight", (E, H), "normal"), (m + "shared_expert_gate.weight", (1, H), "normal"),
                (m + "shared_expert.gate_proj.weight", (S, H), "normal"),
                (m + "shared_expert.up_proj.weight", (S, H), "normal"),
                (m + "shared_expert.down_proj.weight", (H, S), "normal")]
        for e in range(E):
            x = f"{m}experts.{e}."
            out += [(x + "gate_proj.weight", (I, H), "normal"), (x + "up_proj.weight", (I, H), "normal"),
                    (x + "down_proj.weight", (H, I), "normal")]
    return out


def make(kind, shape, std, gen):
    if kind == "zero":
        return torch.zeros(shape, dtype=torch.bfloat16)
    if kind == "one":
        return torch.ones(shape, dtype=torch.bfloat16)
    if kind == "a_log":
        return torch.log(torch.arange(1, shape[0] + 1, dtype=torch.float32) % 16 + 1).to(torch.bfloat16)
    return (torch.randn(shape, generator=gen) * std).to(torch.bfloat16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--std", type=float, default=0.02)
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = json.load(f)
    arch = cfg["architectures"][0]
    if arch not in ("Qwen3NextForCausalLM", "Qwen3_5ForCausalLM"):
        raise SystemExit(f"{a.config}: only Qwen3NextForCausalLM and Qwen3_5ForCausalLM are written (got {arch})")
    os.makedirs(a.out, exist_ok=True)
    shutil.copy(a.config, os.path.join(a.out, "config.json"))
    gen = torch.Generator().manual_seed(a.seed)
    shapes = qwen_hybrid_shapes(cfg, arch == "Qwen3NextForCausalLM")
    total = sum(2 * math.prod(s) for _, s, _ in shapes)
    limit, shard, size, files, index = 2 << 30, {}, 0, [], {}
    n_shards = max(1, math.ceil(total / limit))

    def flush():
        nonlocal shard, size
        name = f"model-{len(files) + 1:05d}-of-{n_shards:05d}.safetensors"
        save_file(shard, os.path.join(a.out, name), {"format": "pt"})
        files.append(name)
        for k in shard:
            index[k] = name
        shard, size = {}, 0

    for name, shape, kind in shapes:
        shard[name] = make(kind, shape, a.std, gen)
        size += 2 * math.prod(shape)
        if size >= limit:
            flush()
    if shard:
        flush()
    # the shard count was an estimate: name the files as written
    for i, name in enumerate(files):
        final = f"model-{i + 1:05d}-of-{len(files):05d}.safetensors"
        os.replace(os.path.join(a.out, name), os.path.join(a.out, final))
        for k, v in index.items():
            if v == name:
                index[k] = final
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": index}, f, indent=1)
    print(f"{a.out}: {len(shapes)} tensors, {total / 1e9:.2f} GB in {len(files)} shards")


if __name__ == "__main__":
    main()
