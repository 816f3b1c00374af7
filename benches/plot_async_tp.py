#!/usr/bin/env python3
"""Plots average latency against input length for TP, TP + SP and async TP from the JSON that
benches/async-tp.sh writes (benches/results/MODEL-LEN.MODE.json), one panel per model.
Usage: python3 benches/plot_async_tp.py [results-dir]  ->  results-dir/async-tp-latency.png"""
import glob
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

results = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "results")
runs = {}  # model -> mode -> [(len, avg, p10, p90)]
for path in glob.glob(os.path.join(results, "*.json")):
    m = re.match(r"(.+)-(\d+)\.(tp|sp|async)\.json$", os.path.basename(path))
    if not m:
        continue
    with open(path) as f:
        r = json.load(f)
    p = r["percentiles"]
    runs.setdefault(m[1], {}).setdefault(m[3], []).append((int(m[2]), r["avg_latency"], p["10"], p["90"]))

labels = {"tp": "TP", "sp": "TP + SP", "async": "async TP"}
fig, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 4), squeeze=False)
for ax, model in zip(axes[0], sorted(runs)):
    for mode in ("tp", "sp", "async"):
        pts = sorted(runs[model].get(mode, []))
        if not pts:
            continue
        xs = [x for x, *_ in pts]
        ax.errorbar(xs, [a for _, a, _, _ in pts],
                    yerr=[[a - lo for _, a, lo, _ in pts], [hi - a for _, a, _, hi in pts]],
                    marker="o", capsize=3, label=labels[mode])
    ax.set_title(f"{model}, tp=2 (shm, 1 thread/rank)")
    ax.set_xlabel("input tokens (output 1)")
    ax.set_ylabel("latency (s), avg with 10-90% range")
    ax.set_xscale("log", base=2)
    ax.legend()
fig.tight_layout()
out = os.path.join(results, "async-tp-latency.png")
fig.savefig(out, dpi=120)
print(out)
