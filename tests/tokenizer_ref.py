#!/usr/bin/env python3
"""Reference encodes and decodes from the Python `tokenizers` library, for test_tokenizer.

usage: tokenizer_ref.py OUT_DIR
       then: test_tokenizer OUT_DIR/*.ref.json

For the shared tokenizers, and for variants of them that exercise pipeline options the shared files
do not use (Llama-3 style Split + ByteLevel, Split behaviours, Metaspace schemes, added-token
lstrip/rstrip/single_word/normalized, <unk> without byte fallback, regex normalizers), writes
OUT_DIR/NAME.tokenizer.json and OUT_DIR/NAME.ref.json:
    {"tokenizer": path, "encode": [{"text", "ids", "ids_plain"}], "decode": [{"ids", "skip", "keep"}]}
ids: encode(text, add_special_tokens=True); ids_plain: with False; skip/keep: decode(ids,
skip_special_tokens=True/False).
"""
import copy
import json
import os
import random
import sys
import unicodedata

from tokenizers import Tokenizer

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tokenizers")
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")

EXTRA = [
    "Hello world", "  multiple   spaces  ", "\t\ttabs\t", "new\nlines\r\n\r\n", "I'M SHOUTING'S 'll 'Ve",
    "numbers 12345678901234567890", "mixed日本語English한국어", "emoji 😀👍🏽🇺🇸 ok", "e\u0301 combining",
    "zero\u200bwidth", "def f(x):\n    return x**2  # comment\n", "supercalifragilistic" * 4, "",
    " ", "  ", "\n", "a", "~!@#$%^&*()_+`-={}|[]\\:\";'<>?,./", "ℌ𝔢𝔩𝔩𝔬 𝟙𝟚𝟛", "مرحبا بالعالم",
    "नमस्ते दुनिया", "สวัสดีครับ", "\u00a0nbsp\u00a0", "▁▁literal▁", "x\u3000y\u2003z", "tab\tnewline\n\tend ",
]


def texts_for(tok, seed):
    """The shared case texts, EXTRA, added tokens placed in text, and random mixtures."""
    texts = []
    for f in ("llama2/test_cases_sentencepiece.json", "phi-2/test_cases_tokenizersjs.json"):
        texts += [c["text"] for c in json.load(open(os.path.join(DATA, f)))]
    texts += EXTRA
    added = [t.content for t in tok.get_added_tokens_decoder().values() if t.content.strip()][:12]
    for a in added:
        texts += [a, f"x{a}y", f" {a} ", f"say {a}  then\n{a}\nend", f"{a}{a}"]
    rng = random.Random(seed)
    pool = list("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789 ,.!?'\"-_\n\t") + \
        ["  ", "   ", "'s", "'LL", "日", "本", "é", "ü", "😀", "🚀", "\u00a0", "▁", "\r\n", "\u3000", "ф", "ß"] + added
    for _ in range(300):
        texts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 40))))
    return list(dict.fromkeys(texts))


def id_sequences(tok, seed):
    """Random ids, biased to byte tokens, specials and ids past the end (HF skips those)."""
    rng = random.Random(seed)
    n = tok.get_vocab_size(with_added_tokens=True)
    vocab = tok.get_vocab(with_added_tokens=True)
    special = [i for i, t in tok.get_added_tokens_decoder().items() if t.special]
    byte_ids = [vocab[f"<0x{b:02X}>"] for b in range(1, 256) if f"<0x{b:02X}>" in vocab]
    nul = {vocab.get("<0x00>"), vocab.get("\u0100")}  # a NUL ends the C string early
    seqs = []
    for _ in range(300):
        seq = []
        for _ in range(rng.randint(1, 30)):
            r = rng.random()
            if byte_ids and r < 0.3:
                seq.append(rng.choice(byte_ids))
            elif special and r < 0.4:
                seq.append(rng.choice(special))
            elif r < 0.42:
                seq.append(n + rng.randint(0, 5))
            else:
                seq.append(rng.randrange(n))
        seqs.append([i for i in seq if i not in nul and "\u0100" not in (tok.id_to_token(i) or "")])
    return seqs


def write(out_dir, name, tj, seed):
    path = os.path.join(out_dir, name + ".tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    tok = Tokenizer.from_file(path)
    # Decode from a copy whose added tokens are all normalized=false: tokenizers 0.23 decodes a
    # normalized added token through its normalized form and then misses that it is special; the
    # C tokenizer keeps the earlier behaviour (see dec_feed), which this copy reproduces.
    plain = copy.deepcopy(tj)
    for a in plain.get("added_tokens") or []:
        a["normalized"] = False
    dec = Tokenizer.from_str(json.dumps(plain))
    ref = {"tokenizer": os.path.abspath(path), "encode": [], "decode": []}
    nfc = "NFC" in json.dumps(tj.get("normalizer"))
    for text in texts_for(tok, seed):
        if nfc and not unicodedata.is_normalized("NFC", text):
            continue  # the C tokenizer takes NFC input as given (see load_normalizer)
        ref["encode"].append({"text": text, "ids": tok.encode(text).ids,
                              "ids_plain": tok.encode(text, add_special_tokens=False).ids})
    for ids in id_sequences(tok, seed):
        ref["decode"].append({"ids": ids, "skip": dec.decode(ids, skip_special_tokens=True),
                              "keep": dec.decode(ids, skip_special_tokens=False)})
    with open(os.path.join(out_dir, name + ".ref.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False)
    print(f"{name}: {len(ref['encode'])} texts, {len(ref['decode'])} id sequences")


def load(rel):
    return json.load(open(os.path.join(DATA, rel), encoding="utf-8"))


def llama2_fixed():
    """llama2/tokenizer.json with U+00A0 restored (SOURCE.md): Python refuses its 3-part merges."""
    tj = load("llama2/tokenizer.json")
    vocab = tj["model"]["vocab"]
    for k in [k for k in vocab if " " in k]:
        vocab[k.replace(" ", "\u00a0")] = vocab.pop(k)
    merges = tj["model"]["merges"]
    for i, m in enumerate(merges):
        if m.count(" ") == 1:
            continue
        for k in (k for k, c in enumerate(m) if c == " "):  # the split whose parts are tokens
            a, b = m[:k].replace(" ", "\u00a0"), m[k + 1:].replace(" ", "\u00a0")
            if a in vocab and b in vocab and a + b in vocab:
                merges[i] = f"{a} {b}"
                break
    return tj


def variants():
    llama, phi3, phi2 = llama2_fixed(), load("phi-3-mini/tokenizer.json"), load("phi-2/tokenizer.json")
    yield "llama2", llama
    yield "phi-3-mini", phi3
    yield "phi-2", phi2

    v = copy.deepcopy(phi2)  # Llama-3 layout on the GPT-2 vocab
    v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    v["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                                                  {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [], "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [50256],
                                                          "tokens": ["<|endoftext|>"]}}}]}
    v["model"]["ignore_merges"] = True
    v["model"]["merges"] = [m.split(" ") for m in v["model"]["merges"]]
    yield "llama3-style", v

    v = copy.deepcopy(phi2)  # Qwen2 layout
    v["normalizer"] = {"type": "NFC"}
    v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN_SPLIT}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    yield "qwen-style", v

    v = copy.deepcopy(phi2)
    v["pre_tokenizer"]["add_prefix_space"] = True
    yield "bytelevel-prefix", v

    for behavior in ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"):
        for invert in (False, True):
            for pat in ({"Regex": r"\s+|[0-9]"}, {"String": " "}):
                v = copy.deepcopy(phi2)
                v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
                    {"type": "Split", "pattern": pat, "behavior": behavior, "invert": invert},
                    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
                yield f"split-{behavior}-{'inv' if invert else 'fwd'}-{'re' if 'Regex' in pat else 'str'}", v

    for scheme in ("always", "first", "never"):
        for split in (True, False):
            v = copy.deepcopy(llama)
            v["normalizer"] = None
            v["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": split}
            v["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": split}
            yield f"metaspace-{scheme}-{'split' if split else 'whole'}", v

    v = copy.deepcopy(phi3)  # added-token options
    by_id = {a["id"]: a for a in v["added_tokens"]}
    by_id[32007].update(lstrip=True, rstrip=True)
    by_id[32010].update(single_word=True)
    v["added_tokens"] += [
        {"id": 32011, "content": "foo bar", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": True, "special": False},
        {"id": 20230, "content": "xyz", "single_word": True, "lstrip": True, "rstrip": False,
         "normalized": False, "special": False},
        {"id": 32012, "content": "日本", "single_word": False, "lstrip": False, "rstrip": True,
         "normalized": True, "special": True}]
    yield "added-options", v

    for fuse in (True, False):
        v = copy.deepcopy(llama)
        v["model"]["byte_fallback"] = False
        v["model"]["fuse_unk"] = fuse
        yield f"unk-{'fused' if fuse else 'separate'}", v

    v = copy.deepcopy(llama)
    v["normalizer"]["normalizers"].insert(0, {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "})
    yield "regex-normalizer", v

    v = copy.deepcopy(phi2)
    v["decoder"] = None
    yield "no-decoder", v


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    os.makedirs(sys.argv[1], exist_ok=True)
    for seed, (name, tj) in enumerate(variants()):
        write(sys.argv[1], name, tj, seed)


if __name__ == "__main__":
    main()
