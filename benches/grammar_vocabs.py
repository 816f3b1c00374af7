"""Real tokenizers of 128k and 256k tokens for benches/structured.sh, from the vocabulary-only
GGUF files llama.cpp ships in its source tree (vendor/llama.cpp/models in the llama-cpp-python
sdist): ggml-vocab-llama-bpe.gguf (Llama 3's 128,256 tokens) through transformers' GGUF
converter, and ggml-vocab-command-r.gguf (Command-R's 256,000 tokens, a byte-level BPE that
transformers' converter does not take) rebuilt as a tokenizer.json from its tokens, merges and
token types with the `tokenizers` library. Each goes into OUT/<name>/ beside a config.json of the
Llama-3.2-1B shape sized to the vocabulary, so `loom ... -m OUT/<name> --load-format dummy` runs.

Usage: grammar_vocabs.py LLAMA_CPP_MODELS_DIR CONFIG_JSON OUT_DIR"""
import json
import os
import sys

import gguf
import tokenizers
from tokenizers import decoders, models, pre_tokenizers
from transformers import AutoTokenizer

src, config_path, out = sys.argv[1:4]


def write_config(d, vocab, bos, eos):
    c = json.load(open(config_path))
    c.update(vocab_size=vocab, bos_token_id=bos, eos_token_id=eos)
    json.dump(c, open(os.path.join(d, "config.json"), "w"))


d = os.path.join(out, "vocab-128k")
os.makedirs(d, exist_ok=True)
t = AutoTokenizer.from_pretrained(src, gguf_file="ggml-vocab-llama-bpe.gguf")
t.save_pretrained(d)
write_config(d, 128256, t.bos_token_id, t.eos_token_id)
print(f"{d}: {len(t)} tokens (Llama 3)")

r = gguf.GGUFReader(os.path.join(src, "ggml-vocab-command-r.gguf"))


def strings(name):
    f = r.fields[name]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def ints(name):
    f = r.fields[name]
    return [int(f.parts[i][0]) for i in f.data]


toks, merges, types = strings("tokenizer.ggml.tokens"), strings("tokenizer.ggml.merges"), ints("tokenizer.ggml.token_type")
eos = int(r.fields["tokenizer.ggml.eos_token_id"].parts[-1][0])
bos = int(r.fields["tokenizer.ggml.bos_token_id"].parts[-1][0])
bpe = models.BPE(vocab={s: i for i, s in enumerate(toks)}, merges=[tuple(m.split(" ", 1)) for m in merges])
tk = tokenizers.Tokenizer(bpe)
tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tk.decoder = decoders.ByteLevel()
tk.add_special_tokens([tokenizers.AddedToken(s, special=True) for s, ty in zip(toks, types) if ty == 3])  # control
d = os.path.join(out, "vocab-256k")
os.makedirs(d, exist_ok=True)
tk.save(os.path.join(d, "tokenizer.json"))
write_config(d, len(toks), bos, eos)
print(f"{d}: {len(toks)} tokens (Command-R)")
