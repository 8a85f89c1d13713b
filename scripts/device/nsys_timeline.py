#!/usr/bin/env python3
"""nsys_timeline.py - what one replayed training step does on the GPU's timeline.

Reads the CSV of `nsys stats -r cuda_gpu_trace -f csv` for a run traced with
`nsys profile --cuda-graph-trace=node` (each graph node is a row), takes the last step
(the rows after the last gap longer than --gap-us: the benchmarks pause between timed
blocks and steps are back to back, so use a run of one step per block), and prints:
  - the step's span, the time some kernel or copy was running (the union of the rows'
    intervals), and the rest: the idle time between nodes that fewer or concurrent
    kernels would recover, where Nsight Compute's per-kernel sums cannot show it;
  - the rows per stream (a captured step with the side stream has two);
  - time and count per kind of kernel (BatchNorm, convolution/GEMM, attention, the rest
    by name), summed over rows (overlapping rows count twice).
No dependency beyond Python's standard library (the machine's python3 has numpy, but
/usr/bin/python3 may not).
"""
import argparse
import collections
import csv
import sys


def column(keys, *prefixes):
    for p in prefixes:
        for k in keys:
            if k.lower().startswith(p):
                return k
    return None


KINDS = (
    ("batchnorm", ("bn_", "batchnorm", "batch_norm")),
    ("attention", ("flash", "sdpa", "fmha", "attn")),
    ("conv / gemm", ("conv", "gemm", "sm90_", "xmma", "cutlass", "implicit", "splitk")),
    ("layer norm", ("ln_", "layer_norm", "layernorm")),
    ("memset / memcpy", ("[cuda memset", "[cuda memcpy", "memset", "memcpy")),
)


def kind_of(name):
    low = name.lower()
    for kind, keys in KINDS:
        if any(k in low for k in keys):
            return kind
    return name[:48]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", help="nsys stats -r cuda_gpu_trace -f csv output")
    ap.add_argument("--gap-us", type=float, default=300.0, help="a gap this long separates steps")
    ap.add_argument("--top", type=int, default=16, help="kinds to list")
    a = ap.parse_args()
    with open(a.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        print("no rows in", a.csv)
        return 1
    keys = list(rows[0].keys())
    name, dur, start = column(keys, "name"), column(keys, "duration"), column(keys, "start")
    stream = column(keys, "strm", "stream")
    if not (name and dur and start):
        print("unexpected columns:", keys)
        return 1
    rows.sort(key=lambda r: int(r[start]))
    cut = 0
    for i in range(1, len(rows)):
        if int(rows[i][start]) - int(rows[i - 1][start]) > a.gap_us * 1000:
            cut = i
    last = rows[cut:]
    t0 = int(last[0][start])
    t1 = max(int(r[start]) + int(r[dur]) for r in last)
    busy, end = 0, t0
    for r in last:
        s0 = int(r[start])
        e0 = s0 + int(r[dur])
        if e0 > end:
            busy += e0 - max(s0, end)
            end = e0
    span = (t1 - t0) / 1e3
    print(f"last step: {len(last)} rows, span {span:.1f} us, busy {busy / 1e3:.1f} us "
          f"({100 * busy / 1e3 / span:.0f}%), idle {span - busy / 1e3:.1f} us, "
          f"sum of row durations {sum(int(r[dur]) for r in last) / 1e3:.1f} us")
    if stream:
        per = collections.Counter(r[stream] for r in last)
        print("rows per stream:", ", ".join(f"{s}: {n}" for s, n in per.most_common()))
    total, count = collections.Counter(), collections.Counter()
    for r in last:
        k = kind_of(r[name])
        total[k] += int(r[dur])
        count[k] += 1
    for k, d in total.most_common(a.top):
        print(f"{d / 1e3:9.1f} us {count[k]:5d}  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
