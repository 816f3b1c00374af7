"""A GGUF file's named chat templates (issue 43): llama.cpp's converter writes a model's list of
named templates as tokenizer.chat_template (the default) and tokenizer.chat_template.NAME,
through the gguf package's add_chat_template, which this test uses on a copy of a golden file.
`loom serve -m` on it must render a request with tools through "tool_use" and one without
through the default, as transformers' get_chat_template picks them; a file with the default
alone renders both through it.

Usage: gguf_templates.py LOOM SOURCE_DIR"""
import os
import sys
import tempfile

from gguf import GGUFReader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util  # noqa: E402
from gguf_refusals import rewrite  # noqa: E402
from serve_util import LoomServer, check  # noqa: E402

DEFAULT = "D:{{ messages[0].content }}"
TOOL_USE = "T:{{ tools | length }}:{{ messages[0].content }}"


def byte_tokens():
    """GPT-2's byte-level vocabulary: each byte as the printable character that stands for it."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = [b for b in range(256) if b not in keep]
    chars = {b: chr(b) for b in keep} | {b: chr(256 + i) for i, b in enumerate(moved)}
    return [chars[b] for b in range(256)]


def with_templates(src, dst, templates):
    """src as dst with templates added as llama.cpp's converter adds them. The golden's vocabulary
    is its 256 bytes with no merges (it is read for logits, never text), which a server does
    not load: the copy's is GPT-2's byte-level one with a merge, "hi" in byte 0's place."""
    tokens = byte_tokens()
    tokens[0] = "hi"

    def edit(w):
        w.add_token_list(tokens)
        w.add_token_merges(["h i"])
        w.add_chat_template(templates)

    rewrite(src, dst, strip=("tokenizer.ggml.tokens",), edit=edit)


def prompts(loom, path):
    """The prompts /tokenize renders for a chat without tools and with an empty list of them."""
    s = LoomServer(loom, "gguf-templates", "-m", path)
    try:
        msgs = [{"role": "user", "content": "hi"}]
        return s.post("/tokenize", {"messages": msgs})["prompt"], s.post("/tokenize", {"messages": msgs, "tools": []})["prompt"]
    finally:
        s.stop()


def main():
    loom, root = sys.argv[1], sys.argv[2]
    src = os.path.join(root, "tests/golden/gguf_llama/model.gguf")
    with tempfile.TemporaryDirectory(prefix="loom-gguf-templates-") as tmp:
        named = os.path.join(tmp, "named.gguf")
        with_templates(src, named, [{"name": "default", "template": DEFAULT}, {"name": "tool_use", "template": TOOL_USE}])
        keys = set(GGUFReader(named).fields)
        check({"tokenizer.chat_template", "tokenizer.chat_template.tool_use"} <= keys,
              f"the gguf package wrote no named template keys: {sorted(k for k in keys if 'chat' in k)}")
        got = prompts(loom, named)
        check(got == ("D:hi", "T:0:hi"), f"named templates: without and with tools loom rendered {got}")
        single = os.path.join(tmp, "single.gguf")
        with_templates(src, single, DEFAULT)
        got = prompts(loom, single)
        check(got == ("D:hi", "D:hi"), f"one template: without and with tools loom rendered {got}")
    print(f"{'FAILED' if serve_util.failures else 'passed'}: a GGUF file's named chat templates")
    sys.exit(1 if serve_util.failures else 0)


if __name__ == "__main__":
    main()
