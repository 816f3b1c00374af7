"""llama.cpp's own token ids for Gemma 3 270M's published GGUF (issue 43): for each string of
tests/golden/gemma3_270m/tokenize.json, what `llama-tokenize` (built from the llama.cpp tree that
PyPI's llama-cpp-python sdist vendors) gives on the same file, without BOS, special tokens parsed
as llama-server's /tokenize does by default, no escape processing. tests/gemma3_real.py then holds
loom's /tokenize on that file to these ids, beside transformers' GGUF tokenizer's.

Usage: make_gemma3_llama_ids.py LLAMA_TOKENIZE GEMMA_GGUF LLAMA_CPP_VERSION
(benches/gguf.sh builds llama.cpp's tree; `cmake --build DIR --target llama-tokenize` adds the
tool; tests/gemma3_real.py caches the GGUF in ~/.cache/loom-tests.)"""
import ast
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "gemma3_270m", "tokenize.json")


def llama_ids(tool, gguf, text):
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode())
    try:
        out = subprocess.run([tool, "-m", gguf, "-f", f.name, "--ids", "--no-bos", "--no-escape", "--log-disable"],
                             capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(f.name)
    return ast.literal_eval(out.strip().splitlines()[-1]) if out.strip() else []


def main():
    tool, gguf, version = sys.argv[1:4]
    golden = json.load(open(GOLDEN))
    golden["gguf_sha256"] = hashlib.sha256(open(gguf, "rb").read()).hexdigest()
    golden["llama_cpp"] = version
    golden["llama_tokenize"] = [llama_ids(tool, gguf, t) for t in golden["texts"]]
    with open(GOLDEN, "w") as f:  # a string or its ids a line
        f.write("{\n" + ",\n".join(
            f" {json.dumps(k)}: " + ("[\n" + ",\n".join("  " + json.dumps(e, ensure_ascii=False) for e in v) + "\n ]"
                                     if isinstance(v, list) else json.dumps(v)) for k, v in golden.items()) + "\n}\n")
    print(f"{GOLDEN}: {len(golden['texts'])} strings")


if __name__ == "__main__":
    main()
