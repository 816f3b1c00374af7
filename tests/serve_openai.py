"""`loom serve` driven by the real client: OpenAI's `openai` package from PyPI, on loopback.

Checks, against oracles loom did not write:
- greedy completions and chat completions equal `loom run`'s text for the same prompt (and
  the chat prompt equals what the server's /tokenize renders), streamed or not, at tp=1 and
  with -tp 2 --enable-async-tp (prompt steps sharded by SP);
- stop strings (one that spans tokens), max_tokens, usage, finish reasons, logprobs;
- structured outputs (response_format json_schema and json_object, vLLM's structured_outputs
  choice and regex, llama-server's GBNF grammar): every finished output follows its constraint,
  checked with `jsonschema` and Python's `re`, streamed or not; unsupported constraints are 400s
  naming the field;
- on a golden model (no tokenizer: prompts as ids, tokens as "token_id:N"), the first
  token's logprobs equal transformers' log-softmax of its logits (tests/golden/) to 1e-4;
- tool calls: the parser detected from a hermes template (printed at start-up); with
  tool_choice "required" or a named function (forced by the grammar engine, on random weights),
  the client gets tool_calls whose arguments parse and validate against the tool's parameters,
  streamed (id and name first, then argument fragments) and not, finish_reason "tool_calls",
  at tp=1 and -tp 2 --enable-async-tp; "auto" leaves an output without a call as content; bad
  tools and tool_choice get 400s naming the field;
- 8 clients sending 64 requests of mixed lengths at once all complete, with the text each
  gives alone (batch invariance of greedy output, see docs/DESIGN.md), and nothing leaks:
  KV slots (/metrics) and file descriptors (/proc);
- the sampling API: n > 1 gives n distinct samples, choice i being the sample of seed + i alone,
  streamed too (chunks carrying each choice's index), and the same seed reproduces them; best_of
  returns the n of best cumulative logprob; the choices of a long prompt share its KV (prefix
  cache hits); logit_bias forces and forbids tokens, as allowed_token_ids does; echo; stop_token_ids; min_tokens holding
  off EOS and stop ids; penalties change the output, each chosen token being the best of the
  raw logprobs less vLLM's penalties; on a golden model, the first token under
  repetition_penalty and logit_bias is the argmax of transformers' logits processed by vLLM's
  formulas; under speculative decoding such a request gets no proposals and the same output;
  every field loom refuses is a 400 naming it.

Usage: serve_openai.py LOOM_BINARY SOURCE_DIR. Every server it starts listens on 127.0.0.1
only and is stopped with SIGTERM (which must drain and exit 0)."""
import concurrent.futures
import json
import os
import re
import struct
import subprocess
import sys
import time
import urllib.request

import jsonschema
import numpy as np
import openai

import serve_util
from serve_util import HERMES_TEMPLATE, check

LOOM, SRC = sys.argv[1], sys.argv[2]


class Server(serve_util.LoomServer):
    def __init__(self, *args):
        super().__init__(LOOM, "serve-openai", *args)
        self.reconnect()

    def reconnect(self):
        self.client = openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="none", max_retries=0,
                                    timeout=120)

    def metric(self, name):
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10).read().decode()
        return float(re.search(rf"^loom:{name}{{[^}}]*}} (\S+)$", text, re.M).group(1))

    def fds(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))


def loom_run(*args):
    out = subprocess.run([*LOOM.split(), "run", *args], capture_output=True, text=True, check=True).stdout
    return out[:-1] if out.endswith("\n") else out


def completions(s, run_flags, model):
    want = loom_run(*run_flags, "-p", "The robot", "-n", "24", "--ignore-eos")
    kw = dict(model=model, prompt="The robot", max_tokens=24, temperature=0, extra_body={"ignore_eos": True})
    r = s.client.completions.create(**kw)
    check(r.choices[0].text == want, f"completion {r.choices[0].text!r} != loom run's {want!r}")
    check(r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 24, f"usage/finish: {r}")
    streamed = "".join(c.choices[0].text for c in s.client.completions.create(**kw, stream=True))
    check(streamed == want, f"streamed {streamed!r} != {want!r}")
    # a stop string that spans tokens (" s", "m", "all"), streamed and not
    stop = "small. He"
    cut = want[:want.index(stop)]
    r = s.client.completions.create(**kw | {"stop": [stop, "zzz"]})
    check(r.choices[0].text == cut and r.choices[0].finish_reason == "stop", f"stop: {r.choices[0]}")
    chunks = list(s.client.completions.create(**kw | {"stop": stop}, stream=True))
    check("".join(c.choices[0].text for c in chunks) == cut, "streamed stop")
    check(chunks[-1].choices[0].finish_reason == "stop", f"streamed stop finish: {chunks[-1]}")
    # logprobs: the greedy token is the most likely one, and the tokens spell the text
    r = s.client.completions.create(**kw | {"max_tokens": 8, "logprobs": 3})
    lp = r.choices[0].logprobs
    check("".join(lp.tokens) == r.choices[0].text, f"logprob tokens {lp.tokens} vs {r.choices[0].text!r}")
    for tok, val, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        best = max(top.values())
        check(len(top) <= 3 and abs(val - best) < 1e-6 and top.get(tok) == val, f"logprobs of {tok!r}: {val} {top}")
    check(lp.text_offset[0] == 0 and all(a < b for a, b in zip(lp.text_offset, lp.text_offset[1:])), "text offsets")
    return want


def chat(s, run_flags, model):
    msgs = [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "Tell me about a robot"}]
    rendered = s.post("/tokenize", {"model": model, "messages": msgs})
    check(rendered["prompt"].endswith("<|im_start|>assistant\n") and rendered["count"] == len(rendered["tokens"]),
          f"/tokenize of messages: {rendered}")
    kw = dict(model=model, messages=msgs, max_tokens=16, temperature=0, extra_body={"ignore_eos": True})
    r = s.client.chat.completions.create(**kw)
    text = r.choices[0].message.content
    # the same prompt as ids through /v1/completions, and through loom run's own tokenizer path
    ids = s.client.completions.create(model=model, prompt=rendered["tokens"], max_tokens=16, temperature=0,
                                      extra_body={"ignore_eos": True}).choices[0].text
    check(text == ids, f"chat {text!r} != completion of its rendered ids {ids!r}")
    check(r.choices[0].message.role == "assistant" and r.usage.prompt_tokens == rendered["count"], f"chat: {r}")
    chunks = list(s.client.chat.completions.create(**kw, stream=True))
    check(chunks[0].choices[0].delta.role == "assistant", f"first chunk: {chunks[0]}")
    check("".join(c.choices[0].delta.content or "" for c in chunks) == text, "streamed chat")
    check(chunks[-1].choices[0].finish_reason == "length", f"last chunk: {chunks[-1]}")
    r = s.client.chat.completions.create(**kw | {"logprobs": True, "top_logprobs": 2})
    content = r.choices[0].logprobs.content
    check(len(content) == 16 and all(len(c.top_logprobs) == 2 for c in content), "chat logprobs")
    check("".join(c.token for c in content) == r.choices[0].message.content, "chat logprob tokens spell the text")


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo", "Rome"]},
                                                    "metric": {"type": "boolean"}},
                   "required": ["city", "metric"], "additionalProperties": False}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
                                       "required": ["zone"], "additionalProperties": False}}}




def valid_arguments(tool, arguments):
    """Whether a call's arguments (a JSON string) validate against the tool's parameters: by
    the `jsonschema` package where it is installed, else by hand for the schemas above."""
    try:
        args = json.loads(arguments)
    except ValueError:
        return False
    schema = tool["function"]["parameters"]
    try:
        import jsonschema
        return jsonschema.Draft202012Validator(schema).is_valid(args)
    except ImportError:
        props = schema["properties"]
        return (isinstance(args, dict) and set(args) <= set(props) and set(schema["required"]) <= set(args)
                and all(args[k] in p["enum"] if "enum" in p else isinstance(args[k], bool) for k, p in props.items()
                        if k in args))


def streamed_calls(chunks):
    """delta.tool_calls assembled as a client does: the index, id and name first, then fragments
    of the arguments."""
    calls = {}
    for c in chunks:
        for d in c.choices[0].delta.tool_calls or [] if c.choices else []:
            if d.index not in calls:
                check(d.id and d.type == "function" and d.function.name, f"a call's first delta: {d}")
                calls[d.index] = {"id": d.id, "name": d.function.name, "arguments": d.function.arguments or ""}
            else:
                check(not d.id and not d.function.name, f"a later delta of call {d.index}: {d}")
                calls[d.index]["arguments"] += d.function.arguments or ""
    return [calls[i] for i in sorted(calls)]


def tool_calls(s, model):
    s.log.seek(0)
    check("tool calls read in the hermes format (detected from the chat template)" in s.log.read(),
          "start-up names the detected tool-call parser")
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    # no max_tokens: what the context leaves; a call that outgrows it stays content, and
    # finish_reason is "tool_calls" once one call is complete (as vLLM)
    kw = dict(model=model, messages=msgs, temperature=0.8)
    tools = {"get_weather": WEATHER, "get_time": CLOCK}
    for choice, parallel in (("required", True), ("required", False),
                             ({"type": "function", "function": {"name": "get_time"}}, True)):
        for seed in range(3):
            args = kw | {"tools": [WEATHER, CLOCK], "tool_choice": choice, "parallel_tool_calls": parallel,
                         "seed": seed}
            what = f"tool_choice {choice}, parallel {parallel}, seed {seed}"
            r = s.client.chat.completions.create(**args)
            m = r.choices[0].message
            check(r.choices[0].finish_reason == "tool_calls" and m.tool_calls, f"{what}: {r}")
            calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                     for c in m.tool_calls or []]
            check(all(c.type == "function" and c.id.startswith("call_") for c in m.tool_calls or []), f"{what}: ids")
            check(len({c["id"] for c in calls}) == len(calls), f"{what}: call ids are distinct")
            chunks = list(s.client.chat.completions.create(**args, stream=True))
            check(chunks[-1].choices[0].finish_reason == "tool_calls", f"{what}, streamed: {chunks[-1]}")
            for got in (calls, streamed_calls(chunks)):
                check(got, f"{what}: no calls")
                if not parallel or isinstance(choice, dict):
                    check(len(got) == 1, f"{what}: {len(got)} calls")
                for c in got:
                    check(c["name"] in tools and (not isinstance(choice, dict) or c["name"] == "get_time"),
                          f"{what}: called {c['name']}")
                    check(c["name"] in tools and valid_arguments(tools[c["name"]], c["arguments"]),
                          f"{what}: arguments {c['arguments']!r} do not validate")
            check([(c["name"], c["arguments"]) for c in calls] ==
                  [(c["name"], c["arguments"]) for c in streamed_calls(chunks)], f"{what}: streamed calls differ")


def tool_requests(s, model):
    """What does not need the grammar engine: "auto" and "none" parse (here: find no call in)
    what the model writes, and malformed tools and tool_choice are refused naming the field."""
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    kw = dict(model=model, messages=msgs, max_tokens=16, temperature=0, extra_body={"ignore_eos": True})
    plain = s.client.chat.completions.create(**kw | {"tools": [WEATHER], "tool_choice": "none"})
    for choice in ("auto", None):
        r = s.client.chat.completions.create(**kw | {"tools": [WEATHER]} | ({"tool_choice": choice} if choice else {}))
        m = r.choices[0].message
        check(not m.tool_calls and m.content == plain.choices[0].message.content, f"tool_choice {choice}: {r}")
        check(r.choices[0].finish_reason == "length", f"tool_choice {choice}: finish {r.choices[0].finish_reason}")
        chunks = list(s.client.chat.completions.create(**kw | {"tools": [WEATHER], "stream": True}))
        check("".join(c.choices[0].delta.content or "" for c in chunks) == m.content, "auto, streamed: content")
        check(not any(c.choices[0].delta.tool_calls for c in chunks), "auto, streamed: no calls")
    bad = [({"tools": {"type": "function"}}, "tools"),
           ({"tools": [{"type": "retrieval"}]}, "tools"),
           ({"tools": [{"type": "function", "function": {"parameters": {}}}]}, "tools"),
           ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "none"}}]}, "tools"),
           ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
           ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
           ({"tools": [WEATHER], "tool_choice": {"type": "function"}}, "tool_choice"),
           ({"tool_choice": "required"}, "tool_choice"),
           ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls")]
    for extra, param in bad:
        try:
            s.client.chat.completions.create(**kw | extra)
            check(False, f"{extra} was accepted")
        except openai.BadRequestError as e:
            check(e.body.get("param") == param, f"{extra}: param {e.body.get('param')}, expected {param}")


PROMPTS = ["Once upon a time", "The robot", "Lily wanted to", "One day, a little bird", "Tom and Sue went",
           "The sun was", "A big dog", "She said"]


def concurrency(s, model):
    jobs = [(PROMPTS[i % len(PROMPTS)] + " " * (i // len(PROMPTS) % 2), 8 + (i * 37) % 57) for i in range(64)]

    def one(job):
        r = s.client.completions.create(model=model, prompt=job[0], max_tokens=job[1], temperature=0, logprobs=1,
                                        extra_body={"ignore_eos": True})
        return r.choices[0].text, r.choices[0].logprobs.token_logprobs

    alone = [one(j) for j in jobs]
    s.client.close()  # its pooled keep-alive connections would count as the server's descriptors
    fds = s.fds()
    deadline = time.time() + 5  # until the server has closed its ends of them
    while time.time() < deadline:
        time.sleep(0.3)
        if s.fds() == fds:
            break
        fds = s.fds()
    s.reconnect()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        together = list(pool.map(one, jobs))
    same = sum(a[0] == b[0] for a, b in zip(alone, together))
    dev = max(max(abs(x - y) for x, y in zip(a[1], b[1])) for a, b in zip(alone, together) if a[0] == b[0])
    print(f"concurrency: 64 requests from 8 clients, {same}/64 texts as alone; largest logprob deviation {dev:.2e}")
    check(same == 64, f"{64 - same} of 64 concurrent greedy outputs differ from the same request alone")
    # rows batched into one GEMM instead of the one-row kernel: float sums in another order
    check(dev < 1e-4, f"logprobs deviate by {dev} between batched and alone")
    s.client.close()
    s.reconnect()
    check(s.metric("kv_slots_used") == 0 and s.metric("num_requests_running") == 0, "slots left in use")
    # last, since the /metrics connections count too until the server has closed its ends, which
    # it does as it sees each client go
    deadline = time.time() + 5
    while s.fds() > fds and time.time() < deadline:
        time.sleep(0.05)
    check(s.fds() <= fds, f"descriptors {fds} -> {s.fds()} after 64 requests")


PERSON = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 24}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "pets": {"type": "array", "items": {"enum": ["cat", "dog", "fish"]}, "maxItems": 3}},
          "required": ["name", "age"], "additionalProperties": False}


def valid(text, schema):
    try:
        jsonschema.validate(json.loads(text), schema)
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


def structured(s, flags):
    """Structured outputs through the client: every finished output follows its constraint."""
    msgs = [{"role": "user", "content": "Tell me about a person."}]
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    finished = 0
    for seed in range(4):
        r = s.client.chat.completions.create(model="stories260K", messages=msgs, max_tokens=200, temperature=1,
                                             seed=seed, response_format=rf)
        text, why = r.choices[0].message.content, r.choices[0].finish_reason
        check(why == "length" or valid(text, PERSON), f"{flags} json_schema, seed {seed}: {text!r} does not validate")
        finished += why == "stop"
        pieces, why = [], None
        for c in s.client.chat.completions.create(model="stories260K", messages=msgs, max_tokens=200, temperature=1,
                                                  seed=seed, response_format=rf, stream=True):
            pieces.append(c.choices[0].delta.content or "")
            why = c.choices[0].finish_reason or why
        check("".join(pieces) == text, f"{flags} json_schema, seed {seed}: the stream {''.join(pieces)!r} != {text!r}")
    check(finished >= 2, f"{flags}: only {finished} of 4 json_schema outputs finished in 200 tokens")
    r = s.client.chat.completions.create(model="stories260K", messages=msgs, max_tokens=200, temperature=0,
                                         response_format={"type": "json_object"})
    check(r.choices[0].finish_reason == "length" or isinstance(json.loads(r.choices[0].message.content), dict),
          f"{flags} json_object: {r.choices[0].message.content!r}")
    so = {"choice": ["happily ever after", "the end", "and then"]}
    for seed in range(3):
        r = s.client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=20, temperature=1,
                                        seed=seed, extra_body={"structured_outputs": so})
        check(r.choices[0].text in so["choice"], f"{flags} choice: {r.choices[0].text!r}")
    r = s.client.completions.create(model="stories260K", prompt="The cat", max_tokens=40, temperature=1, seed=5,
                                    extra_body={"structured_outputs": {"regex": "[A-Z][a-z]{2,8}( [a-z]{1,8}){2,4}\\."}})
    check(re.fullmatch(r"[A-Z][a-z]{2,8}( [a-z]{1,8}){2,4}\.", r.choices[0].text), f"{flags} regex: {r.choices[0].text!r}")
    r = s.client.completions.create(model="stories260K", prompt="Lily", max_tokens=40, temperature=1, seed=2,
                                    extra_body={"grammar": 'root ::= "Lily " ("ran" | "sat") " " [a-z]+ "."'})
    check(re.fullmatch(r"Lily (ran|sat) [a-z]+\.", r.choices[0].text), f"{flags} GBNF: {r.choices[0].text!r}")
    for body, param in (({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "propertyNames": {"maxLength": 3}}}}}, "response_format"),
                        ({"grammar": "root ::= root \"a\""}, "grammar"),
                        ({"structured_outputs": {"regex": "(?=a)b"}}, "structured_outputs")):
        refused(s, param, model="stories260K", prompt="x", max_tokens=4, extra_body=body)


def refused(s, param, **kw):
    """The request is a 400 whose error names param."""
    try:
        s.client.completions.create(**kw)
    except openai.BadRequestError as e:
        check(e.param == param, f"refusal of {kw}: param {e.param!r}, want {param!r}")
        return
    check(False, f"{kw} was not refused")


def sampling(s, model):
    base = dict(model=model, prompt="Once upon a time", max_tokens=16, temperature=1)
    # n > 1: distinct samples; choice i is what seed + i gives alone; the seed reproduces them
    r = s.client.completions.create(**base, n=4, seed=7)
    texts = [c.text for c in sorted(r.choices, key=lambda c: c.index)]
    check(sorted(c.index for c in r.choices) == [0, 1, 2, 3] and len(set(texts)) == 4, f"n=4: {texts}")
    alone = [s.client.completions.create(**base, seed=7 + i).choices[0].text for i in range(4)]
    check(texts == alone, f"n=4 choices {texts} != seeds 7..10 alone {alone}")
    again = s.client.completions.create(**base, n=4, seed=7)
    check([c.text for c in sorted(again.choices, key=lambda c: c.index)] == texts, "the same seed must reproduce n=4")
    check(r.usage.completion_tokens == 64 and r.usage.prompt_tokens == 5, f"usage summed over choices: {r.usage}")
    # streamed: each chunk names its choice; the pieces of each join to its text
    chunks = list(s.client.completions.create(**base, n=4, seed=7, stream=True,
                                              stream_options={"include_usage": True}))
    joined, finished = ["" for _ in range(4)], set()
    for c in chunks:
        for ch in c.choices:
            joined[ch.index] += ch.text
            if ch.finish_reason:
                finished.add(ch.index)
    check(joined == texts and finished == {0, 1, 2, 3}, f"streamed n=4: {joined} {finished}")
    check(chunks[-1].usage.completion_tokens == 64, f"streamed usage: {chunks[-1].usage}")
    chat = s.client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=8,
                                            temperature=1, n=3, seed=3)
    check(sorted(c.index for c in chat.choices) == [0, 1, 2] and all(c.message.content for c in chat.choices),
          f"chat n=3: {chat.choices}")
    # best_of: the n returned are the best of those generated by cumulative logprob
    many = s.client.completions.create(**base, n=6, seed=11, logprobs=0)
    cum = sorted((sum(c.logprobs.token_logprobs), c.text) for c in many.choices)[::-1]
    best = s.client.completions.create(**base, n=2, best_of=6, seed=11)
    check([c.text for c in best.choices] == [t for _, t in cum[:2]], f"best_of 6: {best.choices} vs {cum}")
    check(best.usage.completion_tokens == 96, f"best_of usage counts every generated choice: {best.usage}")
    # a long prompt: the later choices start from the first one's cached blocks
    hits = s.metric("prefix_cache_hits_total")
    long = " ".join(["The little dog ran to the park and played with a red ball."] * 12)
    s.client.completions.create(model=model, prompt=long, max_tokens=4, temperature=1, n=4, seed=1)
    check(s.metric("prefix_cache_hits_total") - hits >= 3 * 64, "n=4 on a long prompt: the choices share its KV")

    greedy = dict(model=model, prompt="Once upon a time", max_tokens=8, temperature=0)
    plain = s.client.completions.create(**greedy).choices[0].text
    # logit_bias: +100 forces token 42 ("'"); -100 on the greedy first token forbids it
    quote = s.post("/detokenize", {"tokens": [42]})["prompt"]
    r = s.client.completions.create(**greedy, logit_bias={"42": 100})
    check(r.choices[0].text == quote * 8, f"logit_bias +100: {r.choices[0].text!r}")
    r = s.client.completions.create(**greedy, extra_body={"allowed_token_ids": [42]})
    check(r.choices[0].text == quote * 8, f"allowed_token_ids [42]: {r.choices[0].text!r}")
    first = s.client.completions.create(**greedy | {"max_tokens": 1}, logprobs=1).choices[0].logprobs
    first_id = s.post("/tokenize", {"prompt": "Once upon a time" + first.tokens[0]})["tokens"][-1]
    r = s.client.completions.create(**greedy, logit_bias={str(first_id): -100})
    check(not r.choices[0].text.startswith(first.tokens[0]), f"logit_bias -100 on {first_id}: {r.choices[0].text!r}")
    # echo: the prompt before the output, streamed too
    r = s.client.completions.create(**greedy, echo=True)
    check(r.choices[0].text == "Once upon a time" + plain, f"echo: {r.choices[0].text!r}")
    streamed = "".join(c.choices[0].text for c in s.client.completions.create(**greedy, echo=True, stream=True))
    check(streamed == "Once upon a time" + plain, f"streamed echo: {streamed!r}")
    # stop_token_ids: forced at once, it ends the output with "stop" and its text left out;
    # min_tokens holds it off (and EOS, id 2, with ignore_eos false) that many tokens
    r = s.client.completions.create(**greedy, logit_bias={"42": 100}, extra_body={"stop_token_ids": [42]})
    check(r.choices[0].text == "" and r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == 1,
          f"stop_token_ids: {r}")
    # stop strings apply once the output has more than min_tokens tokens, as vLLM's detokenizer
    r = s.client.completions.create(**greedy | {"max_tokens": 48}, stop=",", extra_body={"min_tokens": 3})
    check(r.choices[0].finish_reason == "stop" and r.choices[0].text.startswith(", there was") and
          "," not in r.choices[0].text[1:], f"min_tokens 3 with stop ',': {r.choices[0].text!r}")
    for bias, extra in (("42", {"stop_token_ids": [42]}), ("2", {"ignore_eos": False})):
        r = s.client.completions.create(**greedy, logit_bias={bias: 100}, extra_body=extra | {"min_tokens": 5})
        check(r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == 6 and
              r.choices[0].text == plain[:len(r.choices[0].text)] and quote not in r.choices[0].text,
              f"min_tokens 5 before token {bias}: {r}")
    # penalties: the output changes, and each token is the best of the raw logprobs less the
    # penalties of the tokens before it (presence and frequency move every logit of a token alike)
    kw = dict(model=model, prompt="Once upon a time", max_tokens=48, temperature=0, logprobs=5)
    plain = s.client.completions.create(**kw).choices[0].text
    r = s.client.completions.create(**kw, presence_penalty=1.5, frequency_penalty=0.5)
    lp = r.choices[0].logprobs
    check(r.choices[0].text != plain, "presence and frequency penalties should change greedy output")
    counts = {}
    for tok, val, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        pen = lambda t: 1.5 * (counts.get(t, 0) > 0) + 0.5 * counts.get(t, 0)
        check(all(val - pen(tok) >= v - pen(t) - 1e-4 for t, v in top.items()),
              f"penalised greedy token {tok!r} ({val}) is not the best of {top} less penalties")
        counts[tok] = counts.get(tok, 0) + 1
    r = s.client.completions.create(**kw | {"logprobs": None}, extra_body={"repetition_penalty": 1.8})
    check(r.choices[0].text != plain, "repetition_penalty should change greedy output")
    # min_p keeps only the top token at min_p 1: greedy's output at any temperature
    r = s.client.completions.create(**kw | {"temperature": 1.5, "logprobs": None}, extra_body={"min_p": 1.0}, seed=5)
    check(r.choices[0].text == plain, f"min_p 1 must sample greedily: {r.choices[0].text!r}")
    # a client leaving a stream of n choices frees every slot
    stream = s.client.completions.create(**base | {"max_tokens": 400}, n=4, seed=2, stream=True)
    next(iter(stream))
    stream.close()
    deadline = time.time() + 10
    while s.metric("kv_slots_used") and time.time() < deadline:
        time.sleep(0.05)
    check(s.metric("kv_slots_used") == 0, "a stream of 4 choices left slots in use after its client left")
    # refusals name the field
    for param, bad in (("n", {"n": 129}), ("best_of", {"n": 3, "best_of": 2}),
                       ("best_of", {"best_of": 3, "stream": True}), ("echo", {"echo": True, "logprobs": 1}),
                       ("logit_bias", {"logit_bias": {"512": 1}}), ("logit_bias", {"logit_bias": {"x": 1}}),
                       ("suffix", {"suffix": "The end."}), ("presence_penalty", {"presence_penalty": 3}),
                       ("frequency_penalty", {"frequency_penalty": -2.5}),
                       ("repetition_penalty", {"extra_body": {"repetition_penalty": 0}}),
                       ("min_p", {"extra_body": {"min_p": 1.5}}),
                       ("min_tokens", {"extra_body": {"min_tokens": 9}}),
                       ("stop_token_ids", {"extra_body": {"stop_token_ids": [-1]}}),
                       ("allowed_token_ids", {"extra_body": {"allowed_token_ids": []}}),
                       ("bad_words", {"extra_body": {"bad_words": ["dog"]}}),
                       ("prompt_logprobs", {"extra_body": {"prompt_logprobs": 1}}),
                       ("use_beam_search", {"extra_body": {"use_beam_search": True}}),
                       ("include_stop_str_in_output", {"extra_body": {"include_stop_str_in_output": True}})):
        refused(s, param, **greedy | bad)
    try:
        s.client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}],
                                         extra_body={"echo": True})
        check(False, "chat echo was not refused")
    except openai.BadRequestError as e:
        check(e.param == "echo", f"chat echo refused naming {e.param!r}")


def structured_modes(template):
    """The same constrained requests under every parallel mode the server runs: each mode's greedy
    text equals tp=1's (the mask is applied on rank 0, where sampling happens), and every finished
    output, greedy or sampled, validates."""
    modes = ([], ["-tp", "2", "--enable-sequence-parallel", "--sp-min-tokens", "2"], ["-pp", "2"], ["-dp", "2"],
             ["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 3})])
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    want = None
    for flags in modes:
        s = Server("--chat-template", template, *flags)
        try:
            got = []
            for temp in (0, 1, 1):
                r = s.client.chat.completions.create(model="stories260K", messages=[{"role": "user", "content": "Hi"}],
                                                     max_tokens=160, temperature=temp, seed=len(got),
                                                     response_format=rf)
                got.append(r.choices[0].message.content)
                check(r.choices[0].finish_reason == "length" or valid(got[-1], PERSON), f"{flags}: {got[-1]!r}")
            got = got[0]
            want = want or got
            check(got == want, f"{flags}: constrained output {got} differs from tp=1's {want}")
        finally:
            s.stop()


def speculative(model):
    """A request whose logits are processed gets no proposals: its output equals the plain
    server's, and the ngram proposer, which proposes on this repetitive text, proposes nothing."""
    plain = Server()
    kw = dict(model=model, prompt="Once upon a time", max_tokens=48, temperature=0,
              extra_body={"repetition_penalty": 1.3, "presence_penalty": 0.5, "ignore_eos": True})
    try:
        want = plain.client.completions.create(**kw).choices[0].text
    finally:
        plain.stop()
    s = Server("--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 4,
                                                   "prompt_lookup_min": 1, "prompt_lookup_max": 3}))
    try:
        got = s.client.completions.create(**kw).choices[0].text
        check(got == want, f"penalised under speculation {got!r} != plainly {want!r}")
        check(s.metric("spec_decode_num_draft_tokens_total") == 0, "a processed request was given proposals")
        s.client.completions.create(**kw | {"extra_body": {"ignore_eos": True}})
        check(s.metric("spec_decode_num_draft_tokens_total") > 0, "the ngram proposer proposed nothing plainly")
    finally:
        s.stop()


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        dt = {"F32": np.float32, "I64": np.int64}[v["dtype"]]
        out[k] = np.frombuffer(data[a:b], dtype=dt).reshape(v["shape"])
    return out


def golden(run_flags):
    """First-token logprobs on a golden model against transformers' logits."""
    g = read_safetensors(f"{SRC}/tests/golden/llama/golden.safetensors")
    s = Server("-m", f"{SRC}/tests/golden/llama", *run_flags)
    try:
        for k in (1, 4, 10):
            ids = [int(x) for x in g["ids_0"][:k]]
            r = s.client.completions.create(model=f"{SRC}/tests/golden/llama", prompt=ids, max_tokens=1,
                                            temperature=0, logprobs=5, extra_body={"ignore_eos": True})
            lp = r.choices[0].logprobs
            row = g["logits_0"][k - 1].astype(np.float64)
            ref = row - row.max() - np.log(np.exp(row - row.max()).sum())
            want_id = int(np.argmax(row))
            check(lp.tokens[0] == f"token_id:{want_id}", f"golden greedy token {lp.tokens[0]} != {want_id}")
            for tok, val in lp.top_logprobs[0].items():
                tid = int(tok.split(":")[1])
                check(abs(val - ref[tid]) < 1e-4, f"golden logprob of {tid}: {val} vs transformers' {ref[tid]}")
            # the first token under repetition_penalty and logit_bias: the argmax of transformers'
            # logits processed by vLLM's formulas (the bias on the runner-up, the penalty on the prompt)
            order = np.argsort(-row)
            bias = {str(int(order[1])): 0.75 * float(row[order[0]] - row[order[1]]) + 0.01}
            proc = row.copy()
            proc[order[1]] += float(bias[str(int(order[1]))])
            for t in set(ids):
                proc[t] = proc[t] / 1.4 if proc[t] > 0 else proc[t] * 1.4
            r = s.client.completions.create(model=f"{SRC}/tests/golden/llama", prompt=ids, max_tokens=1,
                                            temperature=0, logprobs=0, logit_bias=bias,
                                            extra_body={"ignore_eos": True, "repetition_penalty": 1.4})
            got = r.choices[0].logprobs.tokens[0]
            check(got == f"token_id:{int(np.argmax(proc))}", f"golden processed greedy {got} != {np.argmax(proc)}")
    finally:
        s.stop()


def main():
    template = f"{SRC}/tests/data/templates/chatml/template.jinja"
    # --sp-min-tokens 2: every step of two tokens or more shards the sequence (SP with async TP),
    # single-token decode steps stay plain TP, as a long prefill and decode do by default
    for flags in ([], ["-tp", "2", "--enable-async-tp", "--sp-min-tokens", "2"]):
        s = Server("--chat-template", template, "--max-num-seqs", "8", *flags)
        try:
            completions(s, flags, "stories260K")
            chat(s, flags, "stories260K")
            structured(s, flags)
            sampling(s, "stories260K")
            if not flags:
                concurrency(s, "stories260K")
        finally:
            s.stop()
        hermes = f"/tmp/loom-serve-openai-hermes-{os.getpid()}.jinja"
        with open(hermes, "w") as f:
            f.write(HERMES_TEMPLATE)
        s = Server("--chat-template", hermes, *flags)
        try:
            tool_requests(s, "stories260K")
            tool_calls(s, "stories260K")
        finally:
            s.stop()
            os.unlink(hermes)
        golden(flags)
    speculative("stories260K")
    structured_modes(template)
    failures = serve_util.failures
    print(f"serve_openai: {'ok' if not failures else f'{failures} failed'} (openai {openai.__version__})")
    sys.exit(1 if failures else 0)


main()
