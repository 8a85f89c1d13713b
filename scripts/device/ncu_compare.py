#!/usr/bin/env python3
# ncu_compare.py - two Nsight Compute kernel-time CSVs (gpu__time_duration.sum) side by side,
# e.g. one GPT-2 step of ours against one of llm.c's: time per kind of kernel, then each
# side's kernels grouped by name and grid (a GEMM's grid tells its shape apart).
#   usage: ncu_compare.py A.csv[:STEPS] B.csv[:STEPS] [TOP]
# STEPS divides a file's times (a profile that holds several steps); TOP (default 40) limits
# the per-kernel lists.
import csv, re, sys
from collections import defaultdict

KINDS = [  # first match wins
    ("gemm split-K reduction", r"splitKreduce|reduce_kernel.*cublas"),
    ("gemm", r"gemm|xmma|cutlass|nvjet|cublas"),
    ("attention", r"cudnn|fmha|flash|sdpa|attn|attention|fprop|dgrad"),
    ("cross-entropy / classifier", r"\bce_|classifier|cross_entropy|softmax"),
    ("layernorm", r"layer_?norm|_ln_|ln_"),
    ("optimizer", r"adam|optim|update"),
    ("gradient norm / clip", r"norm|clip|found_inf"),
    ("bias gradient", r"bias"),
    ("casts / copies", r"cast|copy|convert|fill|memset"),
    ("elementwise / residual", r"binary|unary|elementwise|residual|add|gelu"),
    ("embedding / encoder", r"embed|encoder"),
]


def kind(name):
    for k, rx in KINDS:
        if re.search(rx, name, re.I):
            return k
    return "other"


def load(spec):
    path, _, steps = spec.partition(":")
    steps = float(steps or 1)
    rows = []
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        try:
            v = float(r["Metric Value"].replace(",", "")) / 1e3 / steps
        except ValueError:
            continue
        name = re.sub(r"\(.*", "", r["Kernel Name"]).replace("void ", "")
        rows.append((name, r.get("Grid Size", ""), r.get("Block Size", ""), v))
    return path, steps, rows


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    per = []
    for _, steps, rows in (a, b):
        d = defaultdict(lambda: [0.0, 0.0])
        for n, _, _, v in rows:
            d[kind(n)][0] += v
            d[kind(n)][1] += 1 / steps
        per.append(d)
    print(f"per kind, us per step (kernels per step): A = {a[0]}, B = {b[0]}")
    keys = sorted(set(per[0]) | set(per[1]), key=lambda k: -(per[0][k][0] + per[1][k][0]))
    print(f"{'kind':30s} {'A us':>10s} {'(n)':>6s} {'B us':>10s} {'(n)':>6s} {'A-B us':>9s}")
    for k in keys:
        x, y = per[0][k], per[1][k]
        print(f"{k:30s} {x[0]:10.1f} {x[1]:6.0f} {y[0]:10.1f} {y[1]:6.0f} {x[0]-y[0]:9.1f}")
    ta, tb = sum(v[0] for v in per[0].values()), sum(v[0] for v in per[1].values())
    print(f"{'all':30s} {ta:10.1f} {'':6s} {tb:10.1f} {'':6s} {ta-tb:9.1f}")
    for label, (path, steps, rows) in (("A", a), ("B", b)):
        g = defaultdict(lambda: [0.0, 0.0])
        for n, grid, block, v in rows:
            key = (n[:100], grid, block)
            g[key][0] += v
            g[key][1] += 1 / steps
        print(f"\n{label}: {path}, top {top} (name, grid, block): us per step, launches per step")
        for (n, grid, block), (v, c) in sorted(g.items(), key=lambda kv: -kv[1][0])[:top]:
            print(f"{v:9.1f} {c:5.1f}x {grid:>14s} {block:>12s}  {n}")


if __name__ == "__main__":
    main()
