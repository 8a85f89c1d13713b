#!/usr/bin/env python3
"""bench_gpt_compare.py - one table of libdltrain's GPT step beside PyTorch's and llm.c's.

    python3 scripts/bench_gpt_compare.py --ours ours.json [--torch torch.txt] [--llmc llmc.txt]

--ours: the run record of examples/bench_gpt (--json FILE). --torch: what
../shared/anchors/torch_gpt2.py printed (one JSON object per line, several runs may be
concatenated). --llmc: what ../shared/anchors/run_llmc.sh printed ("llm.c batch B x T:" then
llm.c's step lines "step   26/30 | ... | 31.52 ms | ... | 519748 tok/s" and its "device memory
usage: X MiB / Y MiB"). Missing peers are left out. For every batch size it prints our
configurations and the peers', then the ratios of our best tokens/s (and its peak memory)
to each peer's and to the best peer (that line with both sides' ms and tokens/s): the issue's
targets are ratio >= 1 against the best peer in tokens/s and <= 1 against torch.compile in
peak memory.

Figures are taken as printed: ms/step is our median block, torch_gpt2.py's mean over its
timed steps, llm.c's mean over the step lines given (steps 26-30, its tok/s is a moving
average: we use batch*T*1000/ms instead). Peak memory: ours and PyTorch's are their
allocators' peaks; llm.c's is the device's used memory (cudaMemGetInfo), marked "(device)".
Standard library only.
"""
import argparse
import json
import re
import sys


def load_ours(path):
    rec = json.load(open(path))
    if rec.get("results", {}).get("kind") != "bench":
        raise SystemExit("%s: not a bench record (results.kind %r)" % (path, rec.get("results", {}).get("kind")))
    rows = []
    for c in rec["results"]["configs"]:
        if c.get("status") != "ok":
            continue
        mode = c["mode"] if c["mode"] == "eager" or c.get("captured") else "eager*"
        rows.append(dict(impl="libdltrain %s %s" % (c["precision"] + ("+scaler" if c.get("grad_scaler") else ""), mode),
                         ours=True, batch=c["batch"], seq=c.get("sequence_length"), ms=c["ms_per_step"],
                         tok=c["throughput_per_s"], mfu=c.get("mfu_spec"),
                         peak=c["peak_memory_bytes"] / 2 ** 20 if c.get("peak_memory_bytes") is not None else None,
                         first=c.get("first_step_s"), device_mem=False))
    gpu = (rec.get("devices") or [{}])[0].get("name")
    return rows, gpu


def load_torch(path):
    rows = []
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if "variant" not in r:
            continue
        rows.append(dict(impl="PyTorch %s" % r["variant"], ours=False, batch=r["batch"], seq=r.get("seq"),
                         ms=r["ms_per_step"], tok=r["tokens_per_s"], mfu=r.get("mfu"), peak=r.get("peak_mib"),
                         first=r.get("first_step_s"), device_mem=False))
    return rows


STEP = re.compile(r"^step\s+\d+/\d+ \|.*\|\s*([0-9.]+) ms \|")
HEAD = re.compile(r"^llm\.c batch (\d+) x (\d+):")
MEM = re.compile(r"device memory usage: (\d+) MiB")


def load_llmc(path):
    rows, cur = [], None
    for line in open(path):
        m = HEAD.match(line)
        if m:
            cur = dict(impl="llm.c (bf16, cuDNN attention)", ours=False, batch=int(m.group(1)), seq=int(m.group(2)),
                       ms_list=[], peak=None, mfu=None, first=None, device_mem=True)
            rows.append(cur)
            continue
        if cur is None:
            continue
        m = STEP.match(line.strip())
        if m:
            cur["ms_list"].append(float(m.group(1)))
        m = MEM.search(line)
        if m:
            cur["peak"] = float(m.group(1))
    out = []
    for r in rows:
        if not r["ms_list"]:
            continue
        r["ms"] = sum(r["ms_list"]) / len(r["ms_list"])
        r["tok"] = r["batch"] * (r["seq"] or 1024) * 1000.0 / r["ms"]
        del r["ms_list"]
        out.append(r)
    return out


def fmt(v, f):
    return "n/a" if v is None else f.format(v) if "{" in f else f % v


def table(rows, gpu):
    print("# GPT-2 training step%s: libdltrain beside PyTorch and llm.c (same call)" % (" on " + gpu if gpu else ""))
    print("| batch x T | implementation | ms/step | tokens/s | MFU (989) | peak MiB | first step s |")
    print("|---|---|---|---|---|---|---|")
    for b in sorted({r["batch"] for r in rows}):
        for r in [r for r in rows if r["batch"] == b]:
            print("| %d x %s | %s | %s | %s | %s | %s | %s |" % (
                b, r["seq"] or "?", r["impl"], fmt(r["ms"], "%.2f"), fmt(r["tok"], "{:,.0f}"),
                fmt(100 * r["mfu"] if r["mfu"] is not None else None, "%.1f%%"),
                fmt(r["peak"], "%.0f") + (" (device)" if r["device_mem"] and r["peak"] is not None else ""),
                fmt(r["first"], "%.1f")))
    print()
    print("| batch x T | our best | peer | ours / peer tokens/s | ours / peer peak memory |")
    print("|---|---|---|---|---|")
    for b in sorted({r["batch"] for r in rows}):
        ours = [r for r in rows if r["batch"] == b and r["ours"]]
        peers = [r for r in rows if r["batch"] == b and not r["ours"]]
        if not ours or not peers:
            continue
        best = max(ours, key=lambda r: r["tok"])
        for p in sorted(peers, key=lambda r: -r["tok"]):
            mem = best["peak"] / p["peak"] if best["peak"] and p["peak"] else None
            print("| %d x %s | %s | %s | %.2f | %s |" % (b, best["seq"] or "?", best["impl"], p["impl"],
                                                       best["tok"] / p["tok"], fmt(mem, "%.2f")))
        top = max(peers, key=lambda r: r["tok"])
        # the figures behind the verdict on its own line: a log's tail then holds them all
        print("| %d x %s | %s: %s ms, %s tok/s | best peer: %s: %s ms, %s tok/s | %.2f (%s) | |" % (
            b, best["seq"] or "?", best["impl"], fmt(best["ms"], "%.2f"), fmt(best["tok"], "{:,.0f}"), top["impl"],
            fmt(top["ms"], "%.2f"), fmt(top["tok"], "{:,.0f}"), best["tok"] / top["tok"],
            "met" if best["tok"] >= top["tok"] else "missed"))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ours", required=True)
    ap.add_argument("--torch")
    ap.add_argument("--llmc")
    a = ap.parse_args(argv)
    rows, gpu = load_ours(a.ours)
    if a.torch:
        rows += load_torch(a.torch)
    if a.llmc:
        rows += load_llmc(a.llmc)
    if not rows:
        print("no measurements to compare", file=sys.stderr)
        return 1
    table(rows, gpu)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
