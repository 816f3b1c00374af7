#!/usr/bin/env python3
"""Convert a llama2.c checkpoint + tokenizer.bin into a Hugging Face Llama folder.

usage: python3 tools/llama2c_to_hf.py CHECKPOINT.bin TOKENIZER.bin OUT_DIR [--note TEXT]

Writes OUT_DIR/{config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
SOURCE.md}. Depends only on numpy and the standard library (safetensors is written by hand).

Checkpoint formats (karpathy/llama2.c):
  * legacy "version 0" (run.c / export.py legacy_export): 7 int32 header
      dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
    (vocab_size < 0 => untied classifier stored last), then fp32 tensors
      tok_emb, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final,
      freq_cis_real, freq_cis_imag, [wcls]
  * "version 1" (export.py version1_export): uint32 magic 0x616b3432 ("ak42"), int32 version,
    7 int32 params, uint8 shared_classifier, zero padded to 256 bytes, then fp32 tensors
      rms_att, rms_ffn, rms_final, tok_emb, wq, wk, wv, wo, w1, w2, w3, [wcls]
  * version 2 (int8 Q8_0) and anything else: rejected as unsupported.

Weights: llama2.c rotates interleaved pairs (x[2i], x[2i+1]); HF Llama uses rotate_half
(x[i], x[i + d/2]). The rows of wq/wk are permuted per head exactly like transformers'
convert_llama_weights_to_hf.permute (view(h, d/2, 2, dim).transpose(1, 2)).

Tokenizer: tokenizer.bin = int32 max_token_length, then per token f32 score, int32 len, bytes.
It becomes a SentencePiece-style BPE tokenizer.json (Llama-2 layout). BPE merges are derived so
that HF's rank-greedy BPE reproduces llama2.c's score-greedy encode(): for every ordinary piece p
and every split p = a + b where a and b are ordinary pieces, emit merge "a b"; merges are ranked
by score(p) descending; ties (several splits of the same piece, or equal scores) by the id of the
left part, then the id of the right part (ascending). This is the order of the genuine Llama-2
tokenizer.json: converting Llama-2's llama2.c tokenizer.bin reproduces its 61249 merges exactly
(apart from 4 pieces that file spells with an ASCII space where tokenizer.bin has U+00A0).
Exact ties are where static ranks cannot mimic llama2.c, which breaks ties by position (leftmost
pair); with distinct piece scores (as in sentencepiece exports) only overlapping alternative
splits of one piece can differ. Pieces whose score is <= -1e10 get no merges (run.c's encode
never picks them: its best_score starts at -1e10).
"""
import argparse
import hashlib
import json
import os
import re
import shlex
import struct
import sys

import numpy as np

MAGIC_V1 = 0x616B3432  # "ak42"
SPIECE = "\u2581"
BYTE_RE = re.compile(r"^<0x[0-9A-F]{2}>$")
LLAMA2C_MIN_SCORE = -1e10


class ConvertError(Exception):
    pass


# --------------------------------------------------------------------------- checkpoint

def _layout(cfg, version, shared):
    """Ordered list of (name, shape) as stored in the file; stacked per-layer tensors."""
    d, h, L, nh, nkv, V, S = (cfg[k] for k in ("dim", "hidden_dim", "n_layers", "n_heads",
                                              "n_kv_heads", "vocab_size", "seq_len"))
    hs = d // nh
    kv = nkv * hs
    emb = ("tok_emb", (V, d))
    rms_att = ("rms_att", (L, d))
    rms_ffn = ("rms_ffn", (L, d))
    rms_final = ("rms_final", (d,))
    mats = [("wq", (L, d, d)), ("wk", (L, kv, d)), ("wv", (L, kv, d)), ("wo", (L, d, d))]
    ffn = [("w1", (L, h, d)), ("w2", (L, d, h)), ("w3", (L, h, d))]
    if version == 0:
        out = [emb, rms_att] + mats + [rms_ffn] + ffn + [rms_final,
               ("freq_cis_real", (S, hs // 2)), ("freq_cis_imag", (S, hs // 2))]
    else:
        out = [rms_att, rms_ffn, rms_final, emb] + mats + ffn
    if not shared:
        out.append(("wcls", (V, d)))
    return out


def read_checkpoint(path):
    """Returns (cfg, tensors, info). tensors: name -> np.ndarray (float32, llama2.c layout)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(256)
    if len(head) < 28:
        raise ConvertError(f"{path}: file too small ({size} bytes) to be a llama2.c checkpoint")
    magic = struct.unpack_from("<I", head, 0)[0]
    if magic == MAGIC_V1:
        if len(head) < 256:
            raise ConvertError(f"{path}: truncated versioned header ({size} bytes < 256)")
        version = struct.unpack_from("<i", head, 4)[0]
        if version != 1:
            kind = "int8 Q8_0" if version == 2 else "unknown"
            raise ConvertError(f"{path}: llama2.c checkpoint version {version} ({kind}) is "
                               "unsupported; only legacy version 0 and fp32 version 1 are supported")
        params = struct.unpack_from("<7i", head, 8)
        shared = head[36] != 0
        offset = 256
        vocab_raw = params[5]
    else:
        version = 0
        params = struct.unpack_from("<7i", head, 0)
        vocab_raw = params[5]
        shared = vocab_raw > 0
        offset = 28
    cfg = dict(zip(("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size",
                    "seq_len"), params))
    cfg["vocab_size"] = abs(vocab_raw)
    bad = [k for k, v in cfg.items() if v <= 0]
    if bad:
        raise ConvertError(f"{path}: not a llama2.c checkpoint (non-positive header fields "
                           f"{bad}: {cfg})")
    d, nh, nkv = cfg["dim"], cfg["n_heads"], cfg["n_kv_heads"]
    if d % nh or nh % nkv or (d // nh) % 2:
        raise ConvertError(f"{path}: inconsistent header {cfg}: need dim % n_heads == 0, "
                           "n_heads % n_kv_heads == 0 and an even head size")
    layout = _layout(cfg, version, shared)
    n_floats = sum(int(np.prod(s)) for _, s in layout)
    expected = offset + 4 * n_floats
    if size != expected:
        what = "truncated" if size < expected else "has trailing bytes"
        raise ConvertError(
            f"{path}: file size {size} != {expected} bytes implied by the version-{version} header "
            f"{cfg} ({'tied' if shared else 'untied'} classifier): file {what}")
    mm = np.memmap(path, dtype="<f4", mode="r", offset=offset, shape=(n_floats,))
    tensors, pos = {}, 0
    for name, shape in layout:
        n = int(np.prod(shape))
        tensors[name] = mm[pos:pos + n].reshape(shape)
        pos += n
    info = {"version": version, "shared_classifier": shared}
    return cfg, tensors, info


def permute_rope(w, n_heads):
    """llama2.c interleaved-pair rows -> HF rotate_half rows (per head)."""
    rows, cols = w.shape
    hd = rows // n_heads
    return np.ascontiguousarray(
        w.reshape(n_heads, hd // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols))


def hf_tensors(cfg, t, shared):
    """Returns [(hf_name, shape, get)] in file order; get() produces the float32 array lazily
    (so only one permuted matrix is in memory at a time for large checkpoints)."""
    L, nh, nkv = cfg["n_layers"], cfg["n_heads"], cfg["n_kv_heads"]

    def plain(a):
        return (a.shape, lambda: a)

    def rope(a, n):
        return (a.shape, lambda: permute_rope(a, n))

    out = [("model.embed_tokens.weight",) + plain(t["tok_emb"])]
    for i in range(L):
        p = f"model.layers.{i}."
        out += [
            (p + "input_layernorm.weight",) + plain(t["rms_att"][i]),
            (p + "self_attn.q_proj.weight",) + rope(t["wq"][i], nh),
            (p + "self_attn.k_proj.weight",) + rope(t["wk"][i], nkv),
            (p + "self_attn.v_proj.weight",) + plain(t["wv"][i]),
            (p + "self_attn.o_proj.weight",) + plain(t["wo"][i]),
            (p + "post_attention_layernorm.weight",) + plain(t["rms_ffn"][i]),
            (p + "mlp.gate_proj.weight",) + plain(t["w1"][i]),
            (p + "mlp.down_proj.weight",) + plain(t["w2"][i]),
            (p + "mlp.up_proj.weight",) + plain(t["w3"][i]),
        ]
    out.append(("model.norm.weight",) + plain(t["rms_final"]))
    if not shared:
        out.append(("lm_head.weight",) + plain(t["wcls"]))
    return out


def write_safetensors(path, entries):
    """entries: [(name, shape, get)] with get() -> float32 array. Minimal safetensors writer:
    u64 LE header length, JSON header (space padded to a multiple of 8), raw LE data."""
    header, off = {}, 0
    for name, shape, _ in entries:
        n = 4 * int(np.prod(shape))
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    header = {"__metadata__": {"format": "pt"}, **header}
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * (-len(hb) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name, shape, get in entries:
            a = np.ascontiguousarray(get(), dtype="<f4")
            assert a.shape == tuple(shape), name
            f.write(a.tobytes())
    os.replace(tmp, path)


def hf_config(cfg, shared, bos_id, eos_id):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": cfg["dim"],
        "intermediate_size": cfg["hidden_dim"],
        "num_hidden_layers": cfg["n_layers"],
        "num_attention_heads": cfg["n_heads"],
        "num_key_value_heads": cfg["n_kv_heads"],
        "head_dim": cfg["dim"] // cfg["n_heads"],
        "vocab_size": cfg["vocab_size"],
        "max_position_embeddings": cfg["seq_len"],
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "hidden_act": "silu",
        "tie_word_embeddings": bool(shared),
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "torch_dtype": "float32",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "use_cache": True,
    }


# --------------------------------------------------------------------------- tokenizer

def read_tokenizer_bin(path, vocab_size=None):
    """Returns (max_token_length, [(piece_bytes, score)]). Reads to EOF."""
    with open(path, "rb") as f:
        b = f.read()
    if len(b) < 4:
        raise ConvertError(f"{path}: too small to be a llama2.c tokenizer.bin")
    max_len = struct.unpack_from("<i", b, 0)[0]
    toks, o = [], 4
    while o < len(b):
        if o + 8 > len(b):
            raise ConvertError(f"{path}: truncated at token {len(toks)} (offset {o})")
        score, n = struct.unpack_from("<fi", b, o)
        o += 8
        if n < 0 or o + n > len(b):
            raise ConvertError(f"{path}: bad length {n} for token {len(toks)} (offset {o - 8})")
        toks.append((b[o:o + n], score))
        o += n
    if vocab_size is not None and len(toks) != vocab_size:
        raise ConvertError(f"{path}: tokenizer has {len(toks)} tokens but the checkpoint's "
                           f"vocab_size is {vocab_size}")
    return max_len, toks


def piece_strings(toks, path="tokenizer.bin"):
    """llama2.c piece bytes -> HF piece strings. Returns (pieces, special ids dict)."""
    pieces, special = [], {}
    for i, (raw, _) in enumerate(toks):
        try:
            s = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ConvertError(f"{path}: token {i} {raw!r} is not valid UTF-8") from None
        if s == "\n<s>\n" or (s == "<s>" and "bos" not in special):
            s = "<s>"
            special.setdefault("bos", i)
        elif s == "\n</s>\n" or (s == "</s>" and "eos" not in special):
            s = "</s>"
            special.setdefault("eos", i)
        elif s == "<unk>":
            special.setdefault("unk", i)
        else:
            s = s.replace(" ", SPIECE)
        pieces.append(s)
    return pieces, special


def derive_merges(pieces, scores, special_ids):
    """See module docstring for the ranking rule. Returns a list of (left, right)."""
    vocab = {}
    for i, p in enumerate(pieces):
        vocab.setdefault(p, i)
    ordinary = {p: i for p, i in vocab.items()
                if i not in special_ids and not BYTE_RE.match(p)}
    out = []
    for p, pid in ordinary.items():
        sc = scores[pid]
        if not sc > LLAMA2C_MIN_SCORE:
            continue
        for k in range(1, len(p)):
            a, b = p[:k], p[k:]
            ia, ib = ordinary.get(a), ordinary.get(b)
            if ia is not None and ib is not None:
                out.append((-sc, ia, ib, a, b))
    out.sort()
    return [(m[3], m[4]) for m in out]


def build_tokenizer_json(pieces, scores, special):
    special_ids = set(special.values())
    vocab, dups = {}, []
    for i, p in enumerate(pieces):
        if p in vocab:
            dups.append((i, p))
        else:
            vocab[p] = i
    for i, p in dups:
        print(f"warning: token {i} {p!r} duplicates token {vocab[p]}; HF vocab keeps the first",
              file=sys.stderr)
    merges = derive_merges(pieces, scores, special_ids)
    if any(" " in a or " " in b for a, b in merges):
        merges_json = [[a, b] for a, b in merges]  # pair form (tokenizers >= 0.20)
    else:
        merges_json = [f"{a} {b}" for a, b in merges]
    added = []
    for key in ("unk", "bos", "eos"):
        if key in special:
            i = special[key]
            added.append({"id": i, "content": pieces[i], "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": True, "special": True})
    added.sort(key=lambda t: t["id"])
    bos = pieces[special["bos"]] if "bos" in special else None
    if bos is not None:
        post = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [special["bos"]], "tokens": [bos]}},
        }
    else:
        post = None
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SPIECE},
            {"type": "Replace", "pattern": {"String": " "}, "content": SPIECE}]},
        "pre_tokenizer": None,
        "post_processor": post,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPIECE}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": pieces[special["unk"]] if "unk" in special else None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges_json,
        },
    }


def tokenizer_config(pieces, special, seq_len):
    def tok(key):
        if key not in special:
            return None
        return {"__type": "AddedToken", "content": pieces[special[key]], "lstrip": False,
                "normalized": True, "rstrip": False, "single_word": False}
    return {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": tok("bos"),
        "eos_token": tok("eos"),
        "unk_token": tok("unk"),
        "pad_token": None,
        "clean_up_tokenization_spaces": False,
        "legacy": False,
        "model_max_length": seq_len,
        "tokenizer_class": "LlamaTokenizer",
    }


# --------------------------------------------------------------------------- main

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def convert(ckpt, tok_path, out_dir, note=None):
    cfg, tensors, info = read_checkpoint(ckpt)
    shared = info["shared_classifier"]
    max_len, toks = read_tokenizer_bin(tok_path, cfg["vocab_size"])
    pieces, special = piece_strings(toks, tok_path)
    scores = [s for _, s in toks]
    bos_id, eos_id = special.get("bos", 1), special.get("eos", 2)

    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), hf_tensors(cfg, tensors, shared))
    write_json(os.path.join(out_dir, "config.json"), hf_config(cfg, shared, bos_id, eos_id))
    tj = build_tokenizer_json(pieces, scores, special)
    write_json(os.path.join(out_dir, "tokenizer.json"), tj)
    write_json(os.path.join(out_dir, "tokenizer_config.json"),
               tokenizer_config(pieces, special, cfg["seq_len"]))

    cmd = "python3 tools/llama2c_to_hf.py " + " ".join(
        shlex.quote(a) for a in (ckpt, tok_path, out_dir))
    if note:
        cmd += " --note '<the text at the end of this file>'"
    files = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    lines = [
        f"# {os.path.basename(os.path.normpath(out_dir))} (converted from llama2.c format)",
        "",
        "Generated by `tools/llama2c_to_hf.py` (loom); do not edit by hand.",
        "",
        "Command:",
        "",
        f"    {cmd}",
        "",
        "| input | bytes | sha256 |",
        "|---|---|---|",
        f"| {os.path.basename(ckpt)} | {os.path.getsize(ckpt)} | {sha256(ckpt)} |",
        f"| {os.path.basename(tok_path)} | {os.path.getsize(tok_path)} | {sha256(tok_path)} |",
        "",
        f"Checkpoint: llama2.c version {info['version']} "
        f"({'legacy 28-byte header' if info['version'] == 0 else '256-byte ak42 header'}), fp32; "
        + ", ".join(f"{k}={v}" for k, v in cfg.items())
        + f"; classifier {'tied to the token embedding' if shared else 'untied (lm_head.weight)'}.",
        "q_proj/k_proj rows permuted per head from llama2.c's interleaved-pair RoPE layout to "
        "HF rotate_half; freq_cis tables (legacy format) dropped.",
        f"Tokenizer: {len(pieces)} tokens (max_token_length {max_len}), "
        f"{len(tj['model']['merges'])} BPE merges derived from piece scores "
        "(score desc; ties: left piece id, right piece id).",
        "",
        "| output | bytes | sha256 |",
        "|---|---|---|",
    ]
    for fn in files:
        p = os.path.join(out_dir, fn)
        lines.append(f"| {fn} | {os.path.getsize(p)} | {sha256(p)} |")
    if note:
        lines += ["", note]
    with open(os.path.join(out_dir, "SOURCE.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return cfg, info


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("tokenizer")
    ap.add_argument("out_dir")
    ap.add_argument("--note", help="extra provenance text appended to OUT_DIR/SOURCE.md")
    a = ap.parse_args(argv)
    try:
        cfg, info = convert(a.checkpoint, a.tokenizer, a.out_dir, a.note)
    except (ConvertError, OSError) as e:
        print(f"llama2c_to_hf: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.out_dir} (llama2.c v{info['version']}, {cfg})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
