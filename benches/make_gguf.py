#!/usr/bin/env python3
"""Writes random-weight GGUF files of a Llama model's shape for llama.cpp's llama-bench.

Usage: make_gguf.py CONFIG.json [--f32 OUT.gguf] [--bf16 OUT.gguf] [--seed N] [--std S]

CONFIG.json is a Hugging Face config.json (LlamaForCausalLM, e.g. configs/llama-3.2-1b.json).
Weights are normal(0, S) (default 0.02, as the config's initializer_range), the norms are 1 and
Llama-3 rope scaling is written as `rope_freqs.weight`, as convert_hf_to_gguf.py does. Both
files hold the same values (bf16 is f32 rounded to nearest even); norms and rope_freqs stay f32
in both, as llama.cpp's converter keeps 1-D tensors. Tied embeddings: no `output.weight`, so
llama.cpp uses `token_embd.weight` as the LM head.

There is no tokenizer: `tokenizer.ggml.model` is "none" (LLAMA_VOCAB_TYPE_NONE in
llama.cpp/src/llama-vocab.cpp), with `llama.vocab_size` giving the vocabulary size, which is
all llama-bench needs (it feeds random token ids). Tensors are streamed to disk one at a time,
so memory stays at about one tensor (the 128256 x 2048 embedding: 1 GiB in f32).

Needs numpy and llama.cpp's gguf-py (vendor/llama.cpp/gguf-py of the llama-cpp-python sdist).
"""
import argparse
import json
import math
import sys
import time

import numpy as np
import gguf


def rope_factors(cfg, head_dim):
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) != "llama3":
        return None
    base = cfg.get("rope_theta", 10000.0)
    factor = rs.get("factor", 8.0)
    low, high = rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0)
    old = rs.get("original_max_position_embeddings", 8192)
    low_wl, high_wl = old / low, old / high
    out = []
    for i in range(0, head_dim, 2):
        freq = 1.0 / (base ** (i / head_dim))
        wl = 2 * math.pi / freq
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (old / wl - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def to_bf16(x):
    """f32 -> bf16 bits (round to nearest even; no NaNs here)."""
    u = x.view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("--f32", help="output path of the f32 GGUF")
    ap.add_argument("--bf16", help="output path of the bf16 GGUF")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--std", type=float, default=None, help="weight std (default: initializer_range or 0.02)")
    a = ap.parse_args()
    if not a.f32 and not a.bf16:
        ap.error("give --f32 and/or --bf16")
    cfg = json.load(open(a.config))
    archs = cfg.get("architectures", [])
    if archs and archs[0] not in ("LlamaForCausalLM", "MistralForCausalLM"):
        sys.exit(f"make_gguf.py: only Llama-style models are supported (got {archs[0]})")
    d, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    nh, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim", d // nh)
    ff, V = cfg["intermediate_size"], cfg["vocab_size"]
    tied = cfg.get("tie_word_embeddings", False)
    std = a.std if a.std is not None else cfg.get("initializer_range", 0.02)

    # (name, numpy shape [rows, cols] = [out, in], is_norm)
    tensors = [("token_embd.weight", (V, d), False)]
    factors = rope_factors(cfg, hd)
    if factors is not None:
        tensors.append(("rope_freqs.weight", (hd // 2,), True))
    for i in range(L):
        p = f"blk.{i}."
        tensors += [(p + "attn_norm.weight", (d,), True),
                    (p + "attn_q.weight", (nh * hd, d), False),
                    (p + "attn_k.weight", (nkv * hd, d), False),
                    (p + "attn_v.weight", (nkv * hd, d), False),
                    (p + "attn_output.weight", (d, nh * hd), False),
                    (p + "ffn_norm.weight", (d,), True),
                    (p + "ffn_gate.weight", (ff, d), False),
                    (p + "ffn_up.weight", (ff, d), False),
                    (p + "ffn_down.weight", (d, ff), False)]
    tensors.append(("output_norm.weight", (d,), True))
    if not tied:
        tensors.append(("output.weight", (V, d), False))

    outs = []  # (writer, bf16?)
    for path, bf16 in ((a.f32, False), (a.bf16, True)):
        if not path:
            continue
        w = gguf.GGUFWriter(path, "llama")
        w.add_name("random " + a.config)
        w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if bf16 else gguf.LlamaFileType.ALL_F32)
        w.add_context_length(cfg.get("max_position_embeddings", 4096))
        w.add_embedding_length(d)
        w.add_block_count(L)
        w.add_feed_forward_length(ff)
        w.add_head_count(nh)
        w.add_head_count_kv(nkv)
        w.add_key_length(hd)
        w.add_value_length(hd)
        w.add_rope_dimension_count(hd)
        w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
        w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", 1e-5))
        w.add_vocab_size(V)
        w.add_tokenizer_model("none")
        for name, shape, norm in tensors:
            n = int(np.prod(shape))
            if norm or not bf16:
                w.add_tensor_info(name, shape, np.dtype(np.float32), n * 4)
            else:
                w.add_tensor_info(name, shape, np.dtype(np.uint16), n * 2, raw_dtype=gguf.GGMLQuantizationType.BF16)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        outs.append((w, bf16))

    rng = np.random.default_rng(a.seed)
    t0, total = time.time(), 0
    for name, shape, norm in tensors:
        if name == "rope_freqs.weight":
            x = factors
        elif norm:
            x = np.ones(shape, dtype=np.float32)
        else:
            x = rng.standard_normal(shape, dtype=np.float32)
            x *= np.float32(std)
        for w, bf16 in outs:
            w.write_tensor_data(to_bf16(x) if bf16 and not norm else x)
        total += x.size
    for w, _ in outs:
        w.close()
    print(f"make_gguf.py: {total / 1e9:.3f}B parameters, {len(tensors)} tensors, "
          f"{time.time() - t0:.1f} s -> {', '.join(p for p in (a.f32, a.bf16) if p)}")


if __name__ == "__main__":
    main()
