#!/usr/bin/env python3
"""Checks tools/llama2c_to_hf.py against oracles written elsewhere (transformers, tokenizers,
the llama2.c greedy output published in karpathy/llama2.c test_all.py).

usage: python3 tests/converter_check.py [--model-dir DIR]

  (a) transformers LlamaForCausalLM on models/stories260K: greedy 200 tokens from [BOS] equal the
      published llama2.c ids (fp32, eager attention), plus a teacher-forced full-sequence check.
  (b) the `tokenizers` library decodes those ids to the published text.
  (c) `tokenizers` encodings == a pure-Python port of llama2.c run.c encode() on tok512.bin;
      and for Llama-2's tokenizer.bin: converted merges == the genuine Llama-2 tokenizer.json's,
      encodings == the sentencepiece library's ids (test_cases_sentencepiece.json) == the port.
  (d) synthetic random checkpoints (dim 48, 6 heads, 2 kv heads, hidden 128, vocab 512, 3 layers)
      written by this script in legacy (untied), version-1 (untied) and version-1 (tied) formats:
      transformers logits == a numpy llama2.c-semantics forward pass within 1e-4; a deliberately
      unpermuted q/k must fail that comparison; truncated / version-2 files are rejected.

Exits 0 with a SKIP message when torch / transformers / tokenizers are not importable.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.environ.get("LOOM_TEST_DATA", os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
S260 = os.path.join(DATA, "stories260K")
LLAMA2_TOK = os.path.join(DATA, "tokenizers", "llama2")
CONVERTER = os.path.join(ROOT, "tools", "llama2c_to_hf.py")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import llama2c_to_hf as conv  # noqa: E402

try:
    import torch
    import transformers
    import tokenizers
except ImportError as e:  # pragma: no cover
    print(f"SKIP converter_check: torch/transformers/tokenizers not importable ({e})")
    sys.exit(0)

torch.set_num_threads(1)
transformers.logging.set_verbosity_error()

FAILS = []
SPIECE = "\u2581"


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILS.append(what)


def load_hf(model_dir):
    kw = {"attn_implementation": "eager"}
    major = int(transformers.__version__.split(".")[0])
    kw["dtype" if major >= 5 else "torch_dtype"] = torch.float32
    m = transformers.LlamaForCausalLM.from_pretrained(model_dir, **kw)
    m.eval()
    return m


# --------------------------------------------------------------------------- llama2.c encode port

class Llama2cTokenizer:
    """Port of run.c build_tokenizer / encode (dummy prefix, utf-8 lookup, byte fallback, merges)."""

    def __init__(self, path):
        with open(path, "rb") as f:
            b = f.read()
        self.max_len = struct.unpack_from("<i", b, 0)[0]
        self.vocab, self.scores, o = [], [], 4
        while o < len(b):
            s, n = struct.unpack_from("<fi", b, o)
            o += 8
            self.vocab.append(b[o:o + n])
            self.scores.append(s)
            o += n
        self.lookup = {}
        for i, v in enumerate(self.vocab):
            self.lookup.setdefault(v, i)

    def encode(self, text, bos=True, eos=False):
        data = text.encode("utf-8")
        tokens = [1] if bos else []
        if data:
            tokens.append(self.lookup.get(b" ", -1))
        buf = b""
        for i, c in enumerate(data):
            if c & 0xC0 != 0x80:
                buf = b""
            buf += bytes([c])
            nxt = data[i + 1] if i + 1 < len(data) else 0
            if nxt & 0xC0 == 0x80 and len(buf) < 4:
                continue
            tid = self.lookup.get(buf, -1)
            if tid != -1:
                tokens.append(tid)
            else:
                tokens.extend(ch + 3 for ch in buf)
            buf = b""
        while True:
            best_score, best_id, best_idx = -1e10, -1, -1
            for i in range(len(tokens) - 1):
                tid = self.lookup.get(self.vocab[tokens[i]] + self.vocab[tokens[i + 1]], -1)
                if tid != -1 and self.scores[tid] > best_score:
                    best_score, best_id, best_idx = self.scores[tid], tid, i
            if best_idx == -1:
                break
            tokens[best_idx] = best_id
            del tokens[best_idx + 1]
        if eos:
            tokens.append(2)
        return tokens


# --------------------------------------------------------------------------- numpy llama2.c forward

def rmsnorm(x, w):
    return w * (x / np.sqrt(np.mean(x * x) + 1e-5))


def llama2c_forward(cfg, w, tokens):
    """run.c forward() in float64 on the original (unpermuted, interleaved-RoPE) weights."""
    d, L, nh, nkv = cfg["dim"], cfg["n_layers"], cfg["n_heads"], cfg["n_kv_heads"]
    hs = d // nh
    kv_dim = nkv * hs
    rep = nh // nkv
    W = {k: np.asarray(v, dtype=np.float64) for k, v in w.items()}
    wcls = W["wcls"] if "wcls" in W else W["tok_emb"]
    kc = np.zeros((L, len(tokens), kv_dim))
    vc = np.zeros((L, len(tokens), kv_dim))
    out = []
    for pos, tok in enumerate(tokens):
        x = W["tok_emb"][tok].copy()
        for l in range(L):
            xb = rmsnorm(x, W["rms_att"][l])
            q = W["wq"][l] @ xb
            k = W["wk"][l] @ xb
            v = W["wv"][l] @ xb
            for i in range(0, d, 2):
                freq = 1.0 / 10000.0 ** ((i % hs) / hs)
                fcr, fci = np.cos(pos * freq), np.sin(pos * freq)
                for vec in ((q, k) if i < kv_dim else (q,)):
                    v0, v1 = vec[i], vec[i + 1]
                    vec[i] = v0 * fcr - v1 * fci
                    vec[i + 1] = v0 * fci + v1 * fcr
            kc[l, pos], vc[l, pos] = k, v
            att_out = np.zeros(d)
            for h in range(nh):
                kh = h // rep
                qh = q[h * hs:(h + 1) * hs]
                K = kc[l, :pos + 1, kh * hs:(kh + 1) * hs]
                V = vc[l, :pos + 1, kh * hs:(kh + 1) * hs]
                s = K @ qh / np.sqrt(hs)
                a = np.exp(s - s.max())
                a /= a.sum()
                att_out[h * hs:(h + 1) * hs] = a @ V
            x = x + W["wo"][l] @ att_out
            xb = rmsnorm(x, W["rms_ffn"][l])
            h1 = W["w1"][l] @ xb
            h3 = W["w3"][l] @ xb
            x = x + W["w2"][l] @ ((h1 / (1.0 + np.exp(-h1))) * h3)
        out.append(wcls @ rmsnorm(x, W["rms_final"]))
    return np.stack(out)


# --------------------------------------------------------------------------- synthetic checkpoints

SYN = dict(dim=48, hidden_dim=128, n_layers=3, n_heads=6, n_kv_heads=2, vocab_size=512, seq_len=64)


def synthetic_weights(cfg, shared, seed):
    rng = np.random.default_rng(seed)
    d, h, L, V, S = (cfg[k] for k in ("dim", "hidden_dim", "n_layers", "vocab_size", "seq_len"))
    hs = d // cfg["n_heads"]
    kv = cfg["n_kv_heads"] * hs

    def mat(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    def norm(*shape):
        return (1.0 + 0.2 * rng.standard_normal(shape)).astype(np.float32)

    w = {
        "tok_emb": rng.standard_normal((V, d)).astype(np.float32),
        "rms_att": norm(L, d), "wq": mat(L, d, d), "wk": mat(L, kv, d), "wv": mat(L, kv, d),
        "wo": mat(L, d, d), "rms_ffn": norm(L, d), "w1": mat(L, h, d), "w2": mat(L, d, h),
        "w3": mat(L, h, d), "rms_final": norm(d),
    }
    freqs = np.outer(np.arange(S), 1.0 / 10000.0 ** (np.arange(0, hs, 2) / hs))
    w["freq_cis_real"] = np.cos(freqs).astype(np.float32)
    w["freq_cis_imag"] = np.sin(freqs).astype(np.float32)
    if not shared:
        w["wcls"] = mat(V, d)
    return w


def write_legacy(path, cfg, w, shared):
    hdr = [cfg[k] for k in ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
                            "vocab_size", "seq_len")]
    if not shared:
        hdr[5] = -hdr[5]
    order = ["tok_emb", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3",
             "rms_final", "freq_cis_real", "freq_cis_imag"] + ([] if shared else ["wcls"])
    with open(path, "wb") as f:
        f.write(struct.pack("<7i", *hdr))
        for k in order:
            f.write(w[k].astype("<f4").tobytes())


def write_v1(path, cfg, w, shared, version=1):
    hdr = [cfg[k] for k in ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
                            "vocab_size", "seq_len")]
    head = struct.pack("<Ii7iB", 0x616B3432, version, *hdr, int(shared))
    order = ["rms_att", "rms_ffn", "rms_final", "tok_emb", "wq", "wk", "wv", "wo", "w1", "w2",
             "w3"] + ([] if shared else ["wcls"])
    with open(path, "wb") as f:
        f.write(head + b"\0" * (256 - len(head)))
        for k in order:
            f.write(w[k].astype("<f4").tobytes())


def run_converter(ckpt, tok, out):
    return subprocess.run([sys.executable, CONVERTER, ckpt, tok, out],
                          capture_output=True, text=True)


def hf_logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].double().numpy()


def check_synthetic(tmp):
    tok = os.path.join(S260, "tok512.bin")
    tokens = [1, 5, 300, 42, 7, 511, 260, 3, 99, 400]
    cases = [("legacy", False, write_legacy), ("v1", False, write_v1), ("v1-tied", True, write_v1)]
    for seed, (name, shared, writer) in enumerate(cases):
        w = synthetic_weights(SYN, shared, seed)
        ckpt = os.path.join(tmp, f"syn-{name}.bin")
        out = os.path.join(tmp, f"syn-{name}-hf")
        writer(ckpt, SYN, w, shared)
        r = run_converter(ckpt, tok, out)
        check(r.returncode == 0, f"(d) {name}: converter exit 0 {r.stderr.strip()}")
        if r.returncode:
            continue
        cfgj = json.load(open(os.path.join(out, "config.json")))
        check(cfgj["tie_word_embeddings"] == shared and cfgj["num_key_value_heads"] == 2,
              f"(d) {name}: config tie_word_embeddings={cfgj['tie_word_embeddings']}, kv heads 2")
        model = load_hf(out)
        if not shared:
            check(not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight),
                  f"(d) {name}: lm_head is a separate (untied) matrix")
        ref = llama2c_forward(SYN, w, tokens)
        got = hf_logits(model, tokens)
        diff = float(np.abs(ref - got).max())
        check(diff < 1e-4, f"(d) {name}: transformers vs numpy llama2.c logits, "
                           f"{len(tokens)} positions, max |diff| {diff:.2e} (< 1e-4; "
                           f"logit scale {np.abs(ref).max():.2f})")
        if name == "legacy":
            # Teeth: the same model with q/k copied unpermuted must disagree clearly.
            with torch.no_grad():
                for l in range(SYN["n_layers"]):
                    at = model.model.layers[l].self_attn
                    at.q_proj.weight.copy_(torch.from_numpy(np.array(w["wq"][l])))
                    at.k_proj.weight.copy_(torch.from_numpy(np.array(w["wk"][l])))
            bad = float(np.abs(ref - hf_logits(model, tokens)).max())
            check(bad > 1e-2, f"(d) unpermuted q/k would be caught (max |diff| {bad:.2e})")

    # rejected inputs
    w = synthetic_weights(SYN, False, 7)
    ckpt = os.path.join(tmp, "syn-trunc.bin")
    write_legacy(ckpt, SYN, w, False)
    with open(ckpt, "r+b") as f:
        f.truncate(os.path.getsize(ckpt) - 4)
    r = run_converter(ckpt, tok, os.path.join(tmp, "trunc-hf"))
    check(r.returncode != 0 and "truncated" in r.stderr, f"(d) truncated file rejected: "
                                                          f"{r.stderr.strip()[:100]}")
    ckpt = os.path.join(tmp, "syn-v2.bin")
    write_v1(ckpt, SYN, w, False, version=2)
    r = run_converter(ckpt, tok, os.path.join(tmp, "v2-hf"))
    check(r.returncode != 0 and "unsupported" in r.stderr, f"(d) version 2 rejected: "
                                                             f"{r.stderr.strip()[:100]}")


# --------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", default=os.path.join(ROOT, "models", "stories260K"))
    args = ap.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"tokenizers {tokenizers.__version__}")

    expected_ids = json.load(open(os.path.join(S260, "expected_greedy_200tokens_ids.txt")))
    with open(os.path.join(S260, "expected_greedy_200tokens.txt"), encoding="utf-8") as f:
        expected_text = f.read()

    # (a)
    model = load_hf(args.model_dir)
    with torch.no_grad():
        gen = model.generate(torch.tensor([[1]]), max_new_tokens=200, do_sample=False,
                             pad_token_id=0)
    got = gen[0, 1:].tolist()
    first = next((i for i, (a, b) in enumerate(zip(got, expected_ids)) if a != b), None)
    check(got == expected_ids, f"(a) greedy 200 tokens == llama2.c published ids "
                               f"(len {len(got)}, first mismatch at {first})")
    with torch.no_grad():
        tf = model(torch.tensor([[1] + expected_ids[:-1]])).logits[0].argmax(-1).tolist()
    check(tf == expected_ids, "(a) teacher-forced full-sequence argmax == published ids")

    # (b)
    tk = tokenizers.Tokenizer.from_file(os.path.join(args.model_dir, "tokenizer.json"))
    text = tk.decode(expected_ids)
    check(expected_text.endswith("\n") and text == expected_text[:-1],
          "(b) tokenizers decode(ids) == published text (minus run.c's final newline)")

    # (c) tok512
    port = Llama2cTokenizer(os.path.join(S260, "tok512.bin"))
    strings = ["Once upon a time, there was a little girl named Lily.", "Hello world",
               "Tim and Sue's dog ran.", "café 日本", "", "x", " leading space",
               "two  spaces and\nnewline\n\nend", "trailing space ", "Timmy's big red ball!",
               "zzz qqq jjj", "aaaaaaaaaaa looooooong!!!!!!", "\u2581literal", "1+1=2\r\nwindows\ttab", expected_text[:-1]]
    for s in strings:
        a = tk.encode(s).ids
        b = port.encode(s)
        if SPIECE in s:  # literal U+2581: see the by-design divergence noted below
            check(a == tk.encode(s.replace(SPIECE, " ")).ids and a != b,
                  f"(c) tok512 encode {s[:40]!r}: literal U+2581 encodes like a space in HF "
                  "(llama2.c byte-falls-back; known divergence)")
            continue
        check(a == b, f"(c) tok512 encode {s[:40]!r}: tokenizers == llama2.c port "
                      f"({len(a)} ids)" + ("" if a == b else f" {a} vs {b}"))
    auto = transformers.AutoTokenizer.from_pretrained(args.model_dir)
    check(auto(strings[0])["input_ids"] == tk.encode(strings[0]).ids
          and auto.decode(expected_ids) == expected_text[:-1],
          f"(c) transformers AutoTokenizer ({type(auto).__name__}) agrees with tokenizers")
    ids = port.encode(expected_text[:-1], bos=False)
    check(tk.decode(ids) == expected_text[:-1], "(c) tok512 decode(encode(published text))")

    # (c) Llama-2 vocabulary: converter's tokenizer from llama2.c tokenizer.bin vs genuine files
    _, toks = conv.read_tokenizer_bin(os.path.join(LLAMA2_TOK, "tokenizer.bin"))
    pieces, special = conv.piece_strings(toks)
    mine = conv.build_tokenizer_json(pieces, [s for _, s in toks], special)
    with open(os.path.join(LLAMA2_TOK, "tokenizer.json"), encoding="utf-8") as f:
        genuine = json.load(f)
    # The genuine file spells 4 pieces (ids 8655, 17891, 20246, 30081) with ASCII spaces where
    # sentencepiece / tokenizer.bin have U+00A0; normalise that before comparing.
    nb = {i for p, i in mine["model"]["vocab"].items() if "\xa0" in p}
    fix = lambda s: s.replace("\xa0", " ")
    check(nb == {8655, 17891, 20246, 30081} and
          {fix(p): i for p, i in mine["model"]["vocab"].items()} == genuine["model"]["vocab"],
          "(c) Llama-2 vocab == genuine tokenizer.json (modulo its 4 NBSP->space pieces)")
    mm = [fix(m) for m in mine["model"]["merges"]]
    check(mm == genuine["model"]["merges"],
          f"(c) Llama-2 derived merges == genuine tokenizer.json merges, same order "
          f"({len(mm)} merges)")
    tk_mine = tokenizers.Tokenizer.from_str(json.dumps(mine))
    port2 = Llama2cTokenizer(os.path.join(LLAMA2_TOK, "tokenizer.bin"))
    with open(os.path.join(LLAMA2_TOK, "test_cases_sentencepiece.json"), encoding="utf-8") as f:
        cases = json.load(f)
    for c in cases:
        s, sp = c["text"], c["ids_with_bos"]
        a, p = tk_mine.encode(s).ids, port2.encode(s)
        # Known, by-design divergences (not converter bugs):
        #  - literal "<s>"/"</s>" in text: HF added-token matching makes them special tokens
        #    (as with the genuine Llama-2 tokenizer.json); sentencepiece and llama2.c don't.
        #  - literal U+2581 in text: HF/sentencepiece treat it as a space; llama2.c's vocab
        #    stores spaces as ' ', so it byte-falls-back on it.
        want_sp = "<s>" not in s
        want_port = "<s>" not in s and SPIECE not in s
        ok = (a == sp or not want_sp) and (a == p or not want_port)
        check(ok, f"(c) Llama-2 encode {s[:32]!r}: converted tokenizer.json"
                  + (" == sentencepiece ids" if want_sp else "")
                  + (" == llama2.c port" if want_port else "")
                  + f" ({len(a)} ids)" + ("" if ok else f" mine {a} sp {sp} port {p}"))

    # (d)
    with tempfile.TemporaryDirectory(prefix="loom-conv-") as tmp:
        check_synthetic(tmp)

    if FAILS:
        print(f"converter_check: {len(FAILS)} FAILED")
        return 1
    print("converter_check: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
