#!/usr/bin/env python3
"""Load generator for OpenAI-compatible completion servers (loom serve, llama-server).

Usage: serve_load.py --port N --concurrency C --requests R [--prompt-len P] [--output-len O]
                     [--seed S] [--vocab V] [--logprobs] [--timeout T] [--label TEXT] [--note TEXT]
                     [--workload NAME]
       serve_load.py --port N --concurrency C --multi-turn [--users U] [--turns T]
                     [--system-len S] [--user-len K] [--output-len O] [--answer generated|fixed]
                     [--logprobs] [--verbose-ids] [--dump FILE] [--seed S] [--vocab V] ...
       serve_load.py --report RESULTS.jsonl [--base LABEL]   (markdown tables of such lines)

Single-shot mode (the default): sends R streaming POST /v1/completions requests to
127.0.0.1:N, at most C in flight (C threads, each taking the next request when its last one
ends). Every prompt is a list of P random token ids (seeded by S, C and the request's index, so
no two requests share a prefix a prompt cache could reuse), with max_tokens O, temperature 0,
ignore_eos and stream_options.include_usage. --workload NAME is copied into the JSON line
(default "single"; serve.sh's multi-turn job tags its "new-tokens-only prefill" baseline with
"new-tokens-prefill", which the report puts beside the multi-turn tables).

Multi-turn mode (--multi-turn): U chat sessions of T turns each. Every session's prompt is a
shared system prompt of S random token ids (the same for every user; seeded by S and C, so
each concurrency level starts with a system prompt no earlier level cached) followed by its own
history: each turn appends the user's K new random token ids (seeded per user and turn) and
sends the WHOLE conversation as a list of token ids, as chat clients resend history; the
answer's O token ids are then appended before the user's next turn. So turn t's prompt is
S + t*K + (t-1)*O tokens, and a prefix cache that keeps the previous turn's prompt and answer
only has the K + O new tokens to prefill. --answer generated (the default) appends the ids
the server actually generated: from loom, "logprobs": 0 (--logprobs) gives every token as
"token_id:N" when the model has no tokenizer; from llama-server, "verbose": true (--verbose-ids)
adds a "__verbose" object with the chunk's token ids. When a response gives no ids (or fewer
than it generated) that turn appends O pseudo-random ids seeded per user and turn instead, and
the JSON line counts it in "answer_fallbacks". --answer fixed always does so: then the next
prompt shares the previous prompt but not the previous answer, so a prefix cache can reuse only
the prompt part. At most C requests are in flight (C worker threads) and a user has at most one:
the turns wait in one FIFO queue, every user's turn 1 first (user order), and a user's next
turn joins the back of the queue the moment its previous turn ends, so with U > C the users
interleave as chat users do (the server must hold U conversations, not C, to hit its cache).
A turn that fails ends its session (its later turns count as errors). --dump FILE writes one
JSON line per request (user, turn, prompt_len, ttft_ms, itl_ms list, output tokens, cached).

Measured per request, from the moment it is sent: time to first token (the first chunk that
carries a token), the gaps between later token chunks (inter-token latency; a chunk carrying k
tokens counts as k gaps of 1/k its time), output tokens (the final usage chunk's
completion_tokens) and, in multi-turn mode, the prompt tokens the server says it took from its
cache: usage.prompt_tokens_details.cached_tokens (loom with prefix caching; llama-server too),
else llama-server's timings.cache_n or tokens_cached, else null. A chunk's tokens are
len(logprobs.tokens) when the server sends logprobs, else 1 if its text is not empty.
--logprobs asks for "logprobs": 0, which loom needs to send one chunk per token when it has no
tokenizer (its text is then empty); llama-server's text is never empty with the GGUF serve.sh
writes, and its logprobs would cost it a sort of the vocabulary per token, so serve.sh does not
ask it for them.

Prints one JSON line: label, concurrency, requests, ok (requests that finished with all their
tokens), output_tokens, wall_s (first send to last end), output_tok_s, ttft_ms p50/p99/mean,
itl_ms p50/p99/mean, note (--note, copied), and errors (first few messages). Multi-turn lines
add workload "multiturn", users, turns_per_user, system_len, user_len, answer, answer_fallbacks,
prompt_tokens and cached_tokens (sums; cached null when no response said), prompt_tok_s (prompt
tokens sent per second, cached or not), ttft_followup_ms (turns 2..T) and "turns": one entry
per turn with n, ok, ttft_ms_p50/p99/mean, prompt_len_mean and cached_mean. Standard library
only; every request has a timeout; it only connects to 127.0.0.1. Exit status 1 when any
request failed.
"""
import argparse
import collections
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


def token_id(text):
    """A token id from loom's logprobs text without a tokenizer ("token_id:N", as vLLM writes it),
    else None."""
    if isinstance(text, str) and text.startswith("token_id:"):
        try:
            return int(text[9:])
        except ValueError:
            return None
    return None


def cached_of(j):
    """Prompt tokens a response says came from the server's cache, else None: the usage's
    prompt_tokens_details.cached_tokens (OpenAI's field; loom, llama-server), else llama-server's
    timings.cache_n or tokens_cached."""
    u = j.get("usage")
    if isinstance(u, dict) and isinstance(u.get("prompt_tokens_details"), dict):
        c = u["prompt_tokens_details"].get("cached_tokens")
        if isinstance(c, int):
            return c
    t = j.get("timings")
    if isinstance(t, dict) and isinstance(t.get("cache_n"), int):
        return t["cache_n"]
    if isinstance(j.get("tokens_cached"), int):
        return j["tokens_cached"]
    return None


def one_request(port, body, timeout):
    """Returns dict(ttft, gaps, tokens, chunk_tokens, ids, cached, prompt_tokens, error): ids are
    the generated token ids when the chunks carry them (loom's "token_id:N" logprobs, or
    llama-server's __verbose.tokens with "verbose": true), in order; cached and prompt_tokens
    come from the usage (None when absent)."""
    out = {"ttft": None, "gaps": [], "tokens": 0, "chunk_tokens": 0, "ids": [], "cached": None,
           "prompt_tokens": None, "error": None}
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
                out["prompt_tokens"] = usage.get("prompt_tokens")
            c = cached_of(j)
            if c is not None:
                out["cached"] = c
            n = 0
            for ch in j.get("choices") or []:
                lp = ch.get("logprobs")
                if isinstance(lp, dict) and isinstance(lp.get("tokens"), list):
                    n += len(lp["tokens"])
                    out["ids"] += [token_id(t) for t in lp["tokens"]]
                elif ch.get("text"):
                    n += 1
            v = j.get("__verbose")  # llama-server with "verbose": true; its final one repeats them
            if isinstance(v, dict) and not v.get("stop") and isinstance(v.get("tokens"), list):
                out["ids"] += [t if isinstance(t, int) else None for t in v["tokens"]]
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


def stats(xs):
    rnd = lambda x: None if x is None else round(x, 2)  # noqa: E731
    return {"p50": rnd(percentile(xs, 50)), "p99": rnd(percentile(xs, 99)),
            "mean": rnd(sum(xs) / len(xs)) if xs else None}


def multi_turn(a):
    """The multi-turn chat workload (see the module's docstring); prints its JSON line."""
    U, T, C = a.users, a.turns, a.concurrency
    ids = lambda rng, n: [rng.randrange(1000, a.vocab) for _ in range(n)]  # noqa: E731
    system = ids(random.Random("system/%d/%d/%d" % (a.seed, C, a.system_len)), a.system_len)
    history = [list(system) for _ in range(U)]
    recs = {}  # (user, turn) -> record
    queue = collections.deque((u, 1) for u in range(U))
    cond = threading.Condition()
    busy = [0]
    dump = open(a.dump, "w") if a.dump else None

    def body(prompt):
        b = {"prompt": prompt, "max_tokens": a.output_len, "temperature": 0, "ignore_eos": True,
             "stream": True, "stream_options": {"include_usage": True}}
        if a.logprobs:
            b["logprobs"] = 0
        if a.verbose_ids:
            b["verbose"] = True
        if a.model:
            b["model"] = a.model
        return b

    def worker():
        while True:
            with cond:
                while not queue and busy[0] > 0:
                    cond.wait(1.0)
                if not queue:
                    return  # nothing queued and nothing in flight that could queue more
                u, t = queue.popleft()
                busy[0] += 1
            try:
                h = history[u]
                h += ids(random.Random("user/%d/%d/%d/%d" % (a.seed, C, u, t)), a.user_len)
                prompt_len = len(h)
                r = one_request(a.port, body(list(h)), a.timeout)
                r["user"], r["turn"], r["prompt_len"] = u, t, prompt_len
                ok = r["error"] is None and r["tokens"] >= a.output_len
                got = [x for x in r["ids"] if x is not None]
                if a.answer == "generated" and ok and len(got) == len(r["ids"]) >= a.output_len:
                    h += got[:a.output_len]
                    r["answer"] = "generated"
                else:
                    h += ids(random.Random("answer/%d/%d/%d/%d" % (a.seed, C, u, t)), a.output_len)
                    r["answer"] = "fixed"
                r["ok"] = ok
            except Exception as e:  # noqa: BLE001 - a bug here must not hang the other workers
                r = {"user": u, "turn": t, "prompt_len": None, "ttft": None, "gaps": [], "tokens": 0,
                     "cached": None, "ok": False, "answer": "fixed", "error": "%s: %s" % (type(e).__name__, e)}
            with cond:
                recs[(u, t)] = r
                if dump:
                    dump.write(json.dumps({
                        "user": u + 1, "turn": t, "prompt_len": r["prompt_len"], "ok": r["ok"],
                        "ttft_ms": None if r["ttft"] is None else round(r["ttft"] * 1e3, 2),
                        "itl_ms": [round(g * 1e3, 2) for g in r["gaps"]], "output_tokens": r["tokens"],
                        "cached": r["cached"], "answer": r["answer"], "error": r["error"]}) + "\n")
                if r["ok"] and t < T:
                    queue.append((u, t + 1))
                busy[0] -= 1
                cond.notify_all()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(C, U))]
    for th in threads:
        th.start()
    deadline = t0 + a.timeout * (U * T // max(1, min(C, U)) + 2)
    for th in threads:
        th.join(max(0.0, deadline - time.perf_counter()))
    wall = time.perf_counter() - t0
    with cond:  # workers still running past the deadline must not change what is read below
        done = list(recs.values())
        if dump:
            dump.close()
            dump = None

    ok = [r for r in done if r["ok"]]
    errors = ["user %d turn %d: %s" % (r["user"] + 1, r["turn"],
                                       r["error"] or "%d of %d tokens" % (r["tokens"], a.output_len))
              for r in sorted(done, key=lambda r: (r["turn"], r["user"])) if not r["ok"]]
    missing = U * T - len(done)
    if missing:
        errors.append("%d turns not run (a session's earlier turn failed, or the run timed out)" % missing)
    ms = lambda xs: [x * 1e3 for x in xs if x is not None]  # noqa: E731
    turns = []
    for t in range(1, T + 1):
        rs = [r for r in done if r["turn"] == t]
        st = stats(ms([r["ttft"] for r in rs]))
        cached = [r["cached"] for r in rs if r["cached"] is not None]
        pl = [r["prompt_len"] for r in rs if r["prompt_len"] is not None]
        turns.append({"turn": t, "n": len(rs), "ok": sum(r["ok"] for r in rs),
                      "ttft_ms_p50": st["p50"], "ttft_ms_p99": st["p99"], "ttft_ms_mean": st["mean"],
                      "prompt_len_mean": round(sum(pl) / len(pl), 1) if pl else None,
                      "cached_mean": round(sum(cached) / len(cached), 1) if cached else None})
    tokens = sum(r["tokens"] for r in done)
    prompt_tokens = sum(r["prompt_len"] or 0 for r in done)
    cached = [r["cached"] for r in done if r["cached"] is not None]
    print(json.dumps({
        "label": a.label, "workload": "multiturn", "concurrency": C, "requests": U * T, "ok": len(ok),
        "users": U, "turns_per_user": T, "system_len": a.system_len, "user_len": a.user_len,
        "prompt_len": None, "output_len": a.output_len, "answer": a.answer,
        "answer_fallbacks": sum(1 for r in done if r["answer"] != a.answer),
        "output_tokens": tokens, "prompt_tokens": prompt_tokens,
        "cached_tokens": sum(cached) if cached else None,
        "wall_s": round(wall, 3), "output_tok_s": round(tokens / wall, 3) if wall > 0 else None,
        "prompt_tok_s": round(prompt_tokens / wall, 3) if wall > 0 else None,
        "ttft_ms": stats(ms([r["ttft"] for r in done])),
        "ttft_followup_ms": stats(ms([r["ttft"] for r in done if r["turn"] > 1])),
        "itl_ms": stats([g * 1e3 for r in done for g in r["gaps"]]),
        "turns": turns, "note": a.note, "errors": errors[:5]}))
    sys.stdout.flush()
    return 0 if len(ok) == U * T else 1


def report(path, base=None):
    """Markdown tables of the JSON lines in path: the single-shot workloads (report_single), then
    the multi-turn ones (report_multi_turn) with their new-tokens-only prefill baselines."""
    rows = [json.loads(line) for line in open(path) if line.strip()]
    single = [r for r in rows if r.get("workload", "single") == "single"]
    multi = [r for r in rows if r.get("workload") == "multiturn"]
    baselines = [r for r in rows if r.get("workload") == "new-tokens-prefill"]
    if single:
        report_single(single, base)
    if multi:
        report_multi_turn(multi, baselines, base)
    elif baselines:
        report_single(baselines, base)
    return 0


def fmt(x):
    return "-" if x is None else "%.1f" % x


def in_order(xs):
    out = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


def report_single(rows, base=None):
    """One table per (prompt_len, output_len) workload, rows in file order, then the output
    tok/s of every other engine over the base engine's at each concurrency (base: --base when
    the workload has it, else the workload's first engine)."""
    f = fmt
    for p, o in in_order([(r["prompt_len"], r["output_len"]) for r in rows]):
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
        labels = in_order([r["label"] for r in rs])
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


def report_multi_turn(rows, baselines, base=None):
    """Per multi-turn workload (system, user and output lengths, turns): for each concurrency
    a table of TTFT p50/p99 and cached prompt tokens per turn, engines side by side; then a
    summary (output and prompt tok/s, TTFT of turn 1 and of the follow-up turns, ITL, and the
    follow-up TTFT over the engine's new-tokens-only prefill: a fresh prompt of user_len +
    output_len tokens, the baseline line with the engine's label and that prompt length); then
    every other engine's output tok/s and follow-up TTFT over the base engine's."""
    f = fmt
    key = lambda r: (r["system_len"], r["user_len"], r["output_len"], r["turns_per_user"])  # noqa: E731
    for S, K, O, T in in_order([key(r) for r in rows]):
        rs = [r for r in rows if key(r) == (S, K, O, T)]
        answers = in_order([r["answer"] for r in rs])
        print("Multi-turn chat: a shared system prompt of %d token ids, then per turn %d new user "
              "token ids and %d output tokens, %d turns per user (the whole history resent every "
              "turn; answers appended: %s; ignore_eos, temperature 0). Prompt of turn t: "
              "%d + t x %d + (t - 1) x %d tokens.\n" % (
                  S, K, O, T, " / ".join("the generated ids" if x == "generated" else
                                         "seeded pseudo-random ids" for x in answers), S, K, O))
        labels = in_order([r["label"] for r in rs])
        base_of = {}
        for lb in labels:
            b = [x for x in baselines if x["label"] == lb and x["prompt_len"] == K + O]
            base_of[lb] = b[-1] if b else None
        for c in in_order([r["concurrency"] for r in rs]):
            at = {r["label"]: r for r in rs if r["concurrency"] == c}
            at = {lb: at[lb] for lb in labels if lb in at}  # the same engine order at every level
            users = in_order([r["users"] for r in at.values()])
            print("TTFT per turn at concurrency %d (%s users; cached: mean prompt tokens the server "
                  "reported it took from its cache):\n" % (c, "/".join(map(str, users))))
            head = "| turn | prompt tokens |"
            rule = "|---|---|"
            for lb in at:
                head += " %s TTFT p50 ms | p99 ms | cached |" % lb
                rule += "---|---|---|"
            print(head)
            print(rule)
            for t in range(1, T + 1):
                per = {lb: ([x for x in r["turns"] if x["turn"] == t] or [None])[0] for lb, r in at.items()}
                plen = next((x["prompt_len_mean"] for x in per.values() if x and x["prompt_len_mean"]), None)
                line = "| %d | %s |" % (t, "-" if plen is None else "%.0f" % plen)
                for lb in at:
                    x = per[lb]
                    line += " %s | %s | %s |" % ((f(x["ttft_ms_p50"]), f(x["ttft_ms_p99"]), f(x["cached_mean"]))
                                                 if x else ("-", "-", "-"))
                print(line)
            print()
        print("Summary (follow-up: turns 2..%d; new-tokens prefill: TTFT p50 of a fresh %d-token "
              "prompt, no cache, at concurrency 1):\n" % (T, K + O))
        print("| engine | concurrency | users x turns | requests (ok) | output tok/s | prompt tok/s "
              "| cached / prompt tokens | TTFT p50 / p99 ms turn 1 | TTFT p50 / p99 ms follow-up "
              "| ITL p50 / p99 ms | new-tokens prefill TTFT p50 ms | follow-up p50 / new-tokens | note |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rs:
            t1 = ([x for x in r["turns"] if x["turn"] == 1] or [None])[0]
            fu = r["ttft_followup_ms"]
            b = base_of[r["label"]]
            bp = b["ttft_ms"]["p50"] if b else None
            cached = "-" if r["cached_tokens"] is None else "%d / %d" % (r["cached_tokens"], r["prompt_tokens"])
            errs = ("; errors: " + "; ".join(r["errors"])) if r["errors"] else ""
            fb = ("; %d answers pseudo-random" % r["answer_fallbacks"]) if r.get("answer_fallbacks") else ""
            print("| %s | %d | %d x %d | %d (%d) | %s | %s | %s | %s / %s | %s / %s | %s / %s | %s | %s | %s |" % (
                r["label"], r["concurrency"], r["users"], r["turns_per_user"], r["requests"], r["ok"],
                f(r["output_tok_s"]), f(r["prompt_tok_s"]), cached,
                f(t1 and t1["ttft_ms_p50"]), f(t1 and t1["ttft_ms_p99"]), f(fu["p50"]), f(fu["p99"]),
                f(r["itl_ms"]["p50"]), f(r["itl_ms"]["p99"]), f(bp),
                "%.2f" % (fu["p50"] / bp) if fu["p50"] and bp else "-", (r.get("note") or "") + fb + errs))
        if len(labels) > 1:
            den = base if base in labels else labels[0]
            for other in [x for x in labels if x != den]:
                ratios = []
                for c in in_order([r["concurrency"] for r in rs]):
                    a = [r for r in rs if r["label"] == other and r["concurrency"] == c]
                    b = [r for r in rs if r["label"] == den and r["concurrency"] == c]
                    if a and b and a[0]["output_tok_s"] and b[0]["output_tok_s"]:
                        x = "output tok/s %.2f" % (a[0]["output_tok_s"] / b[0]["output_tok_s"])
                        if a[0]["ttft_followup_ms"]["p50"] and b[0]["ttft_followup_ms"]["p50"]:
                            x += ", follow-up TTFT p50 %.2f" % (
                                a[0]["ttft_followup_ms"]["p50"] / b[0]["ttft_followup_ms"]["p50"])
                        ratios.append("at concurrency %d: %s" % (c, x))
                if ratios:
                    print("\n%s / %s " % (other, den) + "; ".join(ratios) + ".")
        print()


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
    ap.add_argument("--workload", default="single", help="copied into the JSON line (single-shot mode)")
    ap.add_argument("--multi-turn", action="store_true", help="the multi-turn chat workload (see above)")
    ap.add_argument("--users", type=int, default=8, help="multi-turn: sessions")
    ap.add_argument("--turns", type=int, default=6, help="multi-turn: turns per session")
    ap.add_argument("--system-len", type=int, default=1024, help="multi-turn: shared system prompt tokens")
    ap.add_argument("--user-len", type=int, default=128, help="multi-turn: new user tokens per turn")
    ap.add_argument("--answer", choices=("generated", "fixed"), default="generated",
                    help="multi-turn: append the generated ids, or seeded pseudo-random ones")
    ap.add_argument("--verbose-ids", action="store_true",
                    help='multi-turn: ask for "verbose": true (llama-server\'s token ids)')
    ap.add_argument("--dump", help="multi-turn: write one JSON line per request to this file")
    ap.add_argument("--report", help="print markdown tables of a file of this script's JSON lines")
    ap.add_argument("--base", help="with --report: the engine label the others are divided by")
    a = ap.parse_args()
    if a.report:
        return report(a.report, a.base)
    if a.multi_turn:
        if a.port is None or a.concurrency is None:
            ap.error("--port and --concurrency are required")
        if min(a.users, a.turns, a.concurrency, a.output_len) < 1 or min(a.system_len, a.user_len) < 0:
            ap.error("--users, --turns, --concurrency and --output-len must be positive")
        return multi_turn(a)
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
        "label": a.label, "workload": a.workload, "concurrency": a.concurrency, "requests": a.requests,
        "ok": len(ok),
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
