#!/usr/bin/env python3
"""make_seeds.py - the hand-made seeds of the fuzz corpora (run by scripts/fuzz.sh --seeds).

  make_seeds.py <corpus root>     (fuzz/corpus)

cifar10/seed-*: directory layouts for fuzz_cifar10 (see the input format at the top of
fuzz/fuzz_cifar10.c): valid train/test/single-file datasets with class names, and one case
per refusal (empty file, truncated record, label 10, no batch, a directory or FIFO under a
batch name, odd batches.meta.txt files).

safetensors/edge-*: corruptions of seed-checkpoint.safetensors (written by fuzz/gen_seeds.c,
which must have run first), each breaking one rule: header length, JSON, names, dtypes,
shapes, offsets, and the checkpoint's own entries (lr, step count, scaler state, momentum
buffers, module names, dtypes and shapes).

regress-*: the regression inputs of findings that are easiest written by hand (the others
are inputs the fuzzer saved, copied in as regress-<what>). Existing files of these names are
rewritten; merged inputs (named by their SHA-1) stay.
"""
import json
import os
import struct
import sys

REC = 3073
NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def cifar_input(ctrl, mask, meta=b"", records=()):
    payload = b"".join(records)
    return bytes([ctrl, mask]) + struct.pack("<H", len(meta)) + meta + payload


def record(label, seed):
    px = bytes(((seed * 131 + i * 7) ^ (i >> 5)) & 0xFF for i in range(3072))
    return bytes([label]) + px


def cifar_seeds():
    meta = ("\n".join(NAMES) + "\n").encode()
    odd_meta = (b"  airplane \r\n\n\t\nauto\x01mobile\n" + b"x" * 80 + b"\n\x00\nlast")
    big_meta = b"".join(b"name%04d\n" % i for i in range(600))  # past the 4096 bytes read
    T, FILE, TRIM, FIX, META, PLANT, FIFO, MSPECIAL = 1, 2, 4, 8, 16, 32, 64, 128
    r = [record(i % 10, i) for i in range(6)]
    return {
        "seed-train-one-batch": cifar_input(TRIM | META, 0x01, meta, r[:2]),
        "seed-train-three-batches": cifar_input(TRIM | META, 0x15, meta, r[:3]),
        "seed-train-all-and-test": cifar_input(TRIM | FIX, 0x3F, b"", r[:6]),
        "seed-test": cifar_input(T | TRIM | META, 0x20, odd_meta, r[:1]),
        "seed-file": cifar_input(FILE | TRIM | META, 0x04, meta, r[1:3]),
        "seed-big-meta": cifar_input(TRIM | META, 0x01, big_meta, r[:1]),
        "seed-label-10": cifar_input(TRIM, 0x01, b"", [r[0], bytes([10]) + r[1][1:]]),
        "seed-truncated-record": cifar_input(0, 0x01, b"", [r[0], r[1][:100]]),
        "seed-empty-batch": cifar_input(TRIM, 0x03, b"", [r[0][:10]]),
        "seed-no-batch": cifar_input(META, 0x20, meta, r[:1]),
        "seed-test-missing": cifar_input(T | TRIM, 0x01, b"", r[:1]),
        "seed-dir-as-batch": cifar_input(TRIM | PLANT, 0x01, b"", r[:1]),
        "seed-fifo-as-test": cifar_input(T | TRIM | PLANT | FIFO, 0x00, b"", r[:1]),
        "seed-file-fifo": cifar_input(FILE | PLANT | FIFO, 0x00, b"", []),
        "seed-meta-fifo": cifar_input(TRIM | META | FIFO | MSPECIAL, 0x01, b"", r[:1]),
        "seed-meta-dir": cifar_input(TRIM | META | MSPECIAL, 0x01, b"", r[:1]),
        # issue 20 item 11: symlinks under batch names (MSPECIAL without META: a symlink)
        "seed-dangling-batch-2": cifar_input(TRIM | PLANT | MSPECIAL, 0x01, b"", r[:2]),
        "seed-loop-test-batch": cifar_input(T | TRIM | PLANT | FIFO | MSPECIAL, 0x00, b"", r[:1]),
        "seed-dangling-file": cifar_input(FILE | PLANT | MSPECIAL, 0x00, b"", []),
        "seed-empty-input": b"",
        "seed-one-byte": b"\x1c",
    }


# ---- safetensors ----

def st_parse(buf):
    (hlen,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + hlen])
    return header, buf[8 + hlen:]


def st_file(header_text, data=b"", hlen=None):
    h = header_text.encode() if isinstance(header_text, str) else header_text
    return struct.pack("<Q", len(h) if hlen is None else hlen) + h + data


def st_write(entries, meta=None):
    """entries: list of (name, dtype, shape, bytes); offsets laid out contiguously."""
    hdr = {}
    if meta is not None:
        hdr["__metadata__"] = meta
    data = b""
    for name, dtype, shape, raw in entries:
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    return st_file(json.dumps(hdr, separators=(",", ":")), data)


def st_entries(buf):
    header, data = st_parse(buf)
    out = []
    for k, v in header.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        out.append([k, v["dtype"], v["shape"], data[b:e]])
    return out, header.get("__metadata__")


def replace(entries, name, dtype=None, shape=None, raw=None):
    out = []
    for n, d, s, r in entries:
        if n == name:
            d = d if dtype is None else dtype
            s = s if shape is None else shape
            r = r if raw is None else raw
        out.append([n, d, s, r])
    return out


def without(entries, name):
    return [e for e in entries if e[0] != name]


def st_write_keys(entries, meta=None, keys=None, fields=None):
    """st_write with some names written as raw JSON key text (keys: name -> text between the
    quotes, escapes kept as written) or some entries' fields as raw text (fields: name ->
    the object's text)."""
    keys, fields = keys or {}, fields or {}
    parts, data = [], b""
    if meta is not None:
        parts.append(b'"__metadata__":' + json.dumps(meta, separators=(",", ":")).encode())
    for name, dtype, shape, raw in entries:
        obj = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        text = fields.get(name, json.dumps(obj, separators=(",", ":")))
        key = keys.get(name, json.dumps(name)[1:-1])
        k = key if isinstance(key, bytes) else key.encode()
        parts.append(b'"' + k + b'":' + (text if isinstance(text, bytes) else text.encode()))
        data += raw
    return st_file(b"{" + b",".join(parts) + b"}", data)


def key_edges(ents, meta):
    """Issue 20 item 9 as a class: names that readers could read differently (cJSON decodes
    \u0000 to a NUL that ends a C string; it keeps the first of two equal fields where
    Python and serde keep the last), and names written with escapes that are the same."""
    fc = next(e for e in ents if e[0] == "fc.bias")
    off = sum(len(e[3]) for e in ents[:ents.index(fc)])
    f16 = '{"dtype":"F16","dtype":"F32","shape":[3],"data_offsets":[%d,%d]}' % (off, off + 12)
    # the one cJSON accepted: the first field is the one that fits the data
    f32_first = '{"dtype":"F32","dtype":"F16","shape":[3],"data_offsets":[%d,%d]}' % (off, off + 12)
    twice_shape = '{"dtype":"F32","shape":[3],"shape":[1,3],"data_offsets":[%d,%d]}' % (off, off + 12)
    extra = ents + [["x", "U8", [1], b"\x01"]]
    return {
        "edge-key-nul-escape": st_write_keys(ents, meta, keys={"fc.bias": "fc.bias\\u0000evil"}),
        "edge-key-raw-nul": st_write_keys(ents, meta, keys={"fc.bias": b"fc.bias\x00evil"}),
        "edge-key-control-escape": st_write_keys(ents, meta, keys={"fc.bias": "fc.bias\\u0007"}),
        "edge-key-raw-control": st_write_keys(ents, meta, keys={"fc.bias": b"fc.bias\x01"}),
        "edge-key-newline-escape": st_write_keys(ents, meta, keys={"fc.bias": "fc.bias\\n"}),
        "edge-key-del": st_write_keys(ents, meta, keys={"fc.bias": b"fc.bias\x7f"}),
        "edge-key-c1-escape": st_write_keys(ents, meta, keys={"fc.bias": "fc.bias\\u0085"}),
        "edge-key-escaped-same": st_write_keys(ents, meta, keys={"fc.bias": "\\u0066c.bi\\u0061s"}),
        "edge-key-escaped-slash": st_write_keys(ents, meta, keys={"fc.bias": "fc.bias\\/"}),
        "edge-key-surrogate-pair": st_write_keys(extra, meta, keys={"x": "\\ud83d\\ude00"}),
        "edge-key-lone-surrogate": st_write_keys(extra, meta, keys={"x": "\\ud800"}),
        "edge-key-utf8": st_write_keys(extra, meta, keys={"x": "caf\u00e9".encode()}),
        "edge-field-twice": st_write_keys(ents, meta, fields={"fc.bias": f16}),
        "edge-shape-twice": st_write_keys(ents, meta, fields={"fc.bias": twice_shape}),
        "edge-meta-key-twice": st_file('{"__metadata__":{"format":"pt","format":"np"}}'),
        "edge-meta-value-nul": st_file('{"__metadata__":{"format":"p\\u0000t"}}'),
        "edge-meta-key-control": st_file('{"__metadata__":{"for\\u0001mat":"pt"}}'),
        "edge-meta-value-newline": st_file('{"__metadata__":{"note":"two\\nlines"}}'),
        # issue 20 item 8: a header that covers none of the data after it
        "edge-empty-header-with-data": st_file("{}", b"\0" * 4096),
        # issue 20 items 3, 6: positions and counts
        "edge-train-step-negative": st_write(replace(ents, "train.step", raw=struct.pack("<q", -5)), meta),
        "edge-train-epoch-negative": st_write(replace(ents, "train.epoch", raw=struct.pack("<q", -1)), meta),
        "edge-train-step-max": st_write(replace(ents, "train.step", raw=struct.pack("<q", 2**63 - 1)), meta),
        # the finding itself: a NUL inside a module name (loaded as "fc.weight" before)
        "regress-key-nul": st_write_keys(ents, meta, keys={"fc.weight": "fc.weight\\u0000evil"}),
        "regress-field-twice": st_write_keys(ents, meta, fields={"fc.bias": f32_first}),
    }


def safetensors_edges(base):
    ents, meta = st_entries(base)
    header, data = st_parse(base)
    f64 = lambda v: struct.pack("<d", v)
    i64 = lambda v: struct.pack("<q", v)
    i32 = lambda v: struct.pack("<i", v)
    hdr_text = base[8:8 + struct.unpack("<Q", base[:8])[0]].decode()
    conv = next(e for e in ents if e[0] == "conv.weight")
    moved = replace(replace(ents, "fc.bias", raw=struct.pack("<3f", 0.5, -0.25, 2.0)),
                    "optimizer.step_count", raw=i64(99))
    cases = {
        # header length and framing
        "edge-7-bytes": base[:7],
        "edge-hlen-zero": st_file(b"", b""),
        "edge-hlen-past-end": st_file(hdr_text, data, hlen=len(base)),
        "edge-hlen-max": st_file(hdr_text, data, hlen=2**64 - 1),
        "edge-hlen-over-limit": st_file(b"{" + b" " * 16, b"", hlen=100000001),
        "edge-truncated-data": base[:-5],
        "edge-trailing-byte": base + b"\x00",
        "edge-header-not-object": st_file("[1,2]"),
        "edge-header-garbage-after": st_file("{} x"),
        "edge-header-nul": st_file("{}\x00 "),
        "edge-header-padded": st_file("{}" + " \t\r\n" * 4),
        "edge-empty-object": st_file("{}"),
        "edge-bad-json": st_file('{"a":{"dtype":"F32",'),
        "edge-deep-json": st_file("{\"a\":" + "[" * 3000 + "]" * 3000 + "}"),
        "edge-invalid-utf8-name": st_file(b'{"n\xe9\xff":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
                                          b"\x01"),
        "edge-empty-name": st_write([["", "U8", [2], b"\x01\x02"]]),
        # __metadata__
        "edge-meta-number": st_write(ents[:1], meta={"format": 1}),
        "edge-meta-twice": st_file('{"__metadata__":{},"__metadata__":{}}'),
        "edge-meta-not-object": st_file('{"__metadata__":"pt"}'),
        # entries
        "edge-duplicate-name": st_file('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                                       '"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"\x01\x02"),
        "edge-entry-not-object": st_file('{"a":[1]}'),
        "edge-dtype-unknown": st_write(replace(ents, "conv.weight", dtype="F33")),
        "edge-dtype-number": st_file('{"a":{"dtype":5,"shape":[1],"data_offsets":[0,1]}}', b"\x01"),
        "edge-dtype-f64": st_write([["x", "F64", [2], f64(1.0) + f64(2.0)]]),
        "edge-dtype-bool": st_write([["x", "BOOL", [3], b"\x01\x00\x01"]]),
        "edge-dtype-f8": st_write([["x", "F8_E4M3", [2], b"\x01\x02"]]),
        "edge-shape-9-dims": st_write([["x", "U8", [1] * 9, b"\x01"]]),
        "edge-shape-8-dims": st_write([["x", "U8", [1] * 8, b"\x01"]]),
        "edge-shape-negative": st_file('{"x":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}'),
        "edge-shape-fraction": st_file('{"x":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}', b"\x01"),
        "edge-shape-string": st_file('{"x":{"dtype":"U8","shape":["1"],"data_offsets":[0,1]}}', b"\x01"),
        "edge-shape-2p53": st_file('{"x":{"dtype":"U8","shape":[9007199254740993],"data_offsets":[0,1]}}', b"\x01"),
        "edge-shape-overflow": st_file('{"x":{"dtype":"F32","shape":[4294967296,4294967296,16],'
                                       '"data_offsets":[0,4]}}', b"\0" * 4),
        "edge-shape-zero-huge": st_file('{"x":{"dtype":"I64","shape":[0,9007199254740992,9007199254740992,'
                                        '9007199254740992],"data_offsets":[0,0]}}'),
        "edge-shape-exp": st_file('{"x":{"dtype":"U8","shape":[1e0],"data_offsets":[0,1]}}', b"\x01"),
        "edge-offsets-reversed": st_file('{"x":{"dtype":"U8","shape":[0],"data_offsets":[1,0]}}', b"\x01"),
        "edge-offsets-past-end": st_file('{"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"\x01"),
        "edge-offsets-three": st_file('{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1,1]}}', b"\x01"),
        "edge-offsets-missing": st_file('{"x":{"dtype":"U8","shape":[1]}}', b"\x01"),
        "edge-offsets-negative": st_file('{"x":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}', b"\x01"),
        "edge-offsets-overlap": st_file('{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},'
                                        '"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}', b"\x01\x02\x03"),
        "edge-offsets-gap": st_file('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                                    '"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}', b"\x01\x02\x03"),
        "edge-offsets-wrong-size": st_file('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,3]}}', b"\x01\x02\x03"),
        "edge-zero-size-entries": st_file('{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},'
                                          '"b":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}'),
        # checkpoint entries
        "edge-module-missing-entry": st_write(without(ents, "fc.bias"), meta),
        "edge-module-extra-entry": st_write(ents + [["extra", "U8", [1], b"\x01"]], meta),
        "edge-module-wrong-dtype": st_write(replace(ents, "conv.weight", dtype="F16",
                                                    raw=conv[3][:len(conv[3]) // 2]), meta),
        "edge-module-wrong-shape": st_write(replace(ents, "conv.weight", shape=[4, 3, 9]), meta),
        "edge-tracked-f64": st_write(replace(ents, "bn.num_batches_tracked", dtype="F64"), meta),
        "edge-lr-nan": st_write(replace(ents, "optimizer.lr", raw=f64(float("nan"))), meta),
        "edge-lr-negative": st_write(replace(ents, "optimizer.lr", raw=f64(-0.1)), meta),
        "edge-lr-f32": st_write(replace(ents, "optimizer.lr", dtype="F32", raw=struct.pack("<f", 0.25)), meta),
        "edge-lr-i64": st_write(replace(ents, "optimizer.lr", dtype="I64", raw=i64(1)), meta),
        "edge-lr-two-values": st_write(replace(ents, "optimizer.lr", shape=[2], raw=f64(0.1) * 2), meta),
        "edge-step-count-negative": st_write(replace(ents, "optimizer.step_count", raw=i64(-1)), meta),
        "edge-step-count-i32": st_write(replace(ents, "optimizer.step_count", dtype="I32", raw=i32(9)), meta),
        "edge-step-count-max": st_write(replace(ents, "optimizer.step_count", raw=i64(2**63 - 1)), meta),
        "edge-optimizer-unknown-entry": st_write(ents + [["optimizer.foo", "F32", [], b"\0" * 4]], meta),
        "edge-momentum-of-buffer": st_write(ents + [["optimizer.momentum_buffer.bn.running_mean", "F32", [4],
                                                     b"\0" * 16]], meta),
        "edge-momentum-unknown-param": st_write(ents + [["optimizer.momentum_buffer.nope", "F32", [1],
                                                         b"\0" * 4]], meta),
        "edge-momentum-wrong-shape": st_write(replace(ents, "optimizer.momentum_buffer.fc.bias", shape=[1, 3]), meta),
        "edge-momentum-missing": st_write(without(ents, "optimizer.momentum_buffer.conv.weight"), meta),
        "edge-scale-zero": st_write(replace(ents, "scaler.scale", raw=struct.pack("<f", 0.0)), meta),
        "edge-scale-inf": st_write(replace(ents, "scaler.scale", raw=struct.pack("<f", float("inf"))), meta),
        "edge-growth-factor-one": st_write(replace(ents, "scaler.growth_factor", raw=f64(1.0)), meta),
        "edge-backoff-one": st_write(replace(ents, "scaler.backoff_factor", raw=f64(1.0)), meta),
        "edge-growth-interval-zero": st_write(replace(ents, "scaler.growth_interval", raw=i32(0)), meta),
        "edge-growth-interval-i64-big": st_write(replace(ents, "scaler.growth_interval", dtype="I64",
                                                         raw=i64(2**40)), meta),
        "edge-tracker-negative": st_write(replace(ents, "scaler._growth_tracker", raw=i32(-3)), meta),
        "edge-scaler-missing": st_write(without(ents, "scaler._growth_tracker"), meta),
        "edge-train-epoch-missing": st_write(without(ents, "train.epoch"), meta),
        "edge-train-step-f64": st_write(replace(ents, "train.step", dtype="F64", raw=f64(3.0)), meta),
        "edge-train-epoch-i32": st_write(replace(ents, "train.epoch", dtype="I32", raw=i32(-5)), meta),
        "edge-reordered-data": st_write(list(reversed(ents)), meta),
        # findings (docs/reliability.md): F64 values the fp32 device state cannot hold
        # (other values than the baseline's, so that a partial load shows)
        "regress-scale-f64-overflow": st_write(replace(moved, "scaler.scale", dtype="F64", raw=f64(1e39)), meta),
        "regress-scale-f64-underflow": st_write(replace(moved, "scaler.scale", dtype="F64", raw=f64(1e-50)), meta),
        "regress-lr-f64-overflow": st_write(replace(moved, "optimizer.lr", raw=f64(1e39)), meta),
    }
    cases.update(key_edges(ents, meta))
    return cases


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    cdir, sdir = os.path.join(root, "cifar10"), os.path.join(root, "safetensors")
    os.makedirs(cdir, exist_ok=True)
    os.makedirs(sdir, exist_ok=True)
    for name, blob in cifar_seeds().items():
        with open(os.path.join(cdir, name), "wb") as f:
            f.write(blob)
    base_path = os.path.join(sdir, "seed-checkpoint.safetensors")
    with open(base_path, "rb") as f:
        base = f.read()
    for name, blob in safetensors_edges(base).items():
        with open(os.path.join(sdir, name + ".safetensors"), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    main()
