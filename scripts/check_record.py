#!/usr/bin/env python3
"""check_record.py - checks run records (the examples' --json FILE) against the schema.

    python3 scripts/check_record.py RECORD.json...      # "RECORD.json: ok" or the errors

The schema is docs/run-record.schema.json (JSON Schema 2020-12). This checker implements the
part of JSON Schema the schema uses ($ref to $defs, type, const, enum, required, properties,
additionalProperties, items, minimum, maximum, pattern, oneOf, anyOf, not) and refuses a
schema that uses any other keyword, so the schema cannot silently say more than is checked.
After the schema it checks what a schema cannot state: every series array has `points`
entries, intervals do not end before they start, an epoch has no more steps than an epoch
holds. Standard library only (Python 3.7+), exit status 1 when a record is invalid.
"""
import json
import os
import re
import sys

SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs",
                           "run-record.schema.json")
KNOWN = {"$schema", "$id", "title", "description", "$defs", "$ref", "type", "const", "enum",
         "required", "properties", "additionalProperties", "items", "minimum", "maximum",
         "pattern", "oneOf", "anyOf", "not"}


def load_schema(path=SCHEMA_PATH):
    with open(path) as f:
        schema = json.load(f)

    def walk(node, where):  # node is a schema
        unknown = set(node) - KNOWN
        if unknown:
            raise ValueError("schema uses unsupported keywords %s at %s" % (sorted(unknown), where))
        for group in ("$defs", "properties"):
            for k, sub in node.get(group, {}).items():
                walk(sub, "%s/%s/%s" % (where, group, k))
        for k in ("additionalProperties", "items", "not"):
            if isinstance(node.get(k), dict):
                walk(node[k], where + "/" + k)
        for k in ("oneOf", "anyOf"):
            for i, sub in enumerate(node.get(k, [])):
                walk(sub, "%s/%s/%d" % (where, k, i))
    walk(schema, "#")
    return schema


def _type_ok(v, t):
    if t == "null":
        return v is None
    if t == "boolean":
        return isinstance(v, bool)
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool) or (isinstance(v, float) and v.is_integer())
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "string":
        return isinstance(v, str)
    if t == "array":
        return isinstance(v, list)
    if t == "object":
        return isinstance(v, dict)
    raise ValueError("unknown type " + t)


class Checker:
    def __init__(self, schema):
        self.root = schema

    def resolve(self, ref):
        if not ref.startswith("#/"):
            raise ValueError("only local references are supported: " + ref)
        node = self.root
        for part in ref[2:].split("/"):
            node = node[part]
        return node

    def errors(self, v, s, path="$"):
        """Every violation of schema s by value v, as 'path: message' strings."""
        if "$ref" in s:
            return self.errors(v, self.resolve(s["$ref"]), path)
        out = []
        if "type" in s:
            types = s["type"] if isinstance(s["type"], list) else [s["type"]]
            if not any(_type_ok(v, t) for t in types):
                return ["%s: %s is not of type %s" % (path, json.dumps(v)[:60], "/".join(types))]
        if "const" in s and v != s["const"]:
            out.append("%s: %s is not %s" % (path, json.dumps(v)[:60], json.dumps(s["const"])))
        if "enum" in s and v not in s["enum"]:
            out.append("%s: %s is not one of %s" % (path, json.dumps(v)[:60], s["enum"]))
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if "minimum" in s and v < s["minimum"]:
                out.append("%s: %s is below the minimum %s" % (path, v, s["minimum"]))
            if "maximum" in s and v > s["maximum"]:
                out.append("%s: %s is above the maximum %s" % (path, v, s["maximum"]))
        if isinstance(v, str) and "pattern" in s and not re.search(s["pattern"], v):
            out.append("%s: %s does not match %s" % (path, json.dumps(v), s["pattern"]))
        if isinstance(v, dict):
            for k in s.get("required", []):
                if k not in v:
                    out.append("%s: required field '%s' is missing" % (path, k))
            props = s.get("properties", {})
            for k, item in v.items():
                if k in props:
                    out += self.errors(item, props[k], "%s.%s" % (path, k))
                elif "additionalProperties" in s:
                    ap = s["additionalProperties"]
                    if ap is False:
                        out.append("%s: field '%s' is not allowed" % (path, k))
                    elif isinstance(ap, dict):
                        out += self.errors(item, ap, "%s.%s" % (path, k))
        if isinstance(v, list) and "items" in s:
            for i, item in enumerate(v):
                out += self.errors(item, s["items"], "%s[%d]" % (path, i))
        if "anyOf" in s:
            branches = [self.errors(v, b, path) for b in s["anyOf"]]
            if all(branches):
                out += min(branches, key=len)
        if "oneOf" in s:
            branches = [self.errors(v, b, path) for b in s["oneOf"]]
            ok = sum(1 for b in branches if not b)
            if ok == 0:
                out += min(branches, key=len)
            elif ok > 1:
                out.append("%s: matches %d of the oneOf alternatives" % (path, ok))
        if "not" in s and not self.errors(v, s["not"], path):
            out.append("%s: matches a form it must not (%s)" % (path, json.dumps(s["not"])))
        return out


def semantic_errors(rec):
    """What the schema cannot state."""
    out = []
    for i, dev in enumerate(rec.get("devices") or []):
        mon = dev.get("monitor") if isinstance(dev, dict) else None
        ser = mon.get("series") if isinstance(mon, dict) else None
        if isinstance(ser, dict):
            n = ser.get("points")
            for k, arr in ser.items():
                if isinstance(arr, list) and len(arr) != n:
                    out.append("$.devices[%d].monitor.series.%s: %d entries, points is %s" % (i, k, len(arr), n))
            t = [x for x in ser.get("t_s", []) if x is not None]
            if any(b < a for a, b in zip(t, t[1:])):
                out.append("$.devices[%d].monitor.series.t_s: times go backwards" % i)
    res = rec.get("results")
    if isinstance(res, dict):
        rows = [("epochs", e) for e in res.get("epochs", []) or []] + \
               [("configs", c) for c in res.get("configs", []) or []]
        for j, (kind, e) in enumerate(rows):
            if not isinstance(e, dict):
                continue
            if isinstance(e.get("t_start_s"), (int, float)) and isinstance(e.get("t_end_s"), (int, float)) \
                    and e["t_end_s"] < e["t_start_s"]:
                out.append("$.results.%s: an interval ends before it starts (%s > %s)"
                           % (kind, e["t_start_s"], e["t_end_s"]))
            if kind == "epochs" and isinstance(e.get("steps"), int) and isinstance(e.get("steps_per_epoch"), int) \
                    and e["steps"] > e["steps_per_epoch"]:
                out.append("$.results.epochs: epoch %s has %d steps of %d" % (e.get("epoch"), e["steps"],
                                                                          e["steps_per_epoch"]))
    return out


def validate(rec, schema=None):
    """Every error of record rec (an empty list when it is valid)."""
    schema = schema or load_schema()
    errs = Checker(schema).errors(rec, schema)
    return errs + (semantic_errors(rec) if not errs else [])


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    schema = load_schema()
    bad = 0
    for path in argv[1:]:
        try:
            with open(path) as f:
                rec = json.load(f)
        except (OSError, ValueError) as e:
            print("%s: cannot read: %s" % (path, e))
            bad += 1
            continue
        errs = validate(rec, schema)
        if errs:
            bad += 1
            print("%s: %d error%s" % (path, len(errs), "" if len(errs) == 1 else "s"))
            for e in errs[:20]:
                print("  " + e)
        else:
            print("%s: ok" % path)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
