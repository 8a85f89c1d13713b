#!/usr/bin/env python3
# bench_compare.py - runs the PyTorch reference (../shared/anchors/torch_resnet50.py, or the
# copy named by --anchors) for the configurations we compare against, reads libdltrain's
# bench run record (--ours FILE, docs/run-record.md), and prints both with the ratios. Run on
# the GPU machine:
#   build/examples/bench --batch 64,256,1024 --json ours.json
#   python3 scripts/bench_compare.py --anchors .device/anchors --ours ours.json
import argparse, contextlib, io, json, os, sys

ap = argparse.ArgumentParser()
ap.add_argument("--anchors", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "anchors"))
ap.add_argument("--ours", required=True)
ap.add_argument("--batches", default="64,256,1024")
ap.add_argument("--eager", action="store_true", help="also time PyTorch eager fp16+scaler (slower)")
args = ap.parse_args()

sys.path.insert(0, os.path.abspath(args.anchors))
os.environ.setdefault("STEPS", "60")
import torch_resnet50 as A  # noqa: E402

torch_rows = {}
for b in [int(x) for x in args.batches.split(",")]:
    A.B = b
    # PyTorch eager runs only at batch 256 (it is host-bound: ~23 ms/step at any batch)
    for name, fn in [("cudagraph_nhwc_bf16_whole_step", lambda n: A.graphed_variant(n))] + (
            [("eager_nhwc_fp16_scaler", lambda n: A.amp_variant(n, True, A.torch.float16, True))]
            if args.eager and b == 256 else []):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            fn(name)
        for line in buf.getvalue().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            torch_rows[(b, name)] = r
            print("torch:", line, flush=True)

ours = {}
with open(args.ours) as f:
    record = json.load(f)
for c in (record.get("results") or {}).get("configs", []):
    if c.get("status") != "ok":
        continue
    prec = c["precision"] + ("+scaler" if c.get("grad_scaler") else "")
    mode = c["mode"] if c["mode"] == "eager" or c.get("captured") else "eager*"
    ours[(c["batch"], prec, c["memory_format"], mode)] = {
        "ms_per_step": c["ms_per_step"], "img_per_s": c["throughput_per_s"],
        "peak_mib": c["peak_memory_bytes"] / 1048576.0}

print()
print(f"| batch | libdltrain config | ms/step | images/s | peak MiB | PyTorch best (graph bf16) ms/step | speed-up |")
print(f"|---|---|---|---|---|---|---|")
for (b, prec, lay, mode), r in sorted(ours.items()):
    t = torch_rows.get((b, "cudagraph_nhwc_bf16_whole_step"))
    tm = t["ms_per_step"] if t else float("nan")
    print(f"| {b} | {prec} {lay} {mode} | {r['ms_per_step']:.3f} | {r['img_per_s']:.0f} | {r['peak_mib']:.0f} | "
          f"{tm:.3f} | {tm / r['ms_per_step']:.2f}x |")
for (b, name), t in sorted(torch_rows.items()):
    if name != "cudagraph_nhwc_bf16_whole_step":
        print(f"| {b} | PyTorch {name} | {t['ms_per_step']:.3f} | {t['img_per_s']:.0f} | {t['peak_mib']:.0f} | | |")
