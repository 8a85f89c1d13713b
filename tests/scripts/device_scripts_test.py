#!/usr/bin/env python3
"""device_scripts_test.py - the GPU machine's analysis scripts on canned input (TAP).

    python3 tests/scripts/device_scripts_test.py SOURCE_ROOT

scripts/device/nsys_timeline.py reads a synthetic `nsys stats -r cuda_gpu_trace` CSV: two
steps 1 ms apart; the second has overlapping rows on two streams and gaps. Its span, busy
(the union of the rows' intervals), idle time, rows per stream and the per-kind sums must be
the hand-worked numbers below. A CSV without the expected columns, and an empty one, exit 1
with a message.
"""
import os
import re
import subprocess
import sys
import tempfile

HEADER = "Start (ns),Duration (ns),CorrId,GrdX,Strm,Name\n"
# step 1 (ignored: before the 1 ms gap), then step 2 from t = 2,000,000 ns:
#   conv   [0, 10) us        stream 7
#   bn_    [12, 15) us       stream 7   (2 us idle before it)
#   gemm   [13, 20) us       stream 9   (overlaps bn_ by 2 us)
#   memset [25, 26) us       stream 7   (5 us idle before it)
# span 26 us, busy 10 + 3 + 5 + 1 = 19 us, idle 7 us, row sum 10 + 3 + 7 + 1 = 21 us
ROWS = [
    (0, 5000, 7, "void conv_kernel_a"),
    (6000, 2000, 7, "bn_partial_cl"),
    (2000000, 10000, 7, "sm90_xmma_fprop_implicit_gemm"),
    (2012000, 3000, 7, "bn_apply_fwd<half>"),
    (2013000, 7000, 9, "cublasLt::splitKreduce_kernel gemm"),
    (2025000, 1000, 7, "[CUDA memset]"),
]


def run(script, path):
    p = subprocess.run([sys.executable, script, path], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    script = os.path.join(root, "scripts", "device", "nsys_timeline.py")
    n, bad = 0, 0

    def ok(cond, what, detail=""):
        nonlocal n, bad
        n += 1
        if not cond:
            bad += 1
            print(f"not ok {n} - {what}")
            for line in detail.splitlines()[:20]:
                print("# " + line)
        else:
            print(f"ok {n} - {what}")

    with tempfile.TemporaryDirectory() as d:
        good = os.path.join(d, "trace.csv")
        with open(good, "w") as f:
            f.write(HEADER)
            for i, (s, du, st, name) in enumerate(ROWS):
                f.write(f'{s},{du},{i},1,{st},"{name}"\n')
        rc, out = run(script, good)
        m = re.search(r"last step: (\d+) rows, span ([\d.]+) us, busy ([\d.]+) us \((\d+)%\), idle ([\d.]+) us, "
                      r"sum of row durations ([\d.]+) us", out)
        ok(rc == 0 and m and m.groups() == ("4", "26.0", "19.0", "73", "7.0", "21.0"),
           "nsys_timeline.py: the last step's span, busy, idle and row sum", out)
        ok("rows per stream: 7: 3, 9: 1" in out, "nsys_timeline.py: rows per stream", out)
        kinds = dict((k.strip(), (float(t), int(c))) for t, c, k in
                     re.findall(r"^\s*([\d.]+) us\s+(\d+)\s+(.+)$", out, re.M))
        ok(kinds.get("conv / gemm") == (17.0, 2) and kinds.get("batchnorm") == (3.0, 1) and
           kinds.get("memset / memcpy") == (1.0, 1) and len(kinds) == 3,
           "nsys_timeline.py: time and count per kind", out)
        wrong = os.path.join(d, "wrong.csv")
        with open(wrong, "w") as f:
            f.write("a,b\n1,2\n")
        rc, out = run(script, wrong)
        ok(rc == 1 and "unexpected columns" in out, "nsys_timeline.py: a CSV without its columns exits 1", out)
        empty = os.path.join(d, "empty.csv")
        open(empty, "w").write(HEADER)
        rc, out = run(script, empty)
        ok(rc == 1 and "no rows" in out, "nsys_timeline.py: an empty trace exits 1", out)
    print(f"1..{n}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
