#!/usr/bin/env python3
# ncu_summary.py - sums Nsight Compute's per-kernel gpu__time_duration (CSV) by kernel name:
# where one training step spends its device time, and how many kernels it launches.
import csv, re, sys
from collections import defaultdict

rows = []
with open(sys.argv[1], newline="") as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    try:
        v = float(r["Metric Value"].replace(",", ""))
    except ValueError:
        continue
    rows.append((r["Kernel Name"], v))
tot = sum(v for _, v in rows)
by = defaultdict(lambda: [0, 0.0])
for n, v in rows:
    k = re.sub(r"\(.*", "", n)[:90]
    by[k][0] += 1
    by[k][1] += v
print(f"kernels: {len(rows)}, device time {tot/1e6:.3f} ms (sum of kernel durations, serialised by ncu)")
for k, (c, v) in sorted(by.items(), key=lambda kv: -kv[1][1])[:200]:
    print(f"{v/1e3:9.1f} us {100*v/tot:5.1f}% {c:4d}x  {k}")
