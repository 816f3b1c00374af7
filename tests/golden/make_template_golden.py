"""Writes the oracle renderings of tests/data/templates/*/cases.json, checked by test_template,
and of the tool round trips in */roundtrip.json, checked through the server's /tokenize by
test_serve.

Each directory holds a published chat template (template.jinja, see its SOURCE.md); the
conversations below are rendered with transformers exactly as apply_chat_template renders them
(messages normalised by _normalize_chat_messages, then render_jinja_template), and a case whose
template calls raise_exception records the message instead. tests/data/templates/_unit/ holds
small inline templates for the interpreter's corners, their expected output also from transformers.

strftime_now is pinned to SOURCE_DATE_EPOCH below (in UTC); test_template sets the same.

Run (no torch needed; transformers warns that PyTorch is missing):
    python3 -m venv /tmp/tvenv && /tmp/tvenv/bin/pip install jinja2 transformers
    /tmp/tvenv/bin/python tests/golden/make_template_golden.py
The files in the repository were made with transformers 5.24.0 and jinja2 3.1.6.
"""
import datetime as _dt
import json
import os
import time
from pathlib import Path

import jinja2
import transformers
from transformers.utils import chat_template_utils as ctu

EPOCH = 1736942400  # 2025-01-15 12:00:00 UTC
os.environ["TZ"] = "UTC"
time.tzset()


class _FixedClock(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return _dt.datetime.fromtimestamp(EPOCH, tz)


ctu.datetime = _FixedClock  # strftime_now reads datetime.now() from this module

ROOT = Path(__file__).resolve().parents[1] / "data" / "templates"


def render(template, context):
    """apply_chat_template(tokenize=False) with the context's members as its arguments."""
    ctx = dict(context)
    messages = ctu._normalize_chat_messages(ctx.pop("messages"))
    rendered, _ = ctu.render_jinja_template(
        conversations=[messages],
        tools=ctx.pop("tools", None),
        documents=ctx.pop("documents", None),
        chat_template=template,
        add_generation_prompt=ctx.pop("add_generation_prompt", False),
        **ctx,
    )
    return rendered[0]


def case(name, template, context):
    try:
        return {"name": name, "context": context, "expected": render(template, context)}
    except Exception as e:  # noqa: BLE001 - any failure is an expected error case
        return {"name": name, "context": context, "error": str(e)}


# ---------------------------------------------------------------- conversation pieces

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city — température, vent ☀",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {
                    "type": "object",
                    "description": "Where",
                    "properties": {"city": {"type": "string"}, "country": {"type": "string", "enum": ["FR", "JP", "US"]}},
                    "required": ["city"],
                },
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
                "threshold": {"type": "number", "default": 0.5},
            },
            "required": ["location"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Searches the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["query"]},
    },
}
TOOLS = [WEATHER, SEARCH]
SYSTEM = {"role": "system", "content": "You are a helpful assistant.  "}
USER = {"role": "user", "content": "Hello! Can you help me?"}
UNICODE = {"role": "user", "content": "café ☕ 日本 — “quotes” and \"escapes\" \\ tab\there"}
ASSISTANT = {"role": "assistant", "content": "Of course. What do you need?"}
ASK_WEATHER = {"role": "user", "content": "What's the weather in Paris over the next 3 days?"}
ARGS = {"location": {"city": "Paris", "country": "FR"}, "days": 3, "threshold": 1.5, "note": "été ☀"}
CALL = {"role": "assistant", "tool_calls": [{"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}]}
CALL_CONTENT = {"role": "assistant", "content": "Let me check.", "tool_calls": CALL["tool_calls"]}
TWO_CALLS = {"role": "assistant", "content": "", "tool_calls": CALL["tool_calls"] + [
    {"id": "call67890", "type": "function", "function": {"name": "search", "arguments": {"query": "Paris météo", "limit": 2}}}]}
RESULT = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": '{"temperature": 21.5, "sky": "clear"}'}
RESULT2 = {"role": "tool", "tool_call_id": "call67890", "name": "search", "content": "Sunny all week."}
ANSWER = {"role": "assistant", "content": "It is 21.5 °C and clear in Paris."}
TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}


def ctx(messages, gen=True, **kw):
    return {"messages": messages, "add_generation_prompt": gen, **TOKENS, **kw}


def common():
    return [
        ("user_only", ctx([USER])),
        ("system_user", ctx([SYSTEM, USER])),
        ("multi_turn", ctx([SYSTEM, USER, ASSISTANT, UNICODE])),
        ("multi_turn_no_generation_prompt", ctx([USER, ASSISTANT, UNICODE, ASSISTANT], gen=False)),
        ("unicode", ctx([UNICODE])),
    ]


def tool_cases():
    return [
        ("tools", ctx([SYSTEM, ASK_WEATHER], tools=TOOLS)),
        ("tools_no_system", ctx([ASK_WEATHER], tools=TOOLS)),
        ("tool_call_and_result", ctx([SYSTEM, ASK_WEATHER, CALL, RESULT], tools=TOOLS)),
        ("tool_call_result_answer", ctx([ASK_WEATHER, CALL_CONTENT, RESULT, ANSWER, UNICODE], tools=TOOLS)),
        ("two_tool_calls", ctx([ASK_WEATHER, TWO_CALLS, RESULT, RESULT2], tools=TOOLS)),
    ]


QWEN3_THINK = {"role": "assistant", "content": "<think>\nThe user greets me.\n</think>\n\nHello there!"}
QWEN3_REASONING = {"role": "assistant", "reasoning_content": "Need the weather tool.", "content": "", "tool_calls": CALL["tool_calls"]}

DEEPSEEK_CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"type": "function", "function": {"name": "get_weather", "arguments": json.dumps(ARGS, ensure_ascii=False)}},
    {"type": "function", "function": {"name": "search", "arguments": "{\"query\": \"Paris\"}"}}]}

CASES = {
    "chatml": common(),
    "phi3": common(),
    "qwen2.5": common() + tool_cases(),
    "qwen3": common() + tool_cases() + [
        ("thinking_history", ctx([USER, QWEN3_THINK, UNICODE])),
        ("thinking_last", ctx([USER, QWEN3_THINK], gen=False)),
        ("enable_thinking_false", ctx([USER], enable_thinking=False)),
        ("enable_thinking_true", ctx([SYSTEM, USER], enable_thinking=True)),
        ("reasoning_content_tool_call", ctx([ASK_WEATHER, QWEN3_REASONING, RESULT], tools=TOOLS)),
        ("tool_response_in_user", ctx([ASK_WEATHER, {"role": "user", "content": "<tool_response>x</tool_response>"}, ANSWER])),
    ],
    "llama3.2": common() + tool_cases()[:4] + [
        ("date_string", ctx([SYSTEM, USER], date_string="01 Feb 2025")),
        ("tools_in_system", ctx([SYSTEM, ASK_WEATHER], tools=TOOLS, tools_in_user_message=False, date_string="01 Feb 2025")),
        ("tool_result_dict", ctx([ASK_WEATHER, CALL, {"role": "ipython", "content": {"temperature": 21.5}}], tools=TOOLS)),
        ("raises_two_tool_calls", ctx([ASK_WEATHER, TWO_CALLS], tools=TOOLS)),
        ("raises_tools_without_user", ctx([SYSTEM], tools=TOOLS)),
    ],
    "llama3.3": common() + tool_cases()[:4] + [
        ("date_string", ctx([SYSTEM, USER], date_string="01 Feb 2025")),
        ("builtin_tools", ctx([SYSTEM, {"role": "user", "content": "Search for loom."}], builtin_tools=["brave_search", "wolfram_alpha", "code_interpreter"])),
        ("builtin_tool_call", ctx([USER, {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "brave_search", "arguments": {"query": "loom C"}}}]}, {"role": "ipython", "content": "results"}], builtin_tools=["brave_search"])),
        ("raises_two_tool_calls", ctx([ASK_WEATHER, TWO_CALLS], tools=TOOLS)),
    ],
    "mistral-nemo": common()[:2] + [
        ("multi_turn", ctx([SYSTEM, USER, ASSISTANT, UNICODE])),
        ("multi_turn_no_generation_prompt", ctx([USER, ASSISTANT, UNICODE, ASSISTANT], gen=False)),
        ("tools", ctx([SYSTEM, ASK_WEATHER], tools=TOOLS)),
        ("tool_call_and_result", ctx([ASK_WEATHER, CALL, RESULT, ANSWER, UNICODE], tools=TOOLS)),
        ("two_tool_calls", ctx([ASK_WEATHER, {"role": "assistant", "tool_calls": TWO_CALLS["tool_calls"]}, RESULT, RESULT2], tools=TOOLS)),
        ("raises_alternation", ctx([USER, USER])),
        ("raises_tool_call_id", ctx([ASK_WEATHER, {"role": "assistant", "tool_calls": [{"id": "short", "type": "function", "function": CALL["tool_calls"][0]["function"]}]}])),
    ],
    "gemma2": [c for c in common() if c[0] not in ("system_user", "multi_turn")] + [
        ("multi_turn", ctx([USER, ASSISTANT, UNICODE])),
        ("raises_system", ctx([SYSTEM, USER])),
        ("raises_alternation", ctx([USER, USER])),
    ],
    "deepseek-r1": common() + [
        ("think_stripped", ctx([USER, {"role": "assistant", "content": "<think>hmm</think>Hi!"}, UNICODE])),
        ("tool_calls", ctx([SYSTEM, ASK_WEATHER, DEEPSEEK_CALL, RESULT, RESULT2, ANSWER])),
        ("tool_result_last", ctx([ASK_WEATHER, DEEPSEEK_CALL, RESULT])),
    ],
    "granite3.3": common() + tool_cases()[:2] + [
        ("documents", ctx([ASK_WEATHER], documents=[{"doc_id": 1, "text": "Paris is in France."}, {"doc_id": "b", "text": "Météo: ☀"}])),
        ("tools_and_documents", ctx([ASK_WEATHER], tools=TOOLS, documents=[{"doc_id": 7, "text": "Doc."}])),
        ("controls", ctx([ASK_WEATHER], documents=[{"doc_id": 1, "text": "Doc."}], controls={"citations": True, "hallucinations": True, "length": "short"})),
        ("thinking", ctx([USER], thinking=True)),
    ],
}

# ---------------------------------------------------------------- tool round trips (roundtrip.json)
# A tool conversation as an OpenAI client sends it to the server: each call's arguments a JSON
# string (compact here, so that a string shown verbatim and an object through tojson differ), and
# content null beside the calls. The server passes each template the form it expects; these are
# the forms, read from each template's source, that transformers renders the conversation with:
#  - "string": DeepSeek-R1 concatenates the arguments to a string; Qwen3 shows a string verbatim
#    (`is string`), as the model wrote it;
#  - "object" elsewhere: `| tojson` (Qwen2.5, Llama 3.x, Mistral's `function|tojson`) or not
#    shown at all, as vLLM passes them.
# The null content reaches a template as transformers 5's apply_chat_template passes it (the key
# dropped by _normalize_chat_messages), except:
#  - "" for templates that read the content unconditionally (`message['content']`), which raise
#    on the dropped key, as minja substitutes it;
#  - DeepSeek-R1 shows a call only when the content is none, which transformers 5 never passes;
#    its conversation is rendered as transformers 4's apply_chat_template did, by the same
#    render_jinja_template on the messages as given.
ARGS_FORM = {"deepseek-r1": "string", "qwen3": "string"}
EMPTY_CONTENT = {"chatml", "phi3", "qwen3", "granite3.3"}
KEEP_NULL = {"deepseek-r1"}


def wire_call(call_id, name, args):
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False, separators=(",", ":"))}}


WIRE_CALL = wire_call("call12345", "get_weather", ARGS)
WIRE_SEARCH = wire_call("call67890", "search", {"query": "Paris météo", "limit": 2})
ROUND_TRIPS = [
    ("call_result", [SYSTEM, ASK_WEATHER, {"role": "assistant", "content": None, "tool_calls": [WIRE_CALL]}, RESULT]),
    ("call_result_answer", [ASK_WEATHER, {"role": "assistant", "content": "Let me check.", "tool_calls": [WIRE_CALL]},
                            RESULT, ANSWER, UNICODE]),
    ("two_calls", [ASK_WEATHER, {"role": "assistant", "content": None, "tool_calls": [WIRE_CALL, WIRE_SEARCH]},
                   RESULT, RESULT2]),
]


def as_template_expects(messages, name):
    """The messages with each call's arguments and null content in the template's form (copies)."""
    out = json.loads(json.dumps(messages))
    for m in out:
        if m.get("tool_calls") and m.get("content") is None and name in EMPTY_CONTENT:
            m["content"] = ""
        for call in m.get("tool_calls") or []:
            if ARGS_FORM.get(name, "object") == "object":
                call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return out


def round_trip(name, template, messages):
    request = {"messages": messages, "tools": TOOLS}
    msgs = as_template_expects(messages, name)
    try:
        if name in KEEP_NULL:
            rendered, _ = ctu.render_jinja_template(conversations=[msgs], tools=TOOLS, chat_template=template,
                                                    add_generation_prompt=True, **TOKENS)
            return {"request": request, "expected": rendered[0]}
        return {"request": request, "expected": render(template, ctx(msgs, tools=TOOLS))}
    except Exception as e:  # noqa: BLE001 - the template refuses the conversation: the server must too
        return {"request": request, "error": str(e)}


# ---------------------------------------------------------------- the interpreter's corners

UNIT = [
    # whitespace control, trim_blocks, lstrip_blocks, comments, raw
    ("ws_trim_lstrip", "a\n  {% if true %}\n  b\n  {% endif %}\n  c", {}),
    ("ws_minus", "a  {{- 'x' -}}  b {%- if true -%}  c  {%- endif -%} d", {}),
    ("ws_plus", "a\n  {%+ if true +%}\nb{% endif %}\n", {}),
    ("ws_comment", "x\n  {# note #}\ny {#- trim -#} z", {}),
    ("ws_var_no_trim", "{{ 'a' }}\nb\n    {{ 'c' }}", {}),
    ("raw", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}!", {}),
    ("raw_ws", "a\n  {%- raw -%}\n  x {{ y }}\n  {%- endraw %}\nb\n  {% raw %}r{% endraw +%}\nc", {}),
    ("ws_lstrip_after_var", "{{ 'v' }}  {% if true %}x{% endif %}\n  {# c #}  y\n\t{% if true %}\n\tz{% endif %}", {}),
    ("ws_unicode_space", "a\u3000{%- if true %}b{% endif %}\u00a0 \n {%- if true %}c{% endif %}", {}),
    ("ws_nested_blocks", "<ul>\n  {% for i in [1, 2] %}\n    {% if i %}\n    <li>{{ i }}</li>\n    {% endif %}\n  {% endfor %}\n</ul>\n", {}),
    ("numbers_lex", "{{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1.5e3 }} {{ 2E-2 }} {{ 1_0.5 }} {{ [1,2].0 }}", {}),
    ("crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", {}),
    ("trailing_newline", "x\n", {}),
    # literals and output formatting
    ("python_str", "{{ 1 }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e-5 }} {{ 123456789.125 }} {{ -0.0 }} {{ true }} {{ none }} {{ 2**62 }}", {}),
    ("python_repr", "{{ [1, 'a', \"b'c\", none, true, 1.5, [], {}] }} {{ {'k': 'v', 1: (2,), 'n': {'x': 'y\"z'}} }} {{ (1, 2) }} {{ ('s',) }}", {}),
    ("repr_escapes", "{{ ['tab\\there', 'nl\\n', 'back\\\\', 'caf\\u00e9', '\\x7f', '\\u00a0', '\\u2028', '\\U0001F600'] }}", {}),
    ("string_escapes", "{{ 'a\\tb\\nc\\\\d\\'e\\x41\\u00e9\\101\\q' }}|{{ \"adj\" 'acent' }}", {}),
    ("context_values", "{{ v }} {{ v.b }} {{ v['c'] }} {{ v.d[1] }} {{ v.e }}", {"v": {"a": 1, "b": 2.5, "c": "s", "d": [1, 2], "e": None}}),
    # tojson
    ("tojson", "{{ v|tojson }}\n{{ v|tojson(indent=2) }}\n{{ v|tojson(sort_keys=true) }}\n{{ v|tojson(separators=(',', ':')) }}\n{{ v|tojson(ensure_ascii=true) }}\n{{ [] |tojson(indent=4) }}{{ {}|tojson(indent=4) }}",
     {"v": {"z": [1, 2.5, None, True, "x"], "a": {"é": "日本 ☕ \"q\" \\ \n\t\u0001"}, "n": -3, "f": 1e20, "g": 0.1}}),
    ("tojson_indent_string", "{{ v|tojson(indent='\\t') }}", {"v": {"a": [1, {"b": 2}]}}),
    ("tojson_int_keys", "{{ {1: 'a', 2.5: 'b', true: 'c', none: 'd'}|tojson }}", {}),
    # expressions
    ("arithmetic", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 + true }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1] + [2] }} {{ -(3) }} {{ 'a' ~ 1 ~ none }}", {}),
    ("comparisons", "{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ 'é' > 'z' }} {{ [1, 2] < [1, 3] }} {{ 1 in [1, 2] }} {{ 'b' in 'abc' }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ none == none }} {{ {'a': 1} == {'a': 1} }}", {}),
    ("logic", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 'z' }} {{ not [] }} {{ 'a' if 0 else 'b' }} {{ 'c' if 1 }}[{{ 'd' if 0 }}]", {}),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ not 1 == 2 }} {{ [1,2,3]|length + 1 }} {{ -3|abs }} {{ 'a' ~ (1 + 2) }}", {}),
    ("err_concat_precedence", "{{ 'a' ~ 1 + 2 }}", {}),
    # slicing and indexing
    ("slicing", "{{ s[1:3] }} {{ s[::-1] }} {{ s[-2:] }} {{ s[:-1] }} {{ s[::2] }} {{ l[1:] }} {{ l[::-1] }} {{ l[-1] }} {{ l[5:] }} {{ s[0] }} {{ s[-1] }} {{ l[1:10:3] }} {{ l[10:1:-4] }}",
     {"s": "héllo ☕", "l": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]}),
    ("missing", "[{{ d.nope }}][{{ d['nope'] }}][{{ l[9] }}][{{ n.x }}][{{ undefined_name }}][{{ undefined_name is defined }}][{{ d.nope is undefined }}]", {"d": {"a": 1}, "l": [1], "n": None}),
    ("dict_attr_vs_item", "{{ d.items()|list }} {{ d['items'] }} {{ d.get('a') }} {{ d.get('x', 9) }} {{ d.get('x') }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items() }}", {"d": {"a": 1, "items": "key"}}),
    # loops
    ("loop_vars", "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}]{{ loop.cycle('a', 'b') }};{% endfor %}", {"l": ["x", "y", "z"]}),
    ("loop_else_filter", "{% for x in l if x > 1 %}{{ x }}{{ loop.length }},{% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}", {"l": [1, 2, 3]}),
    ("loop_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for c in 'hé' %}[{{ c }}]{% endfor %}", {"d": {"x": 1, "y": [2]}}),
    ("loop_break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("loop_nested", "{% for i in range(2) %}{% set outer = loop %}{% for j in range(2) %}{{ outer.index }}{{ loop.index }} {% endfor %}{% endfor %}", {}),
    ("scoping", "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 1 %}{{ x }},{% endfor %}{{ x }}|{% if true %}{% set y = 5 %}{% endif %}{{ y }}", {}),
    ("namespace", "{% set ns = namespace(count=0, items=[]) %}{% for i in range(3) %}{% set ns.count = ns.count + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.count }} {{ ns.items }} {{ ns }}", {}),
    ("range", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }}", {}),
    # set forms
    ("set_block", "{% set x %}a{{ 1 + 1 }}b{% endset %}[{{ x }}]{% set y | upper %}up{% endset %}{{ y }}{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}", {}),
    # macros
    ("macro", "{% macro m(a, b=2, c='x') %}{{ a }}-{{ b }}-{{ c }}-{{ g }}{% endmacro %}{% set g = 'G' %}{{ m(1) }} {{ m(1, 3) }} {{ m(1, c='z') }} {{ m() }}", {}),
    ("macro_scope", "{% macro m() %}{{ z }}{% endmacro %}{% for i in [1] %}{% set z = 3 %}[{{ m() }}]{% endfor %}", {}),
    # filters
    ("filters_string", "{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'hello world-wide (x) [y]'|title }}|{{ 'hELLO wORLD'|capitalize }}|{{ 'Ab'|lower }}{{ 'Ab'|upper }}|{{ 'a-b-c'|replace('-', '+') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 42|string }}|{{ 'x<y & \"z\"'|e }}|{{ 'héllo'|length }}|{{ 'abc'|reverse }}", {}),
    ("filters_list", "{{ l|first }} {{ l|last }} {{ l|length }} {{ l|count }} {{ l|join(', ') }} {{ l|sort }} {{ l|sort(reverse=true) }} {{ l|unique|list }} {{ l|reverse|list }} {{ l|max }} {{ l|min }} {{ l|sum }} {{ l|select('odd')|list }} {{ l|reject('odd')|list }} {{ l|map('string')|join }} {{ [[1], [2, 3]]|map('length')|list }}", {"l": [3, 1, 2, 3]}),
    ("filters_attr", "{{ u|selectattr('admin')|map(attribute='name')|list }} {{ u|rejectattr('admin')|map(attribute='name')|join }} {{ u|selectattr('age', 'gt', 30)|list|length }} {{ u|sort(attribute='age')|map(attribute='name')|list }} {{ u|map(attribute='missing', default='?')|list }} {{ u|sort(attribute='admin,name')|map(attribute='name')|list }} {{ u|selectattr('name', 'equalto', 'Bob')|first }} {{ u|map(attribute='tags.0')|list }} {{ u|join(',', attribute='name') }}",
     {"u": [{"name": "Bob", "age": 40, "admin": True, "tags": ["a"]}, {"name": "al", "age": 25, "admin": False, "tags": ["b"]}, {"name": "Cy", "age": 33, "admin": True, "tags": ["c"]}]}),
    ("filters_default", "{{ x|default('d') }} {{ none|default('d') }} {{ ''|default('d', true) }} {{ 0|d('z', boolean=true) }} {{ 'v'|default('d') }}", {}),
    ("filters_numbers", "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '0x1A'|int(base=16) }} {{ '1.5'|float }} {{ 'y'|float }} {{ 2|float }} {{ -3|abs }} {{ 2.675|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 1.21|round(1, 'ceil') }} {{ 1.29|round(1, 'floor') }} {{ 7|round }}", {}),
    ("filters_dict", "{{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ d|dictsort(by='value') }} {{ d|items|list }} {{ d|list }} {{ d|length }} {{ d|tojson }}", {"d": {"b": 2, "A": 3, "c": 1}}),
    ("filters_indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(width='--', blank=true) }}|{{ 'x\\n'|indent(1) }}", {}),
    ("filter_block", "{% filter upper %}abc{{ 'd' }}{% endfilter %}", {}),
    ("generation_tag", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% set inner = 1 %}{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}[{{ inner }}]", {"messages": [{"role": "user", "content": "hi "}, {"role": "assistant", "content": "yo"}]}),
    # tests
    ("tests", "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ x is defined }}{{ none is none }}{{ true is boolean }}{{ 1 is integer }}{{ 1.0 is float }}{{ 'A' is upper }}{{ 'a' is lower }}{{ 's' is string }}{{ {} is mapping }}{{ 1 is number }}{{ true is number }}{{ [] is sequence }}{{ 's' is iterable }}{{ 1 is iterable }}{{ 2 is in [1, 2] }}{{ 2 is eq 2 }}{{ 2 is ne 2 }}{{ 3 is gt 2 }}{{ 3 is lt 2 }}{{ 3 is ge 3 }}{{ 3 is le 2 }}{{ false is false }}{{ true is true }}{{ 1 is true }}{{ range is callable }}{{ x is sequence }}{{ x is callable }}{{ 'x' is not string }}", {}),
    # methods
    ("str_methods", "{{ '  a b '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b c '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ ' a  b c '.rsplit(None, 1) }}|{{ 'abc'.startswith('a') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ 'hello world'.title() }}|{{ 'they\\'re'.title() }}|{{ 'aBc'.swapcase() }}|{{ 'héllo'.find('l') }}{{ 'hello'.rfind('l') }}{{ 'hello'.find('z') }}|{{ 'hello'.count('l') }}|{{ '-'.join(['a', 'b']) }}|{{ 'abc'.replace('b', 'X') }}|{{ 'pre_x'.removeprefix('pre_') }}|{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}{{ 'aB'.islower() }}|{{ 'abc'.upper() }}{{ 'ABC'.lower() }}{{ 'abc'.capitalize() }}", {}),
    ("list_methods", "{{ [1, 2, 1].count(1) }} {{ [1, 2].index(2) }} {{ (3, 4).index(4) }}", {}),
    ("undefined_ops", "{{ u|length }} {{ u|list }} {{ 'x' in u }} {{ u|string }}[{{ u }}]{% for x in u %}x{% endfor %} {{ u is none }} {{ u == u }}", {}),
    ("generator_truthy", "{{ 'yes' if l|select('none') else 'no' }} {{ 'yes' if l|select('none')|list else 'no' }}", {"l": [1, 2]}),
    ("strftime", "{{ strftime_now('%Y-%m-%d %H:%M %a %b %d %B') }}", {}),
    ("raise", "{{ raise_exception('custom failure: ' ~ 42) }}", {}),
    ("dict_global", "{{ dict(a=1, b='x') }} {{ dict({'c': 2}, d=3) }}", {}),
    ("messages_normalised", "{% for m in messages %}{{ m }}{% endfor %}", {"messages": [{"role": "user", "content": "x", "tool_calls": None}, {"role": "assistant", "content": "y", "reasoning": "because"}]}),
    ("defaults_defined", "{{ tools is none }}{{ documents is none }}{{ add_generation_prompt }}{{ messages|length }}", {}),
    # errors (any error: jinja's message is recorded, test_template only requires one)
    ("err_attr_of_undefined", "{{ a.b.c }}", {"a": {}}),
    ("err_append", "{% set l = [1] %}{{ l.append(2) }}", {}),
    ("err_add_types", "{{ 1 + 'a' }}", {}),
    ("err_undefined_arith", "{{ nope + 1 }}", {}),
    ("err_tojson_undefined", "{{ nope|tojson }}", {}),
    ("err_len_generator", "{{ [1]|select|length }}", {}),
    ("err_unpack", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("err_div_zero", "{{ 1 / 0 }}", {}),
    ("err_compare", "{{ 1 < 'a' }}", {}),
    ("err_iterate_int", "{% for x in 3 %}{% endfor %}", {}),
    ("err_ns_underscore", "{% set ns = namespace() %}{% set ns._x = 1 %}", {}),
    ("err_call_int", "{{ 3() }}", {}),
]


def main():
    print(f"transformers {transformers.__version__}, jinja2 {jinja2.__version__}")
    total = 0
    for name, cases in CASES.items():
        source = (ROOT / name / "template.jinja").read_text(encoding="utf-8")
        out = [case(cname, source, context) for cname, context in cases]
        (ROOT / name / "cases.json").write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        total += len(out)
        trips = [{"name": cname, **round_trip(name, source, msgs)} for cname, msgs in ROUND_TRIPS]
        (ROOT / name / "roundtrip.json").write_text(json.dumps(trips, ensure_ascii=False, indent=1) + "\n",
                                                    encoding="utf-8")
        print(f"{name}: {len(out)} cases ({sum('error' in c for c in out)} raising), "
              f"{len(trips)} round trips ({sum('error' in c for c in trips)} raising)")
    unit = []
    for cname, template, context in UNIT:
        context = {"messages": [], **context}
        c = case(cname, template, context)
        c["template"] = template
        unit.append(c)
    (ROOT / "_unit").mkdir(exist_ok=True)
    (ROOT / "_unit" / "cases.json").write_text(json.dumps(unit, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    total += len(unit)
    print(f"_unit: {len(unit)} cases; {total} in all")


if __name__ == "__main__":
    main()
