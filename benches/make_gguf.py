#!/usr/bin/env python3
"""Writes random-weight GGUF files of a Llama or GPT-OSS model's shape for llama.cpp's llama-bench.

Usage: make_gguf.py CONFIG.json [--f32 OUT.gguf] [--bf16 OUT.gguf] [--seed N] [--std S]

GPT-OSS (GptOssForCausalLM, e.g. configs/gpt-oss-20b.json; --bf16 only) is written as
llama.cpp's converter writes the released checkpoint: arch "gpt-oss", the experts as MXFP4
(ggml's blocks of 32: one E8M0 scale byte, then 16 bytes of E2M1 codes; random codes under
scales of 2^-9 to 2^-6, so the weights are of the std's order), everything else 2-D in bf16
and 1-D in f32 (norms 1, biases and sinks small random), YaRN and the sliding window as its
config says.

CONFIG.json is a Hugging Face config.json (LlamaForCausalLM, e.g. configs/llama-3.2-1b.json;
or OlmoeForCausalLM, e.g. configs/olmoe-1b-7b.json, written as arch "olmoe" with its whole-q/k
norms, an expert router and every expert's gate, up and down stacked in ffn_*_exps).
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


def shape_keys(w, cfg, ctx, theta):
    """The keys every architecture's GGUF has: its sizes, RoPE base and norm epsilon, and no
    tokenizer (vocab type "none" with the vocabulary's size)."""
    d, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = cfg.get("head_dim", d // nh)
    w.add_context_length(cfg.get("max_position_embeddings", ctx))
    w.add_embedding_length(d)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(nh)
    w.add_head_count_kv(cfg.get("num_key_value_heads", nh))
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(cfg.get("rope_theta", theta))
    w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", 1e-5))
    w.add_vocab_size(cfg["vocab_size"])
    w.add_tokenizer_model("none")


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
    if archs and archs[0] == "GptOssForCausalLM":
        if a.f32 or not a.bf16:
            ap.error("GPT-OSS: give --bf16 only (its experts are MXFP4 either way)")
        return gpt_oss(cfg, a)
    if archs and archs[0] not in ("LlamaForCausalLM", "MistralForCausalLM", "OlmoeForCausalLM"):
        sys.exit(f"make_gguf.py: only Llama-style models and OLMoE are supported (got {archs[0]})")
    olmoe = bool(archs) and archs[0] == "OlmoeForCausalLM"
    E = cfg.get("num_experts", 0)
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
                    (p + "ffn_norm.weight", (d,), True)]
        if olmoe:  # whole-q/k norms, the router, the experts stacked per projection
            tensors += [(p + "attn_q_norm.weight", (nh * hd,), True),
                        (p + "attn_k_norm.weight", (nkv * hd,), True),
                        (p + "ffn_gate_inp.weight", (E, d), False),
                        (p + "ffn_gate_exps.weight", (E, ff, d), False),
                        (p + "ffn_up_exps.weight", (E, ff, d), False),
                        (p + "ffn_down_exps.weight", (E, d, ff), False)]
        else:
            tensors += [(p + "ffn_gate.weight", (ff, d), False),
                        (p + "ffn_up.weight", (ff, d), False),
                        (p + "ffn_down.weight", (d, ff), False)]
    tensors.append(("output_norm.weight", (d,), True))
    if not tied:
        tensors.append(("output.weight", (V, d), False))

    outs = []  # (writer, bf16?)
    for path, bf16 in ((a.f32, False), (a.bf16, True)):
        if not path:
            continue
        w = gguf.GGUFWriter(path, "olmoe" if olmoe else "llama")
        w.add_name("random " + a.config)
        w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if bf16 else gguf.LlamaFileType.ALL_F32)
        shape_keys(w, cfg, 4096, 10000.0)
        w.add_rope_dimension_count(hd)
        if olmoe:
            w.add_expert_count(E)
            w.add_expert_used_count(cfg["num_experts_per_tok"])
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


MXFP4_BLOCK, MXFP4_BYTES = 32, 17  # ggml's block_mxfp4: e8m0 scale, 16 bytes of nibbles


def gpt_oss(cfg, a):
    d, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg.get("head_dim", 64)
    E, k, ff, V = cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["intermediate_size"], cfg["vocab_size"]
    std = a.std if a.std is not None else cfg.get("initializer_range", 0.02)
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    # (name, numpy shape, kind): "bf16" 2-D random, "norm" f32 ones, "f32" 1-D random, "mxfp4" experts
    t = [("token_embd.weight", (V, d), "bf16")]
    for i in range(L):
        p = f"blk.{i}."
        t += [(p + "attn_norm.weight", (d,), "norm"), (p + "post_attention_norm.weight", (d,), "norm"),
              (p + "attn_q.weight", (nh * hd, d), "bf16"), (p + "attn_q.bias", (nh * hd,), "f32"),
              (p + "attn_k.weight", (nkv * hd, d), "bf16"), (p + "attn_k.bias", (nkv * hd,), "f32"),
              (p + "attn_v.weight", (nkv * hd, d), "bf16"), (p + "attn_v.bias", (nkv * hd,), "f32"),
              (p + "attn_output.weight", (d, nh * hd), "bf16"), (p + "attn_output.bias", (d,), "f32"),
              (p + "attn_sinks.weight", (nh,), "f32"),
              (p + "ffn_gate_inp.weight", (E, d), "bf16"), (p + "ffn_gate_inp.bias", (E,), "f32"),
              (p + "ffn_gate_exps.weight", (E, ff, d), "mxfp4"), (p + "ffn_gate_exps.bias", (E, ff), "f32"),
              (p + "ffn_up_exps.weight", (E, ff, d), "mxfp4"), (p + "ffn_up_exps.bias", (E, ff), "f32"),
              (p + "ffn_down_exps.weight", (E, d, ff), "mxfp4"), (p + "ffn_down_exps.bias", (E, d), "f32")]
    t += [("output_norm.weight", (d,), "norm"), ("output.weight", (V, d), "bf16")]
    w = gguf.GGUFWriter(a.bf16, "gpt-oss")
    w.add_name("random " + a.config)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_MXFP4_MOE)
    shape_keys(w, cfg, 131072, 150000.0)
    w.add_expert_feed_forward_length(ff)
    w.add_expert_count(E)
    w.add_expert_used_count(k)
    w.add_sliding_window(cfg.get("sliding_window", 128))
    if rs.get("rope_type", rs.get("type")) == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rs["factor"])
        w.add_rope_scaling_orig_ctx_len(rs.get("original_max_position_embeddings", 4096))
    for name, shape, kind in t:
        n = int(np.prod(shape))
        if kind == "mxfp4":
            byte_shape = shape[:-1] + (shape[-1] // MXFP4_BLOCK * MXFP4_BYTES,)
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), n // MXFP4_BLOCK * MXFP4_BYTES,
                              raw_dtype=gguf.GGMLQuantizationType.MXFP4)
        elif kind == "bf16":
            w.add_tensor_info(name, shape, np.dtype(np.uint16), n * 2, raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor_info(name, shape, np.dtype(np.float32), n * 4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(a.seed)
    t0, total = time.time(), 0
    for name, shape, kind in t:
        n = int(np.prod(shape))
        if kind == "mxfp4":
            blocks = np.frombuffer(rng.bytes(n // MXFP4_BLOCK * MXFP4_BYTES), dtype=np.uint8).copy()
            blocks.reshape(-1, MXFP4_BYTES)[:, 0] = rng.integers(118, 122, n // MXFP4_BLOCK, dtype=np.uint8)
            w.write_tensor_data(blocks.reshape(shape[:-1] + (-1,)))
        elif kind == "norm":
            w.write_tensor_data(np.ones(shape, dtype=np.float32))
        else:
            x = rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
            w.write_tensor_data(to_bf16(x) if kind == "bf16" else x)
        total += n
    w.close()
    print(f"make_gguf.py: {total / 1e9:.3f}B parameters, {len(t)} tensors, {time.time() - t0:.1f} s -> {a.bf16}")


if __name__ == "__main__":
    main()
