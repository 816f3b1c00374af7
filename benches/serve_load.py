#!/usr/bin/env python3
"""Load generator for OpenAI-compatible completion servers (loom serve, llama-server).

Usage: serve_load.py --port N --concurrency C --requests R [--prompt-len P] [--output-len O]
                     [--seed S] [--vocab V] [--logprobs] [--timeout T] [--label TEXT] [--note TEXT]
       serve_load.py --report RESULTS.jsonl [--base LABEL]   (markdown tables of such lines)

Sends R streaming POST /v1/completions requests to 127.0.0.1:N, at most C in flight (C threads,
each taking the next request when its last one ends). Every prompt is a list of P random token
ids (seeded by S, C and the request's index, so no two requests share a prefix a prompt cache
could reuse), with max_tokens O, temperature 0, ignore_eos and stream_options.include_usage.

Measured per request, from the moment it is sent: time to first token (the first chunk that
carries a token), the gaps between later token chunks (inter-token latency; a chunk carrying k
tokens counts as k gaps of 1/k its time), and output tokens (the final usage chunk's
completion_tokens). A chunk's tokens are len(logprobs.tokens) when the server sends logprobs,
else 1 if its text is not empty. --logprobs asks for "logprobs": 0, which loom needs to send
one chunk per token when it has no tokenizer (its text is then empty); llama-server's text is
never empty with the GGUF serve.sh writes, and its logprobs would cost it a sort of the
vocabulary per token, so serve.sh does not ask it for them.

Prints one JSON line: label, concurrency, requests, ok (requests that finished with all their
tokens), output_tokens, wall_s (first send to last end), output_tok_s, ttft_ms p50/p99/mean,
itl_ms p50/p99/mean, note (--note, copied), and errors (first few messages). Standard library only; every request has
a timeout; it only connects to 127.0.0.1. Exit status 1 when any request failed.
"""
import argparse
import http.client
import json
import random
import sys
import threading
import time


def percentile(xs, q):
    """Linear interpolation between closest ranks (numpy's default); None when empty."""
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def one_request(port, body, timeout):
    """Returns dict(ttft, gaps, tokens, chunk_tokens, error)."""
    out = {"ttft": None, "gaps": [], "tokens": 0, "chunk_tokens": 0, "error": None}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.perf_counter()
    deadline = t0 + timeout
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            out["error"] = "HTTP %d: %s" % (resp.status, resp.read(300).decode("utf-8", "replace"))
            return out
        last = None
        done = False
        while True:
            if time.perf_counter() > deadline:
                out["error"] = "timed out after %.0f s" % timeout
                return out
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            now = time.perf_counter()
            j = json.loads(data)
            if "error" in j:
                out["error"] = "server error: %s" % json.dumps(j["error"])[:300]
                return out
            usage = j.get("usage")
            if usage:
                out["tokens"] = usage.get("completion_tokens", 0)
            n = 0
            for ch in j.get("choices") or []:
                lp = ch.get("logprobs")
                if isinstance(lp, dict) and isinstance(lp.get("tokens"), list):
                    n += len(lp["tokens"])
                elif ch.get("text"):
                    n += 1
            if n == 0:
                continue
            out["chunk_tokens"] += n
            if out["ttft"] is None:
                out["ttft"] = now - t0
                n -= 1  # the first token's time is the TTFT; the chunk's others are gaps
                if n > 0:
                    out["gaps"] += [0.0] * n
            else:
                out["gaps"] += [(now - last) / n] * n
            last = now
        if not done:
            out["error"] = "stream ended without [DONE]"
    except Exception as e:  # noqa: BLE001 - any failure is reported, not raised
        out["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        conn.close()
    if out["error"] is None and out["tokens"] == 0:
        out["tokens"] = out["chunk_tokens"]  # a server without usage in its stream
    return out


def report(path, base=None):
    """One table per (prompt_len, output_len) workload, rows in file order, then the output
    tok/s of every other engine over the base engine's at each concurrency (base: --base when
    the workload has it, else the workload's first engine)."""
    rows = [json.loads(line) for line in open(path) if line.strip()]
    f = lambda x: "-" if x is None else "%.1f" % x  # noqa: E731
    workloads = []
    for r in rows:
        w = (r["prompt_len"], r["output_len"])
        if w not in workloads:
            workloads.append(w)
    for p, o in workloads:
        rs = [r for r in rows if (r["prompt_len"], r["output_len"]) == (p, o)]
        print("Prompt %d tokens, %d output tokens (ignore_eos, temperature 0):\n" % (p, o))
        print("| engine | concurrency | requests (ok) | output tok/s | TTFT p50 ms | TTFT p99 ms "
              "| ITL p50 ms | ITL p99 ms | note |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in rs:
            print("| %s | %d | %d (%d) | %s | %s | %s | %s | %s | %s |" % (
                r["label"], r["concurrency"], r["requests"], r["ok"], f(r["output_tok_s"]),
                f(r["ttft_ms"]["p50"]), f(r["ttft_ms"]["p99"]), f(r["itl_ms"]["p50"]),
                f(r["itl_ms"]["p99"]), r.get("note") or ""))
        labels = []
        for r in rs:
            if r["label"] not in labels:
                labels.append(r["label"])
        if len(labels) > 1:
            den = base if base in labels else labels[0]
            ratios = []
            for other in [x for x in labels if x != den]:
                for c in sorted({r["concurrency"] for r in rs}):
                    a = [r for r in rs if r["label"] == other and r["concurrency"] == c]
                    b = [r for r in rs if r["label"] == den and r["concurrency"] == c]
                    if a and b and a[0]["output_tok_s"] and b[0]["output_tok_s"]:
                        ratios.append("%s / %s at concurrency %d: %.2f" % (
                            other, den, c, a[0]["output_tok_s"] / b[0]["output_tok_s"]))
            if ratios:
                print("\nOutput tok/s, " + "; ".join(ratios) + ".")
        print()
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int)
    ap.add_argument("--concurrency", type=int)
    ap.add_argument("--requests", type=int)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=128000,
                    help="prompt ids are drawn from [1000, VOCAB) (clear of any special tokens)")
    ap.add_argument("--logprobs", action="store_true", help='ask for "logprobs": 0 (see above)')
    ap.add_argument("--model", help='"model" field to send (default: none)')
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per request")
    ap.add_argument("--label", default="")
    ap.add_argument("--note", default="", help="copied into the JSON line")
    ap.add_argument("--report", help="print markdown tables of a file of this script's JSON lines")
    ap.add_argument("--base", help="with --report: the engine label the others are divided by")
    a = ap.parse_args()
    if a.report:
        return report(a.report, a.base)
    if a.port is None or a.concurrency is None or a.requests is None:
        ap.error("--port, --concurrency and --requests are required")

    bodies = []
    for i in range(a.requests):
        rng = random.Random("%d/%d/%d/%d" % (a.seed, a.concurrency, a.prompt_len, i))
        b = {"prompt": [rng.randrange(1000, a.vocab) for _ in range(a.prompt_len)],
             "max_tokens": a.output_len, "temperature": 0, "ignore_eos": True, "stream": True,
             "stream_options": {"include_usage": True}}
        if a.logprobs:
            b["logprobs"] = 0
        if a.model:
            b["model"] = a.model
        bodies.append(b)

    results = [None] * a.requests
    lock = threading.Lock()
    nxt = [0]

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= a.requests:
                return
            results[i] = one_request(a.port, bodies[i], a.timeout)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(a.concurrency, a.requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(a.timeout * (a.requests // max(1, a.concurrency) + 2))
    wall = time.perf_counter() - t0

    done = [r for r in results if r is not None]
    ok = [r for r in done if r["error"] is None and r["tokens"] >= a.output_len]
    errors = [r["error"] or "%d of %d tokens" % (r["tokens"], a.output_len)
              for r in done if r not in ok]
    errors += ["not finished"] * (a.requests - len(done))
    ttft = [r["ttft"] * 1e3 for r in done if r["ttft"] is not None]
    itl = [g * 1e3 for r in done for g in r["gaps"]]
    tokens = sum(r["tokens"] for r in done)
    rnd = lambda x: None if x is None else round(x, 2)  # noqa: E731
    print(json.dumps({
        "label": a.label, "concurrency": a.concurrency, "requests": a.requests, "ok": len(ok),
        "prompt_len": a.prompt_len, "output_len": a.output_len, "output_tokens": tokens,
        "wall_s": round(wall, 3), "output_tok_s": round(tokens / wall, 3) if wall > 0 else None,
        "ttft_ms": {"p50": rnd(percentile(ttft, 50)), "p99": rnd(percentile(ttft, 99)),
                    "mean": rnd(sum(ttft) / len(ttft)) if ttft else None},
        "itl_ms": {"p50": rnd(percentile(itl, 50)), "p99": rnd(percentile(itl, 99)),
                   "mean": rnd(sum(itl) / len(itl)) if itl else None},
        "chunk_tokens": sum(r["chunk_tokens"] for r in done), "note": a.note,
        "errors": errors[:5]}))
    sys.stdout.flush()
    return 0 if len(ok) == a.requests else 1


if __name__ == "__main__":
    sys.exit(main())
