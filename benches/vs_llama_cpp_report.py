#!/usr/bin/env python3
"""Markdown tables from a benches/vs-llama-cpp.sh results folder (also reruns on a saved one).

Usage: vs_llama_cpp_report.py build-bench/results-<date>

Reads info.txt, machine-<variant>.txt (`loom bench machine`), loom-<dtype>-<row>-<variant>.txt
(`loom bench latency` output) and llama-<dtype>-<row>-<config>.json (`llama-bench -o json`).
Per weight dtype: one row per ppN / tgN, loom's tok/s per variant, llama.cpp's best config and
its tok/s, loom / llama.cpp (loom's avx2 rows against llama.cpp's AVX2 build where the run has
one, the other variants against its best other build), and for decode rows the share of the measured memory read
bandwidth the rate implies (weight bytes per token x tok/s / read GB/s; loom's bytes are what
it reports reading per decode step (every linear, the LM head included), or its `weights`
figure where it does not say; llama.cpp's its model_size: the whole model is read once per
token, the tied embedding as the LM head). Below each table, the weights each engine holds.
"""
import glob
import json
import os
import re
import sys


def info_fields(d):
    out = {}
    with open(os.path.join(d, "info.txt")) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition(": ")
            out[k] = v
    return out


def read(path):
    """The file's text, or None where the run left no such file."""
    return open(path).read() if os.path.exists(path) else None


def same_isa(v):
    """Whether loom's variant v meets llama.cpp's AVX2 build rather than its native one."""
    return v.split("+")[0] == "avx2"


def row_key(r):
    return (r[:2] != "pp", int(r[2:]))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    info = info_fields(d)
    variants = info.get("variants", "default").split()
    dtypes = info.get("dtypes", "f32 bf16").split()

    # per variant: `loom bench machine`'s rates, and what loom says about its CPU variant
    # ("CPU: <model>, kernels <variant> (...)")
    machine, said = {}, {}
    for v in variants:
        t = read(os.path.join(d, f"machine-{v}.txt"))
        if t is None:
            continue
        sg = (re.search(r"^linears' GEMM .*?: ([\d.]+) GFLOP/s", t, re.M)
              or re.search(r"^sgemm .*?: ([\d.]+) GFLOP/s", t, re.M))
        bw = re.search(r"^memory read: ([\d.]+) GB/s", t, re.M)
        machine[v] = (float(sg.group(1)) if sg else None, float(bw.group(1)) if bw else None)
        cpu = re.search(r"^.*(kernels|variant|LOOM_CPU).*$", t, re.M)
        if cpu:
            said[v] = cpu.group(0).strip()
    bws = [m[1] for m in machine.values() if m[1]]
    bw = max(bws) if bws else None

    print(f"CPU: **{info.get('cpu', '?')}** ({info.get('cpu flags (avx512/amx/bf16)', '')})  ")
    for v in variants:
        print(f"loom with {'LOOM_CPU unset' if v == 'default' else 'LOOM_CPU=' + v}: "
              + (f"`{said[v]}`" if v in said else "(loom does not say which variant it runs)") + "  ")
    print(f"loom: {info.get('loom', '?')}  ")
    print(f"llama.cpp: {info.get('llama.cpp', '?')}; builds: {info.get('llama.cpp builds', '?')}  ")
    print(f"threads {info.get('threads', '?')}, reps {info.get('reps', '?')}, {info.get('date', '')}  ")
    for v, (sg, b) in machine.items():
        print(f"`loom bench machine` [{v}]: GEMM {sg} GFLOP/s, memory read {b} GB/s  ")
    lp = os.path.join(d, "load.txt")
    if os.path.exists(lp):
        seen = [(l.split(":")[0], float(m.group(1))) for l in open(lp)
                if (m := re.search(r": ([\d.]+) other runnable", l))]
        if seen:
            busy = [f"{k} ({o:.1f})" for k, o in seen if o > 0.5]
            print(f"Other jobs' runnable threads just before each run (0 = machine to ourselves): "
                  f"min {min(o for _, o in seen):.1f}, max {max(o for _, o in seen):.1f}"
                  + (f"; **busy at the start of {len(busy)} of {len(seen)} runs**, figures unreliable: "
                     + ", ".join(busy) if busy else "") + "  ")
    print()

    for dt in dtypes:
        rows = sorted({re.match(rf"loom-{dt}-(\w+?)-", os.path.basename(p)).group(1)
                       for p in glob.glob(os.path.join(d, f"loom-{dt}-*.txt"))} |
                      {re.match(rf"llama-{dt}-(\w+?)-", os.path.basename(p)).group(1)
                       for p in glob.glob(os.path.join(d, f"llama-{dt}-*.json"))}, key=row_key)
        if not rows:
            continue
        has_avx2 = bool(glob.glob(os.path.join(d, f"llama-{dt}-*-avx2.json")))
        hdr = ["row"] + [f"loom [{v}] tok/s" for v in variants] + ["llama.cpp tok/s (best)", "llama.cpp config"]
        hdr += ["llama.cpp [AVX2 build] tok/s"] if has_avx2 else []
        hdr += [f"loom [{v}] / llama.cpp" + (" [AVX2]" if has_avx2 and same_isa(v) else "") for v in variants]
        hdr += ["decode: share of read bandwidth"]
        held = {}
        print(f"### {dt} weights\n")
        print("| " + " | ".join(hdr) + " |")
        print("|" + "|".join("---" for _ in hdr) + "|")
        for r in rows:
            kind, n = r[:2], int(r[2:])
            loom = {}
            for v in variants:
                t = read(os.path.join(d, f"loom-{dt}-{r}-{v}.txt"))
                if t is None:
                    continue
                m = re.search(r"^Prefill: [\d.]+ s avg, ([\d.]+) tok/s" if kind == "pp" else
                              r"^Decode: [\d.]+ s avg, ([\d.]+) tok/s", t, re.M)
                w = re.search(r"^Memory \(rank 0\): weights ([\d.]+) MiB", t, re.M)
                rd = re.search(r"^Decode reads \(rank 0\): ([\d.]+) MiB", t, re.M)
                rd = rd or w
                if w:
                    held[f"loom [{v}]"] = float(w.group(1))
                if m:
                    loom[v] = (float(m.group(1)), float(rd.group(1)) * 1048576 if rd else None)
            best, avx2 = None, None  # (tok/s, config, sd, bytes)
            for p in sorted(glob.glob(os.path.join(d, f"llama-{dt}-{r}-*.json"))):
                cfg = os.path.basename(p)[len(f"llama-{dt}-{r}-"):-len(".json")]
                try:
                    j = json.load(open(p))[0]
                except (ValueError, IndexError):
                    continue
                fa = {-1: "auto", 0: "off", 1: "on"}.get(j.get("flash_attn"), j.get("flash_attn"))
                desc = f"{cfg} build (flash-attn {fa}, backends {j.get('backends')})"
                if j.get("model_size"):
                    held["llama.cpp"] = j["model_size"] / 1048576
                got = (j["avg_ts"], desc, j.get("stddev_ts", 0), j.get("model_size"))
                if cfg == "avx2":
                    avx2 = got
                elif best is None or j["avg_ts"] > best[0]:
                    best = got
            cells = [f"{'prefill' if kind == 'pp' else 'decode'} {n}" + (f" (after {info.get('decode context', '?')})" if kind == "tg" else "")]
            cells += [f"{loom[v][0]:.2f}" if v in loom else "-" for v in variants]
            cells += [f"{best[0]:.2f} ± {best[2]:.2f}" if best else "-", best[1] if best else "-"]
            if has_avx2:
                cells += [f"{avx2[0]:.2f} ± {avx2[2]:.2f}" if avx2 else "-"]
            for v in variants:
                ref = avx2 if has_avx2 and same_isa(v) else best
                cells += [f"**{loom[v][0] / ref[0]:.2f}**" if v in loom and ref else "-"]
            if kind == "tg" and bw:
                parts = []
                for v in variants:
                    if v in loom and loom[v][1]:
                        gbs = loom[v][0] * loom[v][1] / 1e9
                        parts.append(f"loom [{v}] {gbs:.1f} GB/s = {100 * gbs / bw:.0f}%")
                if best and best[3]:
                    gbs = best[0] * best[3] / 1e9
                    parts.append(f"llama.cpp {gbs:.1f} GB/s = {100 * gbs / bw:.0f}%")
                cells.append("; ".join(parts) + f" (of {bw} GB/s)")
            else:
                cells.append("")
            print("| " + " | ".join(cells) + " |")
        print()
        crashed = read(os.path.join(d, "crashed.txt"))
        for line in (crashed or "").splitlines():
            if line.startswith(f"{dt} "):
                print(f"Left out: {line}  ")
        if held:
            print("Weights held: " + ", ".join(f"{k} {mib:.0f} MiB" for k, mib in sorted(held.items())) + "\n")


if __name__ == "__main__":
    main()
