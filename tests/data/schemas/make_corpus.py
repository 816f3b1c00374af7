"""Writes corpus.jsonl, the JSON Schema corpus tests/test_structured.c runs: one schema a line,
{"name", "schema", "expect": "ok" | "refuse"}.

- "real/*": schemas of the kinds applications send (API payloads, configuration, function
  parameters), written for this corpus;
- "gen/*": schemas drawn at random (seeded, so the file is the same on every run) from the
  keywords loom supports, nested up to three levels: every type, properties with required
  subsets and each additionalProperties form, patternProperties, items, prefixItems and item
  counts, enum and const, anyOf, oneOf, allOf, $ref into $defs (recursive too), nullable,
  string lengths, patterns and formats, integer and number bounds (exclusive too);
- "refuse/*": one schema per keyword loom refuses; the converter must name it.

JSONSchemaBench's ~9,500 real schemas are not in the repository (benches/schema_coverage.sh
runs them from a checkout). Run: python3 tests/data/schemas/make_corpus.py"""
import json
import os
import random

rng = random.Random(28)
FORMATS = ["date", "time", "date-time", "uuid", "email", "ipv4", "ipv6", "hostname", "uri"]
PATTERNS = ["^[A-Z]{3}-[0-9]{4}$", "^[a-z][a-z0-9_]{2,15}$", "^\\+?[0-9]{7,12}$", "^(red|green|blue)$",
            "^[0-9a-f]{6}$", "^v[0-9]+\\.[0-9]+\\.[0-9]+$", "[aeiou]{2}", "^[^@\\s]+@[^@\\s]+\\.[a-z]{2,}$"]
WORDS = ["id", "name", "title", "count", "price", "tags", "items", "owner", "created", "status", "score", "email",
         "enabled", "notes", "parent", "children", "limit", "offset", "unit", "color"]


def leaf():
    k = rng.randrange(9)
    if k == 0:
        return {"type": "string"}
    if k == 1:
        s = {"type": "string", "minLength": rng.randrange(0, 4)}
        if rng.random() < 0.8:
            s["maxLength"] = s["minLength"] + rng.randrange(0, 20)
        return s
    if k == 2:
        return {"type": "string", "format": rng.choice(FORMATS)}
    if k == 3:
        return {"type": "string", "pattern": rng.choice(PATTERNS)}
    if k == 4:
        s = {"type": "integer"}
        lo = rng.randrange(-1000, 1000)
        if rng.random() < 0.7:
            s["exclusiveMinimum" if rng.random() < 0.3 else "minimum"] = lo
        if rng.random() < 0.7:
            s["exclusiveMaximum" if rng.random() < 0.3 else "maximum"] = lo + rng.randrange(2, 5000)
        return s
    if k == 5:
        s = {"type": "number"}
        if rng.random() < 0.6:
            s["minimum"] = rng.choice([0, -1, -100, 1, 10])
        if rng.random() < 0.5:
            s["exclusiveMaximum" if rng.random() < 0.4 else "maximum"] = s.get("minimum", 0) + rng.choice([1, 5, 100])
        return s
    if k == 6:
        return rng.choice([{"type": "boolean"}, {"type": "null"}, {"type": ["string", "null"], "maxLength": 8}])
    if k == 7:
        return {"enum": rng.sample(["a", "b", "c", 1, 2.5, True, None, "long value", {"k": [1, 2]}], rng.randrange(1, 5))}
    return {"const": rng.choice(["fixed", 42, False, None, [1, "x"]])}


def node(depth, defs):
    if depth >= 3 or rng.random() < 0.3:
        s = leaf()
    else:
        k = rng.randrange(7)
        if k <= 2:
            s = obj(depth, defs)
        elif k == 3:
            s = {"type": "array", "items": node(depth + 1, defs)}
            if rng.random() < 0.6:
                s["minItems"] = rng.randrange(0, 3)
            if rng.random() < 0.6:
                s["maxItems"] = s.get("minItems", 0) + rng.randrange(0, 4)
            if rng.random() < 0.2:
                s["prefixItems"] = [leaf() for _ in range(rng.randrange(1, 3))]
                if rng.random() < 0.5:
                    s["items"] = False
                    s["minItems"] = min(s.get("minItems", 0), len(s["prefixItems"]))
                    s.pop("maxItems", None)
        elif k == 4:
            s = {rng.choice(["anyOf", "oneOf"]): [node(depth + 1, defs) for _ in range(rng.randrange(2, 4))]}
            if "oneOf" in s:  # distinct branches: oneOf must match exactly one
                s = {"oneOf": [{"type": "string", "maxLength": 5}, {"type": "integer"}, {"type": "boolean"}][:rng.randrange(2, 4)]}
        elif k == 5:
            a, b = obj(depth + 1, defs), obj(depth + 1, defs)
            for key in list(b.get("properties", {})):
                if key in a.get("properties", {}):
                    del b["properties"][key]
                    b["required"] = [r for r in b.get("required", []) if r != key]
            a.pop("additionalProperties", None), b.pop("additionalProperties", None)
            s = {"allOf": [a, b]}
        else:
            name = f"d{len(defs)}"
            defs[name] = node(depth + 1, defs)
            s = {"$ref": f"#/$defs/{name}"}
    if rng.random() < 0.08 and "$ref" not in s:
        s["nullable"] = True
    return s


def obj(depth, defs):
    keys = rng.sample(WORDS, rng.randrange(1, 6))
    s = {"type": "object", "properties": {k: node(depth + 1, defs) for k in keys}}
    req = [k for k in keys if rng.random() < 0.6]
    if req:
        s["required"] = req
    r = rng.random()
    if r < 0.5:
        s["additionalProperties"] = False
    elif r < 0.6:
        s["additionalProperties"] = leaf()
    elif r < 0.7:
        s["patternProperties"] = {"^x_[a-z]{1,6}$": leaf()}
        s["additionalProperties"] = False
    return s


REAL = {
    "person": {"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 40},
                                                "age": {"type": "integer", "minimum": 0, "maximum": 150},
                                                "email": {"type": "string", "format": "email"}},
               "required": ["name", "age"], "additionalProperties": False},
    "weather_tool": {"type": "object", "properties": {"location": {"type": "string", "description": "City and country"},
                                                      "unit": {"enum": ["celsius", "fahrenheit"]},
                                                      "days": {"type": "integer", "minimum": 1, "maximum": 14}},
                     "required": ["location"]},
    "order": json.load(open(os.path.join(os.path.dirname(__file__), "../../../benches/structured/order.schema.json"))),
    "tree": {"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
                                                                  "children": {"type": "array", "maxItems": 3,
                                                                               "items": {"$ref": "#/$defs/node"}}},
                                "required": ["value"]}}, "$ref": "#/$defs/node"},
    "event": {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"},
                                               "at": {"type": "string", "format": "date-time"},
                                               "kind": {"const": "click"},
                                               "coords": {"type": "array", "prefixItems": [{"type": "number"},
                                                                                           {"type": "number"}],
                                                          "items": False, "minItems": 2}},
              "required": ["id", "at", "kind"]},
    "config": {"type": "object", "properties": {"host": {"type": "string", "format": "hostname"},
                                                "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                                                "tls": {"type": "boolean"},
                                                "allow": {"type": "array", "items": {"type": "string", "format": "ipv4"}},
                                                "env": {"type": "object", "additionalProperties": {"type": "string"}}},
               "required": ["host", "port"], "additionalProperties": False},
    "search": {"type": "object", "properties": {"query": {"type": "string", "maxLength": 200},
                                                "filters": {"type": "array", "items": {"anyOf": [
                                                    {"type": "object", "properties": {"field": {"type": "string"},
                                                                                      "equals": {"type": ["string", "number", "boolean"]}},
                                                     "required": ["field", "equals"], "additionalProperties": False},
                                                    {"type": "object", "properties": {"field": {"type": "string"},
                                                                                      "min": {"type": "number"}, "max": {"type": "number"}},
                                                     "required": ["field"], "additionalProperties": False}]}},
                                                "limit": {"type": "integer", "minimum": 1, "maximum": 100}},
               "required": ["query"]},
    "shape": {"oneOf": [{"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number", "exclusiveMinimum": 0}},
                         "required": ["kind", "r"], "additionalProperties": False},
                        {"type": "object", "properties": {"kind": {"const": "rect"}, "w": {"type": "number", "minimum": 0},
                                                           "h": {"type": "number", "minimum": 0}},
                         "required": ["kind", "w", "h"], "additionalProperties": False}]},
    "labels": {"type": "object", "patternProperties": {"^[a-z]+(\\.[a-z]+)*$": {"type": "string", "maxLength": 30}},
               "additionalProperties": False},
    "invoice_lines": {"type": "array", "minItems": 1, "maxItems": 5, "items": {
        "type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
                                         "qty": {"type": "integer", "exclusiveMinimum": 0},
                                         "price": {"type": "number", "minimum": 0}},
        "required": ["sku", "qty", "price"], "additionalProperties": False}},
    "rgb": {"type": "array", "prefixItems": [{"type": "integer", "minimum": 0, "maximum": 255}] * 3, "items": False,
            "minItems": 3},
    "nullable_fields": {"type": "object", "properties": {"middle_name": {"type": "string", "nullable": True},
                                                         "nickname": {"type": ["string", "null"]}},
                        "required": ["middle_name", "nickname"], "additionalProperties": False},
    "draft4_bounds": {"$schema": "http://json-schema.org/draft-04/schema#", "type": "number", "minimum": 0,
                      "maximum": 1, "exclusiveMaximum": True},
    "any_json": {},
    "allof_merge": {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                              {"properties": {"b": {"type": "string", "maxLength": 4}}, "required": ["b"]}]},
    "ref_siblings": {"$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
                     "$ref": "#/$defs/base", "description": "a base with a note"},
    "ip_pair": {"type": "object", "properties": {"v4": {"type": "string", "format": "ipv4"},
                                                 "v6": {"type": "string", "format": "ipv6"}},
                "required": ["v4", "v6"], "additionalProperties": False},
    "schedule": {"type": "object", "properties": {"date": {"type": "string", "format": "date"},
                                                  "start": {"type": "string", "format": "time"},
                                                  "repeat": {"enum": ["daily", "weekly", None]}},
                 "required": ["date", "start"], "additionalProperties": False},
}

REFUSE = {
    "propertyNames": {"type": "object", "propertyNames": {"maxLength": 3}},
    "minProperties": {"type": "object", "minProperties": 2},
    "maxProperties": {"type": "object", "maxProperties": 1},
    "contains": {"type": "array", "contains": {"type": "integer"}},
    "not": {"not": {"type": "string"}},
    "if": {"if": {"type": "string"}, "then": {"maxLength": 3}},
    "dependentRequired": {"type": "object", "dependentRequired": {"a": ["b"]}},
    "dependencies": {"type": "object", "dependencies": {"a": ["b"]}},
    "unevaluatedProperties": {"type": "object", "unevaluatedProperties": False},
    "multipleOf": {"type": "integer", "multipleOf": 5},
    "uniqueItems": {"type": "array", "uniqueItems": True},
    "format": {"type": "string", "format": "duration"},
    "minimum": {"type": "number", "minimum": 0.5},
    "pattern": {"type": "string", "pattern": "^(?!x)"},
    "ref_other_document": {"$ref": "https://example.com/other.json"},
    "false_schema": {"type": "object", "properties": {"a": False}, "required": ["a"]},
    "allOf_conflict": {"allOf": [{"type": "string"}, {"type": "integer"}]},
    "enum_of_other_type": {"type": "object", "enum": ["a", "b"]},
}

with open(os.path.join(os.path.dirname(__file__), "corpus.jsonl"), "w") as f:
    for name, s in REAL.items():
        f.write(json.dumps({"name": f"real/{name}", "schema": s, "expect": "ok"}) + "\n")
    for i in range(200):
        defs = {}
        s = node(0, defs)
        if defs:
            s["$defs"] = defs
        f.write(json.dumps({"name": f"gen/{i:03d}", "schema": s, "expect": "ok"}) + "\n")
    for name, s in REFUSE.items():
        f.write(json.dumps({"name": f"refuse/{name}", "schema": s, "expect": "refuse"}) + "\n")
