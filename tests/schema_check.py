"""Validates the outputs of tests/test_structured (its --out JSONL) and reports, as ctest's
structured_schemas and benches/schema_coverage.sh run it: per dataset (the name's folder), the schemas, those
converted, the outputs sampled, finished, and valid against their schema (Python's jsonschema,
Draft 2020-12 unless the schema names its draft, with format checks); then the keywords the
refusals name, most frequent first.

Exits 1 when a finished output does not validate.

Usage: schema_check.py CORPUS.jsonl OUTPUTS.jsonl"""
import collections
import json
import re
import sys

import jsonschema

corpus = {}
for line in open(sys.argv[1]):
    e = json.loads(line)
    corpus[e["name"]] = e["schema"]
stats = collections.defaultdict(lambda: collections.Counter())
refusals = collections.Counter()
invalid = []
for line in open(sys.argv[2]):
    o = json.loads(line)
    ds = o["name"].split("/")[0]
    if "error" in o:
        stats[ds]["refused"] += 1
        m = re.search(r"'([^']+)'", o["error"])
        refusals[m.group(1) if m else o["error"][:60]] += 1
        continue
    stats[ds]["outputs"] += 1
    if o["finish_reason"] != "stop":
        continue
    stats[ds]["finished"] += 1
    schema = corpus[o["name"]]
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls(schema, format_checker=cls.FORMAT_CHECKER).validate(json.loads(o["output"]))
        stats[ds]["valid"] += 1
    except Exception as e:  # noqa: BLE001 - any failure is an invalid output
        invalid.append((o["name"], o["model"], str(e).split("\n")[0][:160]))
for name in corpus:
    stats[name.split("/")[0]]["schemas"] += 1
print("| dataset | schemas | converted | outputs | finished | valid (of finished) |")
print("|---|---|---|---|---|---|")
tot = collections.Counter()
for ds in sorted(stats):
    s = stats[ds]
    tot.update(s)
    conv = s["schemas"] - s["refused"]
    print(f"| {ds} | {s['schemas']} | {conv} ({100 * conv / s['schemas']:.1f}%) | {s['outputs']} | {s['finished']} | "
          f"{s['valid']} ({100 * s['valid'] / max(s['finished'], 1):.1f}%) |")
conv = tot["schemas"] - tot["refused"]
print(f"| **all** | {tot['schemas']} | {conv} ({100 * conv / tot['schemas']:.1f}%) | {tot['outputs']} | {tot['finished']} | "
      f"{tot['valid']} ({100 * tot['valid'] / max(tot['finished'], 1):.1f}%) |")
print("\nrefusals by what they name:", ", ".join(f"{k} {v}" for k, v in refusals.most_common(20)))
for name, model, why in invalid[:20]:
    print(f"invalid: {name} ({model}): {why}")
sys.exit(1 if invalid else 0)
