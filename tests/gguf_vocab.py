"""Tokenizers built from GGUF vocabularies (src/text/vocab_load.c, src/model/gguf_vocab.c) against
two oracles:

  a. llama.cpp's own test vocabularies, models/ggml-vocab-*.gguf with .inp/.out files (the ids
     each model's Hugging Face tokenizer gives, without BOS: llama.cpp's test-tokenizer-0
     tokenizes with add_special and parse_special off). They come from PyPI's llama-cpp-python
     sdist, which vendors llama.cpp; the download is cached in ~/.cache/loom-tests (or
     $LOOM_TEST_CACHE) and the test skips (exit 77) when it fails.
  b. transformers' GGUF conversion (AutoTokenizer.from_pretrained(dir, gguf_file=...)) on the
     same files, for multilingual, code and emoji strings, with and without special tokens,
     where transformers builds the model's tokenizer (see TRANSFORMERS_DIFFERS).

Every vocabulary is listed as checked or skipped, with the reason.

Usage: gguf_vocab.py GGUF_TOKENIZE (the driver built from tests/gguf_tokenize.c)"""
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util  # noqa: E402
from serve_util import check  # noqa: E402

SDIST = "llama-cpp-python==0.3.36"
SEP = "\n__ggml_vocab_test__\n"

STRINGS = [
    "Hello world",
    "Hello, world! How are you doing today?",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say we've done it, didn't we?",
    "Grüße aus München: Straße, Äpfel, Öl",
    "Le cœur a ses raisons que la raison ne connaît point.",
    "Съешь же ещё этих мягких французских булок",
    "你好，世界！今天天气很好。",
    "日本語のテキストとカタカナ、ひらがな",
    "안녕하세요 세계",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "Emoji: 🦙🔥👍🏽 👨‍👩‍👧 ❤️",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < 10; ++i) { printf(\"%d\\n\", i); }",
    "x = [1, 22, 333, 4444, 55555]  # numbers\t\ttabs",
    "https://example.com/path?query=1&b=2",
    "line one\nline two\n\n\nline five",
    "a  b   c    d",
    "3.14159 and 1,000,000 and 2025-01-01",
    "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>Hi <s>[INST] ok [/INST]</s>",
]

# Where transformers' conversion is not the model's tokenizer, its ids are no oracle: loom follows
# llama.cpp's .out (the model's own tokenizer.json) there. Whole vocabularies:
NO_SPLIT = "transformers has no split for this pre-tokenizer name and uses GPT-2's"
TRANSFORMERS_DIFFERS = {
    "command-r": NO_SPLIT,
    "deepseek-coder": NO_SPLIT,
    "deepseek-llm": NO_SPLIT,
    "falcon": NO_SPLIT,
    "refact": NO_SPLIT,
    "starcoder": NO_SPLIT,
}
# Some strings (transformers' known departures from the model's tokenizer):
SKIP_STRINGS = {
    # GPT-NeoX's runs of spaces are user-defined tokens transformers drops (not in its respelled vocab)
    "mpt": (lambda s: "  " in s, "runs of spaces"),
    # text after a special token gets a space prefix in llama.cpp (as in Llama 2's own
    # tokenizer.json), none in transformers' Metaspace; so does text starting with a space
    "llama-spm": (lambda s: "<s>" in s, "text after <s>"),
    # transformers adds its default <|endoftext|> as a new id past the vocabulary
    "llama-bpe": (lambda s: "<|endoftext|>" in s, "<|endoftext|>"),
}
# BOS with add_special where transformers adds none: llama.cpp's default for the Llama-3 names (the
# file has no add_bos_token), and Gemma 4's add_bos_token, which transformers overrides
EXTRA_BOS = {"llama-bpe": 128000, "gemma-4": 2}



def fetch(cache):
    """The folder holding llama.cpp's ggml-vocab-* files (downloaded once)."""
    models = cache / "llama-cpp-python-0.3.36-vocabs"
    if (models / "done").exists():
        return models
    dl = Path(tempfile.mkdtemp(prefix="loom-gguf-vocab-"))
    try:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                            SDIST, "-d", str(dl)], capture_output=True, text=True, timeout=900)
        sdists = list(dl.glob("*.tar.gz"))
        if r.returncode or not sdists:
            print(f"skipped: cannot download {SDIST} from PyPI "
                  f"({(r.stderr.strip().splitlines() or ['no output'])[-1]})")
            sys.exit(77)
        tmp = models.with_suffix(".part")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        with tarfile.open(sdists[0]) as tar:
            for m in tar.getmembers():
                name = m.name.rsplit("/", 1)[-1]
                if m.isfile() and "/vendor/llama.cpp/models/" in m.name and name.startswith("ggml-vocab-"):
                    (tmp / name).write_bytes(tar.extractfile(m).read())
        (tmp / "done").write_text(SDIST)
        shutil.rmtree(models, ignore_errors=True)
        tmp.rename(models)
        return models
    finally:
        shutil.rmtree(dl, ignore_errors=True)


def tokenize(driver, gguf, texts, special=False):
    """loom's ids for each text, or the refusal message (str)."""
    r = subprocess.run([driver, str(gguf)] + (["--special"] if special else []), input=json.dumps(texts),
                       capture_output=True, text=True, timeout=300)
    if r.returncode == 3:
        return r.stdout.strip().removeprefix("refused: ")
    if r.returncode:
        sys.exit(f"{driver} {gguf}: exit {r.returncode}\n{r.stdout}{r.stderr}")
    lines = r.stdout.split("\n")[:len(texts)]
    print(f"  {gguf.name}: {r.stderr.strip()}")
    return [[int(x) for x in line.split()] for line in lines]


def read_tests(gguf):
    raw = Path(str(gguf) + ".inp").read_text(encoding="utf-8")
    texts, pos = [], 0
    while pos < len(raw):  # as llama.cpp's test-tokenizer-0 splits it
        nxt = raw.find(SEP, pos)
        if nxt < 0:
            texts.append(raw[pos:])
            break
        texts.append(raw[pos:nxt])
        pos = nxt + len(SEP)
    outs = Path(str(gguf) + ".out").read_text(encoding="utf-8").split("\n")[:len(texts)]
    return texts, [[int(x) for x in o.split()] for o in outs]


def against_llama_cpp(driver, models):
    checked, skipped = [], []
    for gguf in sorted(models.glob("ggml-vocab-*.gguf")):
        name = gguf.name.removeprefix("ggml-vocab-").removesuffix(".gguf")
        if not Path(str(gguf) + ".out").exists():
            skipped.append((name, "no .inp/.out in llama.cpp"))
            continue
        texts, want = read_tests(gguf)
        got = tokenize(driver, gguf, texts)
        if isinstance(got, str):
            skipped.append((name, f"loom refuses it: {got.split(': ', 1)[-1]}"))
            continue
        bad = [i for i in range(len(texts)) if got[i] != want[i]]
        for i in bad[:5]:
            print(f"  {name}: {texts[i]!r}\n    loom  {got[i]}\n    llama {want[i]}")
        check(not bad, f"{name}: {len(bad)} of {len(texts)} strings differ from llama.cpp's .out")
        checked.append((name, len(texts) - len(bad), len(texts)))
    return checked, skipped


def against_transformers(driver, models, names):
    try:
        from transformers import AutoTokenizer
    except ImportError:
        print("transformers: skipped (not installed)")
        return [], [(n, "transformers not installed") for n in names]
    checked, skipped = [], []
    for name in names:
        if name in TRANSFORMERS_DIFFERS:
            skipped.append((name, TRANSFORMERS_DIFFERS[name]))
            continue
        gguf = models / f"ggml-vocab-{name}.gguf"
        try:
            tok = AutoTokenizer.from_pretrained(str(models), gguf_file=gguf.name)
            encode = lambda text, special: tok(text, add_special_tokens=special)["input_ids"]  # noqa: E731
        except Exception as e:  # noqa: BLE001 -- the model's config is refused: build the tokenizer alone
            try:
                from transformers.integrations.gguf.gguf_tokenizer_mapping import (convert_gguf_tokenizer,
                                                                                   get_gguf_tokenizer)
                arch, tdict, _ = get_gguf_tokenizer(str(gguf))
                backend = convert_gguf_tokenizer(arch, tdict)[0]
                encode = lambda text, special: backend.encode(text, add_special_tokens=special).ids  # noqa: E731
            except Exception as e2:  # noqa: BLE001 -- any failure of the oracle is a skip, named
                skipped.append((name, f"transformers cannot load it: {str(e).splitlines()[0][:80]}; "
                                      f"{str(e2).splitlines()[0][:80]}"))
                continue
        skip, why = SKIP_STRINGS.get(name, (lambda s: False, ""))
        texts = [s for s in STRINGS if not skip(s)]
        if len(texts) < len(STRINGS):
            print(f"  {name}: {len(STRINGS) - len(texts)} strings left out ({why})")
        bad = 0
        for special in (False, True):
            got = tokenize(driver, gguf, texts, special)
            for text, ids in zip(texts, got):
                want = encode(text, special)
                if special and name in EXTRA_BOS:
                    want = [EXTRA_BOS[name]] + want
                if ids != want:
                    bad += 1
                    print(f"  {name} special={special}: {text!r}\n    loom         {ids}\n    transformers {want}")
        check(not bad, f"{name}: {bad} of {2 * len(texts)} encodings differ from transformers'")
        checked.append((name, 2 * len(texts) - bad, 2 * len(texts)))
    return checked, skipped


def report(title, checked, skipped):
    print(f"{title}: {sum(p == n for _, p, n in checked)} of {len(checked)} vocabularies match")
    for name, passed, n in checked:
        print(f"  {'ok  ' if passed == n else 'FAIL'} {name}: {passed}/{n}")
    for name, why in skipped:
        print(f"  skip {name}: {why}")


def main():
    driver = sys.argv[1]
    cache = Path(os.environ.get("LOOM_TEST_CACHE", Path.home() / ".cache" / "loom-tests"))
    cache.mkdir(parents=True, exist_ok=True)
    models = fetch(cache)
    checked, skipped = against_llama_cpp(driver, models)
    report("llama.cpp's .out", checked, skipped)
    tchecked, tskipped = against_transformers(driver, models, [n for n, _, _ in checked])
    report("transformers", tchecked, tskipped)
    if serve_util.failures:
        sys.exit(f"{serve_util.failures} checks failed")
    print("all checks passed")


if __name__ == "__main__":
    main()
