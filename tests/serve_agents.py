"""`loom serve` driven by the agents' and pipelines' clients: Anthropic's `anthropic` package
against /v1/messages, and OpenAI's `openai` package against /v1/responses and /v1/embeddings,
on loopback.

Every answer is checked for its shape (the SDKs parse them into their own types) and for
equality with the same conversation sent through Chat Completions (greedy), which
tests/serve_openai.py checks against `loom run`:
- Messages: plain and streamed text, stop_reason (max_tokens, end_turn, stop_sequence with the
  sequence), usage (input_tokens + cache_read_input_tokens is the prompt), count_tokens equal to
  /tokenize's count; a multi-turn tool loop as Claude Code drives one, with tool_choice forcing
  a tool ("tool" by name and "any"), the SDK's streamed tool input (input_json_delta) equal to
  the whole answer's, and tool_result blocks answered as chat's tool messages;
- Responses: plain text with instructions; a follow-up by previous_response_id that equals the
  whole conversation sent at once and finds its prompt in the prefix cache; streamed function
  call arguments (the deltas spell the final item's arguments); a tool loop through
  function_call_output; text.format json_schema output that validates; GET /v1/responses/ID.
Each runs at tp=1 and with -tp 2 --enable-async-tp (steps of two tokens or more sharded by SP).
- Embeddings: the client's default base64 and float encodings of the golden embedding model's
  vectors equal transformers' (tests/golden/make_embed_golden.py) within 1e-4 (test_serve's
  embeddings_golden checks every parallel mode).

Usage: serve_agents.py LOOM_BINARY SOURCE_DIR."""
import json
import os
import re
import sys

import anthropic
import jsonschema
import openai

import serve_util
from serve_util import HERMES_TEMPLATE, check

LOOM, SRC = sys.argv[1], sys.argv[2]
MODEL = "stories260K"


class Server(serve_util.LoomServer):
    def __init__(self, *args):
        super().__init__(LOOM, "serve-agents", *args)
        base = f"http://127.0.0.1:{self.port}"
        self.openai = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=120)
        self.anthropic = anthropic.Anthropic(base_url=base, api_key="none", max_retries=0, timeout=120)

    def chat(self, msgs, **kw):
        return self.openai.chat.completions.create(model=MODEL, messages=msgs, temperature=0, **kw).choices[0]



# Anthropic's SDK no longer sends temperature (Claude's newer models fix it); vLLM and loom still
# take it, as llama-server does
GREEDY = {"temperature": 0}
CHAT_FINISH = {"length": "max_tokens", "stop": "end_turn", "tool_calls": "tool_use"}


def text_of(message):
    return "".join(b.text for b in message.content if b.type == "text")


def messages_plain(s, where):
    system, user = "You tell stories.", "Tell me about a robot"
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    for max_tokens in (16, 200):
        kw = dict(model=MODEL, max_tokens=max_tokens, extra_body=GREEDY, system=system,
                  messages=[{"role": "user", "content": user}])
        m = s.anthropic.messages.create(**kw)
        want = s.chat(msgs, max_tokens=max_tokens)
        what = f"{where} /v1/messages, max_tokens {max_tokens}"
        check(m.type == "message" and m.role == "assistant" and m.model == MODEL and m.id.startswith("msg_"),
              f"{what}: {m}")
        check(text_of(m) == want.message.content, f"{what}: {text_of(m)!r} != chat's {want.message.content!r}")
        check(m.stop_reason == CHAT_FINISH[want.finish_reason] and m.stop_sequence is None,
              f"{what}: stop_reason {m.stop_reason}, chat's finish {want.finish_reason}")
        rendered = s.post("/tokenize", {"model": MODEL, "messages": msgs})
        u = m.usage
        check(u.input_tokens + (u.cache_read_input_tokens or 0) == rendered["count"] and u.output_tokens > 0,
              f"{what}: usage {u} for a prompt of {rendered['count']}")
        with s.anthropic.messages.stream(**kw) as st:
            streamed = "".join(st.text_stream)
            final = st.get_final_message()
        check(streamed == text_of(m) and text_of(final) == text_of(m) and final.stop_reason == m.stop_reason,
              f"{what}, streamed: {streamed!r} / {final}")
        check(final.usage.output_tokens == u.output_tokens, f"{what}, streamed usage: {final.usage}")
    # a stop sequence inside the greedy text
    text = text_of(m)
    words = [w for w in re.findall(r"[a-z]{3,}", text)]
    if words:
        seq = words[len(words) // 2]
        m = s.anthropic.messages.create(**kw | {"stop_sequences": [seq, "zzzz"]})
        check(m.stop_reason == "stop_sequence" and m.stop_sequence == seq and text_of(m) == text[:text.index(seq)],
              f"{where} stop_sequences [{seq!r}]: {m}")
    count = s.anthropic.messages.count_tokens(model=MODEL, system=system, messages=[{"role": "user", "content": user}])
    check(count.input_tokens == s.post("/tokenize", {"model": MODEL, "messages": msgs})["count"],
          f"{where} count_tokens: {count}")


WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo", "Rome"]},
                                                             "metric": {"type": "boolean"}},
                            "required": ["city", "metric"], "additionalProperties": False}}
CLOCK = {"name": "get_time", "input_schema": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
                                              "required": ["zone"], "additionalProperties": False}}


def as_chat_tools(tools):
    out = []
    for t in tools:
        fn = {"name": t["name"], "parameters": t["input_schema"]}
        if "description" in t:
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def messages_tool_loop(s, where):
    """Claude Code's loop: the model is made to call a tool, the client answers with a
    tool_result, and so on; each turn equals chat's answer to the same conversation."""
    tools = [WEATHER, CLOCK]
    conv = [{"role": "user", "content": "Weather?"}]
    chat_conv = [{"role": "user", "content": conv[0]["content"]}]
    # stories260K's context is 512 tokens of a byte-level vocabulary: three short turns
    for turn, (choice, chat_choice) in enumerate((({"type": "tool", "name": "get_weather"},
                                                    {"type": "function", "function": {"name": "get_weather"}}),
                                                   ({"type": "any", "disable_parallel_tool_use": True}, "required"),
                                                   ({"type": "auto"}, "auto"))):
        what = f"{where} tool loop, turn {turn} ({choice['type']})"
        kw = dict(model=MODEL, max_tokens=100, extra_body=GREEDY, tools=tools, tool_choice=choice, messages=conv)
        m = s.anthropic.messages.create(**kw)
        want = s.chat(chat_conv, max_tokens=100, tools=as_chat_tools(tools), tool_choice=chat_choice,
                      parallel_tool_calls=not choice.get("disable_parallel_tool_use"))
        uses = [b for b in m.content if b.type == "tool_use"]
        want_calls = want.message.tool_calls or []
        print(f"{what}: prompt {m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)}, "
              f"output {m.usage.output_tokens}, calls {[(u.name, u.input) for u in uses]}")
        check([(u.name, u.input) for u in uses] == [(c.function.name, json.loads(c.function.arguments))
                                                   for c in want_calls],
              f"{what}: calls {[(u.name, u.input) for u in uses]} != chat's {want_calls}")
        check(m.stop_reason == CHAT_FINISH[want.finish_reason], f"{what}: stop_reason {m.stop_reason}")
        check((text_of(m) or None) == (want.message.content or None) or uses,
              f"{what}: text {text_of(m)!r} != {want.message.content!r}")
        if choice["type"] != "auto":
            check(uses and m.stop_reason == "tool_use", f"{what}: no forced call: {m}")
            for u in uses:
                schema = next(t["input_schema"] for t in tools if t["name"] == u.name)
                check(jsonschema.Draft202012Validator(schema).is_valid(u.input), f"{what}: input {u.input}")
            check(u.id.startswith("toolu_") and len({u.id for u in uses}) == len(uses), f"{what}: ids {uses}")
        with s.anthropic.messages.stream(**kw) as st:
            final = st.get_final_message()
        check([(b.type, getattr(b, "name", None), getattr(b, "input", None)) for b in final.content if b.type != "text"]
              == [(u.type, u.name, u.input) for u in uses], f"{what}, streamed: {final.content} != {m.content}")
        if not uses:
            break
        conv = conv + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                       {"role": "user", "content": [{"type": "tool_result", "tool_use_id": u.id,
                                                     "content": "21"} for u in uses]}]
        chat_conv = chat_conv + [{"role": "assistant", "content": text_of(m) or None,
                                  "tool_calls": [{"id": u.id, "type": "function", "function": {
                                      "name": u.name, "arguments": json.dumps(u.input)}} for u in uses]}]
        chat_conv += [{"role": "tool", "tool_call_id": u.id, "content": "21"} for u in uses]
    try:
        s.anthropic.messages.create(model=MODEL, max_tokens=4, messages=[
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "1"}]}])
        check(False, f"{where}: a tool_result without its tool_use was answered")
    except anthropic.BadRequestError as e:
        check(e.body["error"]["type"] == "invalid_request_error", f"{where}: the refusal's body {e.body}")


FUNCS = [{"type": "function", "name": t["name"], "parameters": t["input_schema"]} for t in (WEATHER, CLOCK)]
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}


def responses(s, where):
    c = s.openai
    r = c.responses.create(model=MODEL, instructions="You tell stories.", input="Tell me about a robot",
                           max_output_tokens=24, temperature=0)
    want = s.chat([{"role": "system", "content": "You tell stories."},
                   {"role": "user", "content": "Tell me about a robot"}], max_tokens=24)
    check(r.output_text == want.message.content and r.object == "response" and r.id.startswith("resp_"),
          f"{where} responses: {r.output_text!r} != chat's {want.message.content!r}")
    check(r.status == ("incomplete" if want.finish_reason == "length" else "completed"), f"{where}: status {r.status}")
    check(r.usage.input_tokens == want.usage.prompt_tokens if hasattr(want, "usage") else True, f"{where}: usage")
    got = c.responses.retrieve(r.id)
    check(got.id == r.id and got.output_text == r.output_text, f"{where}: GET /v1/responses/{r.id}: {got}")
    # a conversation continued by id equals it sent whole, and finds its prompt cached
    first = c.responses.create(model=MODEL, input="Tell me about a cat", max_output_tokens=24, temperature=0)
    second = c.responses.create(model=MODEL, previous_response_id=first.id, input="And then?", max_output_tokens=24,
                                temperature=0)
    want = s.chat([{"role": "user", "content": "Tell me about a cat"},
                   {"role": "assistant", "content": first.output_text},
                   {"role": "user", "content": "And then?"}], max_tokens=24)
    check(second.output_text == want.message.content,
          f"{where} previous_response_id: {second.output_text!r} != {want.message.content!r}")
    check(second.usage.input_tokens_details.cached_tokens >= 16,
          f"{where} previous_response_id: the conversation's prompt was not found cached: {second.usage}")
    # streamed function-call arguments, and the tool loop through function_call_output
    kw = dict(model=MODEL, input="What is the weather in Paris?", tools=FUNCS, tool_choice="required",
              parallel_tool_calls=False, temperature=0, max_output_tokens=160)
    whole = c.responses.create(**kw)
    calls = [o for o in whole.output if o.type == "function_call"]
    check(len(calls) == 1 and calls[0].name in ("get_weather", "get_time"), f"{where} forced call: {whole.output}")
    deltas, events, done = [], [], None
    for ev in c.responses.create(**kw, stream=True):
        events.append(ev.type)
        if ev.type == "response.function_call_arguments.delta":
            deltas.append(ev.delta)
        if ev.type in ("response.completed", "response.incomplete"):
            done = ev.response
        check(ev.sequence_number == len(events) - 1, f"{where}: event {ev.type} numbered {ev.sequence_number}")
    end = "response.incomplete" if whole.status == "incomplete" else "response.completed"
    check(events[:2] == ["response.created", "response.in_progress"] and events[-1] == end,
          f"{where} stream events {events}")
    def items(r):  # ids are the request's own
        return [o.model_dump(exclude={"id", "call_id"}) for o in r.output]

    check(done and items(done) == items(whole),
          f"{where}: the streamed output {done and done.output} != {whole.output}")
    streamed = [o for o in done.output if o.type == "function_call"] if done else []
    check(len(streamed) == 1 and streamed[0].arguments == "".join(deltas) == calls[0].arguments,
          f"{where} streamed arguments {deltas} / {streamed} != {calls}")
    want = s.chat([{"role": "user", "content": "What is the weather in Paris?"}], max_tokens=160,
                  tools=[{"type": "function", "function": {"name": f["name"], "parameters": f["parameters"]}}
                         for f in FUNCS], tool_choice="required", parallel_tool_calls=False)
    check([(t.function.name, t.function.arguments) for t in want.message.tool_calls or []] ==
          [(k.name, k.arguments) for k in calls], f"{where}: the call {calls} != chat's {want.message.tool_calls}")
    after = c.responses.create(model=MODEL, previous_response_id=whole.id, tools=FUNCS, max_output_tokens=24,
                               temperature=0, input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                                      "output": "21 degrees"}])
    want = s.chat([{"role": "user", "content": "What is the weather in Paris?"},
                   {"role": "assistant", "content": whole.output_text or None, "tool_calls": [
                       {"id": calls[0].call_id, "type": "function",
                        "function": {"name": calls[0].name, "arguments": calls[0].arguments}}]},
                   {"role": "tool", "tool_call_id": calls[0].call_id, "content": "21 degrees"}], max_tokens=24,
                  tools=[{"type": "function", "function": {"name": f["name"], "parameters": f["parameters"]}}
                         for f in FUNCS])
    check(after.output_text == (want.message.content or ""),
          f"{where} function_call_output: {after.output_text!r} != {want.message.content!r}")
    # text.format json_schema
    r = c.responses.create(model=MODEL, input="Tell me about a person.", max_output_tokens=200, temperature=0,
                           text={"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}})
    want = s.chat([{"role": "user", "content": "Tell me about a person."}], max_tokens=200, response_format={
        "type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}})
    check(r.output_text == want.message.content, f"{where} json_schema: {r.output_text!r} != {want.message.content!r}")
    if r.status == "completed":
        check(jsonschema.Draft202012Validator(PERSON).is_valid(json.loads(r.output_text)),
              f"{where} json_schema: {r.output_text!r} does not validate")
    try:
        c.responses.create(model=MODEL, previous_response_id="resp_missing", input="x")
        check(False, f"{where}: an unknown previous_response_id was answered")
    except openai.BadRequestError as e:
        check(e.param == "previous_response_id", f"{where}: the refusal names {e.param}")




def embeddings():
    """OpenAI's client asks for base64 by default and decodes it: the vectors equal the golden
    ones (transformers' pooled last hidden state, tests/golden/make_embed_golden.py) to 1e-4,
    one input and several, and with encoding_format float."""
    import numpy as np
    from safetensors.numpy import load_file
    g = load_file(f"{SRC}/tests/golden/qwen3_embed/golden.safetensors")
    ids = [g[f"ids_{i}"].tolist() for i in range(3)]
    s = Server("-m", f"{SRC}/tests/golden/qwen3_embed", "--dtype", "float32", "--served-model-name", "embed")
    try:
        for fmt in (None, "float"):  # None: the client asks for base64 and decodes it
            r = s.openai.embeddings.create(model="embed", input=ids, **({"encoding_format": fmt} if fmt else {}))
            got = [np.array(d.embedding) for d in r.data]
            worst = max(float(np.abs(got[i] - g[f"embedding_{i}"]).max()) for i in range(3))
            check(len(got) == 3 and worst < 1e-4, f"embeddings ({fmt}): {worst} from transformers'")
            check(r.usage.prompt_tokens == sum(map(len, ids)) and r.model == "embed", f"embeddings usage: {r.usage}")
        one = s.openai.embeddings.create(model="embed", input=ids[1])
        check(len(one.data) == 1 and np.abs(np.array(one.data[0].embedding) - g["embedding_1"]).max() < 1e-4,
              "one input's embedding")
        try:
            s.openai.chat.completions.create(model="embed", messages=[{"role": "user", "content": "hi"}])
            check(False, "an embedding model answered a chat completion")
        except openai.BadRequestError as e:
            check("--task generate" in str(e), f"the refusal: {e}")
    finally:
        s.stop()


def main():
    hermes = f"/tmp/loom-serve-agents-hermes-{os.getpid()}.jinja"
    with open(hermes, "w") as f:
        f.write(HERMES_TEMPLATE)
    try:
        for flags in ([], ["-tp", "2", "--enable-async-tp", "--sp-min-tokens", "2"]):
            where = " ".join(flags) or "tp=1"
            s = Server("--chat-template", hermes, "--block-size", "16", *flags)
            try:
                messages_plain(s, where)
                messages_tool_loop(s, where)
                responses(s, where)
            finally:
                s.stop()
    finally:
        os.unlink(hermes)
    embeddings()
    failures = serve_util.failures
    print(f"serve_agents: {'ok' if not failures else f'{failures} failed'} "
          f"(anthropic {anthropic.__version__}, openai {openai.__version__})")
    sys.exit(1 if failures else 0)


main()
