"""Decode throughput with and without a JSON schema, against one or more OpenAI-style servers
(loom serve, llama-server), for benches/structured.sh.

Each round sends, to each server in turn (the order alternating between rounds), one request
per mode: "free" (no constraint, ignore_eos) and "schema" (the schema as llama-server's
top-level `json_schema` field, which loom takes too; a .gbnf file goes as their `grammar`
field instead, and its outputs are checked to parse as JSON), at each temperature, all with the same
prompt of random token ids and max_tokens, after one warm-up request per server. A request's
decode rate is (completion_tokens - 1) over its time from the first streamed token to the last
(the tokens as the final usage chunk counts them, else the chunks). Schema outputs that finished are validated with
the `jsonschema` package. Prints one JSON line per request and a markdown summary.

Usage: structured_load.py SCHEMA.json ROUNDS MAX_TOKENS TEMPS NAME=URL [NAME=URL ...]"""
import json
import random
import sys
import time
import urllib.request

import jsonschema

schema_path, rounds, max_tokens, temps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
servers = [a.split("=", 1) for a in sys.argv[5:]]
gbnf = open(schema_path).read() if schema_path.endswith(".gbnf") else None
schema = None if gbnf else json.load(open(schema_path))
rng = random.Random(28)
prompt = [rng.randrange(1000, 100000) for _ in range(16)]
rows = []


def run(name, url, mode, temp):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": temp, "seed": 1, "stream": True,
            "stream_options": {"include_usage": True}}
    if mode == "schema" and gbnf:
        body["grammar"] = gbnf
    elif mode == "schema":
        body["json_schema"] = schema
    else:
        body["ignore_eos"] = True
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.monotonic()
    first = last = None
    text, chunks, finish, tokens = "", 0, None, None
    with urllib.request.urlopen(req, timeout=900) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            c = json.loads(line[6:])
            if c.get("usage"):
                tokens = c["usage"].get("completion_tokens")
            for ch in c.get("choices", []):
                if ch.get("text"):
                    now = time.monotonic()
                    first = first or now
                    last = now
                    text += ch["text"]
                    chunks += 1
                finish = ch.get("finish_reason") or finish
    valid = None
    if mode == "schema" and finish == "stop":
        try:
            value = json.loads(text)
            if schema:
                jsonschema.validate(value, schema)
            valid = True
        except Exception:  # noqa: BLE001 - any failure means invalid
            valid = False
    n = tokens or chunks
    rate = (n - 1) / (last - first) if n > 1 and last > first else 0.0
    row = {"server": name, "mode": mode, "temperature": temp, "tokens": n, "chunks": chunks, "finish": finish,
           "decode_tok_s": round(rate, 2), "wall_s": round(time.monotonic() - t0, 2), "valid": valid, "text": text[:200]}
    print(json.dumps(row), flush=True)
    rows.append(row)


for name, url in servers:  # warm-up: weights paged in, threads started
    body = {"prompt": prompt, "max_tokens": 8, "temperature": 0}
    urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                                  {"Content-Type": "application/json"}), timeout=900).read()
for r in range(rounds):
    order = servers if r % 2 == 0 else servers[::-1]
    for name, url in order:
        for temp in [float(t) for t in temps.split(",")]:
            for mode in ("free", "schema"):
                run(name, url, mode, temp)

print("\n| server | temperature | free decode tok/s | schema decode tok/s | schema / free | schema outputs valid |")
print("|---|---|---|---|---|---|")
for name, _ in servers:
    for temp in [float(t) for t in temps.split(",")]:
        def mean(mode):
            v = [x["decode_tok_s"] for x in rows if x["server"] == name and x["mode"] == mode and x["temperature"] == temp]
            return sum(v) / len(v) if v else 0.0
        free, sch = mean("free"), mean("schema")
        done = [x for x in rows if x["server"] == name and x["mode"] == "schema" and x["temperature"] == temp]
        ok = sum(1 for x in done if x["valid"])
        fin = sum(1 for x in done if x["finish"] == "stop")
        print(f"| {name} | {temp:g} | {free:.2f} | {sch:.2f} | {sch / free if free else 0:.2f}x | {ok} of {fin} finished ({len(done)} sent) |")
