#!/usr/bin/env python3
"""report.py - the GPU comparison report from run records (docs/run-record.md).

    /usr/bin/python3 scripts/report.py RECORD.json... --out DIR [--baseline GPU] [--title T]

Reads the records that the examples write with --json FILE (runs on several GPUs, in several
precisions) and writes
  DIR/report.md     the tables, with the charts as DIR/charts/*.png
  DIR/report.html   the same, self-contained: CSS, the charts as inline SVG images and a
                    small script (table sorting, a load check), nothing fetched from a network
The tables: the records read; the spec table as measured (datasheet value beside it where a
record carries one); the results in the comparison article's layout (model x GPU: epoch
time, GPU utilisation); every run with throughput, memory, clocks, power and throttling;
ratios to a baseline GPU; throttling per run. The charts: epoch time and throughput per
model and GPU (bars), temperature, SM clock and power over each run with its throttling
intervals shaded. A value a record does not hold is printed as "missing" and drawn as no
bar: nothing is estimated here (the one estimate, an epoch time scaled from a partial epoch,
is the example's and is marked "est.").

Needs Debian's python3-matplotlib (run with /usr/bin/python3). Exit status: 0, 1 when a
record is unreadable or invalid (scripts/check_record.py's messages), 2 for usage errors.
"""
import argparse
import base64
import html
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_record  # noqa: E402

MISSING = "missing"
NA_CPU = "n/a (CPU)"
THERMAL_BITS = 0x20 | 0x40  # SW, HW thermal slowdown (the monitor's thermal throttling)
POWER_BITS = 0x4 | 0x80     # SW power cap, HW power brake (its power throttling)
GEMMS = ["fp32", "tf32", "fp16", "bf16"]


# ---- formatting -------------------------------------------------------------------------
def num(v, digits=2, unit=""):
    if v is None:
        return MISSING
    return ("{:,.%df}" % digits).format(v) + unit


def secs(v):
    """An epoch time: two decimals, three significant digits below a second (an H200 runs a
    10,000-image ResNet50 epoch in 0.147 s; two decimals would read 0.15)."""
    if v is None:
        return MISSING
    return num(v, 2 if abs(v) >= 1 else 3 if abs(v) >= 0.1 else 4)


def rate(v, unit):
    """A throughput: three significant digits at least (a CPU does 4.7 images/s)."""
    if v is None:
        return MISSING
    return num(v, 0 if v >= 100 else 1 if v >= 10 else 2, " %s/s" % unit)


def get(d, *path):
    """d[path[0]][path[1]]..., None where any step is absent or null."""
    for p in path:
        if not isinstance(d, dict) or d.get(p) is None:
            return None
        d = d[p]
    return d


# ---- records ------------------------------------------------------------------------------
class Run:
    """One row of the results: a training run, or one bench configuration."""

    def __init__(self, rec, path, dev_key, model, unit):
        self.rec, self.path, self.dev_key, self.model, self.unit = rec, path, dev_key, model, unit
        self.epoch_s = self.epoch_est = self.throughput = self.util = self.peak = None
        self.first_s = None
        self.window = None  # (t0, t1): a bench configuration's interval
        self.cpu = False
        self.failed = None  # a bench configuration's error


def load(paths):
    schema = check_record.load_schema()
    out, bad = [], 0
    for p in paths:
        try:
            with open(p) as f:
                rec = json.load(f)
        except (OSError, ValueError) as e:
            print("report: %s: cannot read: %s" % (p, e), file=sys.stderr)
            bad += 1
            continue
        if isinstance(rec, dict) and isinstance(rec.get("schema_version"), int) and rec["schema_version"] > 1:
            print("report: %s: schema version %d is newer than this report (1)" % (p, rec["schema_version"]),
                  file=sys.stderr)
            bad += 1
            continue
        errs = check_record.validate(rec, schema)
        if errs:
            print("report: %s is not a valid run record:\n  %s" % (p, "\n  ".join(errs[:10])), file=sys.stderr)
            bad += 1
            continue
        out.append((p, rec))
    return out, bad


def dev_key(rec, dev):
    return (dev.get("kind"), dev.get("name") or "unreadable GPU %s" % dev.get("index"),
            get(rec, "host", "hostname") or "unknown host")


def epoch_size(n, unit):
    return "%s %s/epoch" % ("{:,}".format(n) if n is not None else "? (missing)", unit)


def model_label(w, res, cfg=None):
    """The results table's row name: what decides an epoch time (model, precision, batch,
    accumulation, the samples in an epoch), so that only like runs share a row."""
    unit = res["sample_unit"]
    if cfg is not None:
        mode = cfg["mode"] if cfg["mode"] == "eager" or cfg.get("captured") else "eager (capture failed)"
        # gptex: token models have a sequence length and no memory format ("none")
        batch = "batch %d" % cfg["batch"] + (" x %d" % cfg["sequence_length"] if cfg.get("sequence_length") else "")
        parts = [cfg["precision"], batch] + ([cfg["memory_format"]] if cfg["memory_format"] != "none" else [])
        return "%s step bench (%s)" % (w.get("model", MISSING),
                                       ", ".join(parts + [mode, epoch_size(res["epoch_samples"], unit)]))
    parts = [w.get("precision") or "precision missing",
             "batch %s" % w["batch"] if w.get("batch") is not None else "batch missing"]
    if (w.get("accumulation") or 1) > 1:
        parts.append("accum %d" % w["accumulation"])
    parts.append(epoch_size(get(w, "dataset", "train_samples"), unit))
    return "%s (%s)" % (w.get("model", MISSING), ", ".join(parts))


def window_values(series, key, t0, t1):
    return [v for t, v in zip(series.get("t_s", []), series.get(key, []))
            if t is not None and v is not None and t0 <= t <= t1]


def window_mean(series, key, t0, t1):
    vals = window_values(series, key, t0, t1)
    return sum(vals) / len(vals) if vals else None


def window_max(series, key, t0, t1):
    vals = window_values(series, key, t0, t1)
    return max(vals) if vals else None


def collect(records):
    """Devices (key -> info), runs, and the order GPUs and models first appear in."""
    devices, runs, order = {}, [], []
    for path, rec in records:
        for dev in rec["devices"]:
            k = dev_key(rec, dev)
            if k not in order:
                order.append(k)
            d = devices.setdefault(k, {"dev": None, "software": None, "measured": None, "datasheet": None})
            if "error" not in dev:
                d["dev"], d["software"] = dev, rec["software"]
            if dev.get("measured"):
                d["measured"] = dev["measured"]
            if dev.get("datasheet"):
                d["datasheet"] = dev["datasheet"]
        res, w = rec["results"], rec.get("workload") or {}
        if not rec["devices"] or res["kind"] == "device_report":
            continue
        dev = rec["devices"][0]
        k = dev_key(rec, dev)
        mon = dev.get("monitor")
        if res["kind"] == "training":
            r = Run(rec, path, k, model_label(w, res), res["sample_unit"])
            r.epoch_s, r.epoch_est = res["epoch_time_s"], res["epoch_time_estimated"]
            r.throughput, r.peak, r.first_s = res["throughput_per_s"], res["peak_memory_bytes"], res["first_step_s"]
            r.util = get(mon, "summary", "gpu_util_mean") if get(mon, "available") else None
            r.cpu = dev.get("kind") == "cpu"
            runs.append(r)
        elif res["kind"] == "bench":
            for cfg in res["configs"]:
                r = Run(rec, path, k, model_label(w, res, cfg), res["sample_unit"])
                r.epoch_s, r.epoch_est = cfg["epoch_time_s"], False
                r.throughput, r.peak, r.first_s = cfg["throughput_per_s"], cfg["peak_memory_bytes"], cfg["first_step_s"]
                r.window = (cfg["t_start_s"], cfg["t_end_s"])
                r.failed = cfg["error"] or "failed" if cfg["status"] != "ok" else None
                if get(mon, "available") and get(mon, "series"):
                    r.util = window_mean(mon["series"], "gpu_util", *r.window)
                r.cpu = dev.get("kind") == "cpu"
                runs.append(r)
    return devices, runs, order


def labels_for(order):
    """GPU column names: the device name, with the host where two hosts have that name."""
    names = [k[1] for k in order]
    return {k: k[1] if names.count(k[1]) == 1 else "%s @ %s" % (k[1], k[2]) for k in order}


def latest(runs):
    """One run per (model, device): the last started; the others are listed as superseded."""
    best, superseded = {}, []
    for r in runs:
        key = (r.model, r.dev_key)
        if key in best:
            older, newer = sorted([best[key], r], key=lambda x: x.rec["started_utc"])
            superseded.append(older)
            best[key] = newer
        else:
            best[key] = r
    return best, superseded


# ---- throttling -------------------------------------------------------------------------
def throttle_intervals(mon):
    """[(t0, t1, "thermal"|"power")] from the series' reason bits: a flagged point covers up
    to the next point (the last one: its stride of sampling intervals)."""
    s = get(mon, "series")
    if not s:
        return []
    t, reasons = s.get("t_s", []), s.get("clock_event_reasons", [])
    step = (mon.get("interval_ms") or 0) / 1000.0 * (s.get("stride") or 1)
    out = []
    for kind, bits in (("thermal", THERMAL_BITS), ("power", POWER_BITS)):
        cur = None
        for i, (ti, ri) in enumerate(zip(t, reasons)):
            if ti is None:
                continue
            end = t[i + 1] if i + 1 < len(t) and t[i + 1] is not None else ti + step
            if ri is not None and int(ri) & bits:
                cur = [cur[0], end] if cur else [ti, end]
            elif cur:
                out.append((cur[0], cur[1], kind))
                cur = None
        if cur:
            out.append((cur[0], cur[1], kind))
    return sorted(out)


def throttle_summary(mon, window=None):
    """(thermal seconds, power seconds, covered seconds), None where there is no series;
    with window (t0, t1): the parts inside it (a bench configuration's interval)."""
    s = get(mon, "series")
    if not s or not s.get("points"):
        return None
    iv = throttle_intervals(mon)
    t = [x for x in s.get("t_s", []) if x is not None]
    step = (mon.get("interval_ms") or 0) / 1000.0 * (s.get("stride") or 1)
    span = (t[-1] - t[0] + step) if t else 0.0
    if window:
        w0, w1 = window
        iv = [(max(a, w0), min(b, w1), k) for a, b, k in iv if min(b, w1) > max(a, w0)]
        span = max(0.0, min(w1, t[-1] + step) - max(w0, t[0])) if t else 0.0
    th = sum(b - a for a, b, k in iv if k == "thermal")
    pw = sum(b - a for a, b, k in iv if k == "power")
    return th, pw, span


def clock_in_out(mon):
    """Mean SM clock inside and outside thermal throttling (None where no samples)."""
    s = get(mon, "series") or {}
    inside, outside = [], []
    for c, r in zip(s.get("sm_clock_mhz", []), s.get("clock_event_reasons", [])):
        if c is None or r is None:
            continue
        (inside if int(r) & THERMAL_BITS else outside).append(c)
    mean = lambda v: sum(v) / len(v) if v else None  # noqa: E731
    return mean(inside), mean(outside)


# ---- tables -------------------------------------------------------------------------------
class Table:
    def __init__(self, anchor, title, header, rows, notes=(), empty="(no records of this kind)"):
        self.anchor, self.title, self.header, self.rows, self.notes = anchor, title, header, rows, list(notes)
        self.empty = empty


def records_table(records):
    rows = []
    for path, rec in records:
        devs = ", ".join(d.get("name") or "unreadable" for d in rec["devices"]) or "none"
        rows.append([os.path.basename(path), rec["program"]["name"], get(rec, "host", "hostname") or MISSING,
                     devs, rec["started_utc"], num(rec["duration_s"], 1), rec["software"]["libdltrain"]])
    notes = sorted({rec["notes"] for _, rec in records if rec.get("notes")})
    return Table("records", "Records", ["record", "program", "host", "devices", "started (UTC)", "duration (s)",
                                        "libdltrain"], rows, notes)


def spec_table(devices, order, labels):
    def ds(d, key, fmt):
        v = get(d["datasheet"], key)
        return "" if v is None else " (datasheet %s)" % fmt(v)

    def row(label, fn, gpu_only=True):
        cells = []
        for k in order:
            d = devices[k]
            if k[0] == "cpu" and gpu_only:
                cells.append(NA_CPU)
            elif d["dev"] is None:
                cells.append(MISSING)
            else:
                cells.append(fn(d, d["dev"]))
        return [label] + cells

    gib = lambda b: num(b / 2**30, 1, " GiB") if b is not None else MISSING  # noqa: E731
    tf = lambda v: num(v, 1, " TFLOP/s")  # noqa: E731

    def measured_bw(d, dev):
        v = get(d["measured"], "copy_bandwidth_gbps")
        if v is None:
            return MISSING
        th = get(dev, "theoretical", "memory_bandwidth_gbps")
        pct = "" if th is None else ", %.0f%% of theoretical" % (100.0 * v / th)
        return num(v, 0, " GB/s") + pct + ds(d, "memory_bandwidth_gbps", lambda x: num(x, 0, " GB/s"))

    def gemm(kind):
        return lambda d, dev: (tf(get(d["measured"], "gemm", kind, "tflops"))
                               + ds(d, kind + "_tflops", lambda x: num(x, 1)))

    def versions(d, dev):
        sw = d["software"] or {}
        return "driver %s, runtime %s" % (sw.get("cuda_driver") or MISSING, sw.get("cuda_runtime") or MISSING)

    def cc(d, dev):
        if dev.get("compute_capability") is None:
            return MISSING
        return "%s (%s)" % (dev["compute_capability"], dev.get("arch") or MISSING)

    rows = [
        ["host"],  # filled below: the host is part of the device's identity
        row("compute capability", cc),
        row("SMs", lambda d, dev: num(dev.get("sm_count"), 0)),
        row("CUDA cores", lambda d, dev: num(dev.get("cuda_cores"), 0)),
        row("tensor cores", lambda d, dev: num(dev.get("tensor_cores"), 0)),
        row("memory", lambda d, dev: gib(dev.get("memory_bytes"))
            + ds(d, "memory_bytes", lambda x: num(x / 1e9, 0, " GB")), gpu_only=False),
        row("memory bus", lambda d, dev: MISSING if dev.get("memory_bus_bits") is None or dev.get("memory_clock_khz") is None
            else "%d-bit, %d MHz" % (dev["memory_bus_bits"], dev["memory_clock_khz"] // 1000)),
        row("L2 cache", lambda d, dev: num(dev["l2_bytes"] / 2**20, 0, " MiB") if dev.get("l2_bytes") is not None else MISSING),
        row("peak SM clock", lambda d, dev: num(dev["sm_clock_khz"] / 1000, 0, " MHz") if dev.get("sm_clock_khz") is not None else MISSING),
        row("bandwidth, theoretical (from clocks)", lambda d, dev: num(get(dev, "theoretical", "memory_bandwidth_gbps"), 0, " GB/s")),
        row("bandwidth, measured (D2D copy)", measured_bw),
        row("FP32 peak, theoretical (cores x clock)", lambda d, dev: tf(get(dev, "theoretical", "fp32_tflops"))
            + ds(d, "fp32_tflops", lambda x: num(x, 1))),
    ] + [row("GEMM %s, measured (cuBLAS)" % k, gemm(k)) for k in GEMMS] + [
        row("CUDA", versions),
        row("cuDNN", lambda d, dev: (d["software"] or {}).get("cudnn") or MISSING),
        row("cuBLAS", lambda d, dev: (d["software"] or {}).get("cublas") or MISSING),
        row("libdltrain", lambda d, dev: (d["software"] or {}).get("libdltrain") or MISSING, gpu_only=False),
        row("logical CPUs", lambda d, dev: num(dev.get("logical_cpus"), 0) if dev.get("kind") == "cpu" else "n/a (GPU)",
            gpu_only=False),
    ]
    rows[0] = ["host"] + [k[2] for k in order]
    if not any(k[0] == "cpu" for k in order):
        rows.pop()
    rows = [r for r in rows if any(c != NA_CPU for c in r[1:])]  # only CPUs: no GPU rows
    notes = ["Measured rows come from gpu_report records (`missing`: no gpu_report record of that GPU, or the "
             "measurement failed). Theoretical values are derived from the device's own clocks and widths; "
             "datasheet values appear only where a record carries them (`datasheet` in docs/run-record.md)."]
    return Table("spec", "Spec table, as measured", [""] + [labels[k] for k in order], rows, notes)


def run_cells(r):
    mon = r.rec["devices"][0].get("monitor")
    est = " (est.)" if r.epoch_est and r.epoch_s is not None else ""
    if r.failed:
        est = "failed: " + r.failed[:80]
    util = NA_CPU if r.cpu else num(r.util, 0)
    return est, util, mon


def article_table(best, models, gpus, labels):
    header = ["model"]
    for g in gpus:
        header += ["%s epoch time (s)" % labels[g], "%s GPU util (%%)" % labels[g]]
    rows = []
    for m in models:
        row = [m]
        for g in gpus:
            r = best.get((m, g))
            if r is None:
                row += ["no run", "no run"]
                continue
            est, util, _ = run_cells(r)
            row += [est if r.failed else secs(r.epoch_s) + est, util]
        rows.append(row)
    return Table("results", "Results (the article's layout: model x GPU)", header, rows,
                 ["Epoch time: mean of the full epochs after the first (plan building and warm-up "
                  "excluded); \"est.\": scaled from a partial epoch. Bench rows: the epoch the bench's "
                  "ms/step gives for 50,000 images. GPU util: NVML's mean over the run (bench rows: over "
                  "the configuration's interval)."])


def runs_table(best, models, gpus, labels):
    rows = []
    for m in models:
        for g in gpus:
            r = best.get((m, g))
            if r is None:
                continue
            est, util, mon = run_cells(r)
            s = get(mon, "summary") or {}
            ts = throttle_summary(mon)
            if r.window is not None and ts is not None:
                # a bench configuration: its own interval of the run's series, as its GPU util
                w, series = r.window, mon["series"]
                s = {"temp_max_c": window_max(series, "temp_c", *w),
                     "sm_clock_mean_mhz": window_mean(series, "sm_clock_mhz", *w),
                     "power_mean_w": window_mean(series, "power_w", *w)}
                ts = throttle_summary(mon, w)
            if r.cpu:
                temp = clock = power = throttled = NA_CPU
            else:
                temp = num(s.get("temp_max_c"), 0)
                clock = num(s.get("sm_clock_mean_mhz"), 0)
                power = num(s.get("power_mean_w"), 0)
                if ts is None:
                    throttled = MISSING
                elif ts[0] == 0 and ts[1] == 0:
                    throttled = "no"
                else:
                    throttled = ", ".join(x for x in ["thermal %.1f s" % ts[0] if ts[0] else "",
                                                      "power %.1f s" % ts[1] if ts[1] else ""] if x)
            rows.append([m, labels[g], est if r.failed else secs(r.epoch_s) + est, rate(r.throughput, r.unit), util,
                         num(r.peak / 2**20, 0) if r.peak is not None else MISSING, num(r.first_s),
                         temp, clock, power, throttled, os.path.basename(r.path)])
    return Table("runs", "Every run: throughput, memory, clocks, power",
                 ["model", "device", "epoch time (s)", "throughput", "GPU util (%)", "peak memory (MiB)",
                  "first step (s)", "temp max (C)", "SM clock mean (MHz)", "power mean (W)", "throttled",
                  "record"], rows,
                 ["Peak memory: the library allocator's peak. Temperature, clock and power: NVML's "
                  "summary over the run (bench rows: the samples in the configuration's interval). "
                  "Throttled: time covered by samples whose clock-event reasons include thermal (0x20, "
                  "0x40) or power (0x4, 0x80) slowdown."])


def ratio_table(best, models, gpus, labels, baseline):
    rows = []
    for m in models:
        base = best.get((m, baseline))
        present = [g for g in gpus if (m, g) in best]
        if base is None or len(present) < 2:
            continue
        for g in present:
            r = best[(m, g)]
            if g == baseline:
                rows.append([m, labels[g], "1.00 (baseline)", "1.00 (baseline)", "1.00 (baseline)"])
                continue
            speed = base.epoch_s / r.epoch_s if base.epoch_s and r.epoch_s else None
            thr = r.throughput / base.throughput if base.throughput and r.throughput is not None else None
            mem = r.peak / base.peak if base.peak and r.peak is not None else None
            rows.append([m, labels[g], num(speed) + "x" if speed else MISSING,
                         num(thr) + "x" if thr else MISSING, num(mem) + "x" if mem else MISSING])
    return Table("ratios", "Ratios to %s" % labels[baseline],
                 ["model", "GPU", "speed-up (baseline epoch time / epoch time)", "throughput ratio",
                  "peak memory ratio"], rows,
                 ["Only models run on the baseline GPU and at least one other appear."],
                 empty="(no model was run on two devices)")


def monitored(records, skip_paths=()):
    """Every (record, device) with an NVML sample series, in the records' order, as
    (what ran, device key, path, monitor, [(t0, t1, label)] of its epochs or configurations)."""
    out = []
    for path, rec in records:
        if path in skip_paths:
            continue
        res, w = rec["results"], rec.get("workload") or {}
        for dev in rec["devices"]:
            mon = dev.get("monitor")
            if not get(mon, "series", "points"):
                continue
            if res["kind"] == "training":
                what = model_label(w, res)
                windows = [(e["t_start_s"], e["t_end_s"], "epoch %d" % e["epoch"]) for e in res["epochs"]]
            elif res["kind"] == "bench":
                what = "%s step bench (%d configurations)" % (w.get("model", MISSING), len(res["configs"]))
                windows = [(c["t_start_s"], c["t_end_s"], config_mark(c, res["configs"])) for c in res["configs"]]
            else:
                what, windows = "gpu_report micro-benchmarks", []
            out.append((what, dev_key(rec, dev), path, mon, windows))
    return out


def config_mark(c, configs):
    """A bench configuration's mark on the time axis: what tells it from the others (batch,
    precision, layout, mode; precision alone where they are all alike)."""
    keys = [("batch", lambda x: "b%d" % x["batch"]), ("precision", lambda x: x["precision"]),
            ("memory_format", lambda x: x["memory_format"]), ("mode", lambda x: x["mode"])]
    parts = [f(c) for k, f in keys if len({str(x.get(k)) for x in configs}) > 1]
    return " ".join(parts or [c["precision"]])


def thermal_table(mons, labels):
    rows, advice = [], []
    for what, k, path, mon, _ in mons:
        ts = throttle_summary(mon)
        s = mon["summary"]
        inside, outside = clock_in_out(mon)
        pct = lambda x: " (%.0f%% of %.1f s)" % (100.0 * x / ts[2], ts[2]) if ts[2] else ""  # noqa: E731
        rows.append([what, labels[k], num(s.get("temp_max_c"), 0), num(s.get("sm_clock_mean_mhz"), 0),
                     num(inside, 0) if inside is not None else "not throttled", num(ts[0], 1) + pct(ts[0]),
                     num(ts[1], 1) + pct(ts[1]), os.path.basename(path)])
        ivs = throttle_intervals(mon)
        if ts[0] and inside is not None and outside:
            spans = ", ".join("%.1f-%.1f s" % (a, b) for a, b, kind in ivs if kind == "thermal")
            advice.append("%s ran %s thermally throttled for %.1f s (%s), at %.0f C at most; its SM clock "
                          "averaged %.0f MHz while throttled against %.0f MHz otherwise (%.1f%%). Cooling, not "
                          "the code, limits this run: check airflow, fan curves and the inlet temperature "
                          "before comparing its numbers." % (labels[k], what, ts[0], spans,
                                                               s.get("temp_max_c") or float("nan"), inside,
                                                               outside, 100.0 * (inside - outside) / outside))
        if ts[1]:
            advice.append("%s ran %s at its power limit for %.1f s: the board's power cap, not temperature, "
                          "set its clock then." % (labels[k], what, ts[1]))
    if rows and not advice:
        advice.append("No run was throttled: the clocks were not limited by temperature or power in these records.")
    return Table("thermal", "Throttling per run",
                 ["run", "GPU", "temp max (C)", "SM clock mean (MHz)", "SM clock while thermally throttled (MHz)",
                  "thermal throttling (s)", "power throttling (s)", "record"], rows, advice,
                 empty="(no NVML sample series in these records: CPU runs, or no monitor)")


# ---- output -------------------------------------------------------------------------------
def md_table(t):
    esc = lambda c: str(c).replace("|", "\\|")  # noqa: E731
    out = ["## " + t.title, ""]
    if not t.rows:
        out.append(t.empty)
    else:
        out.append("| " + " | ".join(esc(h) for h in t.header) + " |")
        out.append("|" + "---|" * len(t.header))
        out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in t.rows]
    out += [""] + [n + "\n" for n in t.notes]
    return "\n".join(out)


def html_table(t):
    e = html.escape
    out = ['<section id="%s"><h2>%s</h2>' % (t.anchor, e(t.title))]
    if not t.rows:
        out.append("<p>%s</p>" % e(t.empty))
    else:
        out.append('<table class="sortable"><thead><tr>%s</tr></thead><tbody>'
                   % "".join("<th>%s</th>" % e(h) for h in t.header))
        for row in t.rows:
            out.append("<tr>%s</tr>" % "".join(
                '<td class="missing">%s</td>' % e(str(c)) if str(c).startswith(MISSING) else "<td>%s</td>" % e(str(c))
                for c in row))
        out.append("</tbody></table>")
    out += ["<p class=\"note\">%s</p>" % re.sub(r"`([^`]*)`", r"<code>\1</code>", e(n)) for n in t.notes]
    out.append("</section>")
    return "\n".join(out)


SCRIPT = r"""
(function () {
  var status = document.getElementById('report-status');
  var failed = false;
  window.addEventListener('error', function (ev) {
    failed = true;
    status.className = 'error';
    status.textContent = 'error: ' + (ev.message || 'a resource failed to load');
  }, true);
  function cellValue(td) {
    var v = parseFloat(td.textContent.replace(/,/g, ''));
    return isNaN(v) ? td.textContent : v;
  }
  function sortable(table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      th.title = 'click to sort';
      th.addEventListener('click', function () {
        var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        var dir = th.getAttribute('data-dir') === 'asc' ? -1 : 1;
        rows.sort(function (a, b) {
          var x = cellValue(a.cells[col]), y = cellValue(b.cells[col]);
          if (typeof x === typeof y) return (x < y ? -1 : x > y ? 1 : 0) * dir;
          return typeof x === 'number' ? -dir : dir;
        });
        rows.forEach(function (r) { body.appendChild(r); });
        th.setAttribute('data-dir', dir === 1 ? 'asc' : 'desc');
      });
    });
  }
  window.addEventListener('load', function () {
    Array.prototype.forEach.call(document.querySelectorAll('table.sortable'), sortable);
    var charts = document.querySelectorAll('figure.chart img'), broken = [];
    Array.prototype.forEach.call(charts, function (img) {
      if (!img.complete || img.naturalWidth === 0) broken.push(img.alt);
    });
    status.setAttribute('data-charts', String(charts.length));
    if (failed) return;
    if (broken.length) {
      status.className = 'error';
      status.textContent = 'error: charts not rendered: ' + broken.join('; ');
    } else {
      status.className = 'ok';
      status.textContent = 'ok: ' + charts.length + ' charts';
    }
  });
})();
"""

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; padding: 0 1em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; cursor: pointer; }
td.missing { color: #a33; font-style: italic; }
p.note { color: #555; font-size: 0.85em; max-width: 60em; }
figure.chart { margin: 1em 0; }
figure.chart img { max-width: 100%; }
#report-status { font-size: 0.8em; color: #777; }
#report-status.error { color: #b00; font-weight: bold; }
"""


def write(out_dir, title, tables, charts, sources):
    os.makedirs(os.path.join(out_dir, "charts"), exist_ok=True)
    md = ["# " + title, "", "Generated by scripts/report.py from %d run record%s (docs/run-record.md)."
          % (len(sources), "" if len(sources) == 1 else "s"), ""]
    body = []
    for t in tables:
        md.append(md_table(t))
        body.append(html_table(t))
    md.append("## Charts\n")
    figs = ['<section id="charts"><h2>Charts</h2>']
    for i, (name, caption, svg, png) in enumerate(charts):
        with open(os.path.join(out_dir, "charts", name + ".png"), "wb") as f:
            f.write(png)
        md.append("![%s](charts/%s.png)\n\n%s\n" % (caption, name, caption))
        data = base64.b64encode(svg.encode()).decode()
        figs.append('<figure class="chart" id="chart-%s"><img alt="%s" src="data:image/svg+xml;base64,%s">'
                    "<figcaption>%s</figcaption></figure>" % (name, html.escape(caption), data, html.escape(caption)))
    if not charts:
        md.append("(no charts: the records hold no results to draw)\n")
    figs.append("</section>")
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write("\n".join(md))
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>%s</title>"
            "<style>%s</style></head><body>\n<h1>%s</h1>\n<p>Generated by scripts/report.py from %d run "
            "records. Missing values say <em>missing</em>; nothing is estimated.</p>\n"
            "<p id=\"report-status\" data-expected-charts=\"%d\">loading</p>\n%s\n%s\n<script>%s</script>\n"
            "</body></html>\n" % (html.escape(title), CSS, html.escape(title), len(sources), len(charts),
                                  "\n".join(body), "\n".join(figs), SCRIPT))
    with open(os.path.join(out_dir, "report.html"), "w") as f:
        f.write(page)


def build_charts(best, mons, models, gpus, labels):
    import report_charts as rc
    charts = []
    unit = {}
    for r in best.values():
        unit.setdefault(r.model, r.unit)

    def val(attr):
        def f(m, g):
            r = best.get((m, g))
            if r is None:
                return None, None, False
            v = getattr(r, attr)
            return v, ("est." if attr == "epoch_s" and r.epoch_est and v is not None else None), True
        return f

    if models:
        glabels = [labels[g] for g in gpus]
        bylabel = dict(zip(glabels, gpus))
        wrap = lambda f: (lambda m, gl: f(m, bylabel[gl]))  # noqa: E731
        fig = rc.bars("Epoch time per model and GPU (s, lower is better)", models, glabels,
                      wrap(val("epoch_s")), lambda m: "epoch time (s)")
        charts.append(("epoch_time", "Epoch time per model and GPU") + rc.render(fig))
        fig = rc.bars("Throughput per model and GPU (higher is better)", models, glabels,
                      wrap(val("throughput")), lambda m: "%s/s" % unit.get(m, "samples"))
        charts.append(("throughput", "Throughput per model and GPU") + rc.render(fig))
    for what, k, path, mon, windows in mons:
        fig = rc.series("%s on %s (%s)" % (what, labels[k], os.path.basename(path)), mon["series"],
                        throttle_intervals(mon), windows)
        charts.append(("series_%d" % len(charts), "Temperature, SM clock and power: %s on %s (%s)"
                       % (what, labels[k], os.path.basename(path))) + rc.render(fig))
    return charts


def main(argv):
    ap = argparse.ArgumentParser(description="The GPU comparison report from run records.")
    ap.add_argument("records", nargs="+", help="run records (the examples' --json FILE)")
    ap.add_argument("--out", required=True, help="directory for report.md, report.html and charts/")
    ap.add_argument("--baseline", help="the GPU the ratios compare with (a substring of its name; default: the "
                                       "first GPU in the records' order)")
    ap.add_argument("--title", default="GPU comparison")
    args = ap.parse_args(argv)
    try:
        import report_charts  # noqa: F401
    except ImportError as e:
        print("report: the charts need matplotlib (Debian: apt-get install python3-matplotlib; run with "
              "/usr/bin/python3): %s" % e, file=sys.stderr)
        return 2
    records, bad = load(args.records)
    if bad:
        return 1
    devices, runs, order = collect(records)
    labels = labels_for(order)
    best, superseded = latest(runs)
    gpus = [k for k in order if any(r.dev_key == k for r in best.values())]
    models = []  # training runs first, then bench configurations, each in the records' order
    for r in sorted(runs, key=lambda r: r.window is not None):
        if r.model not in models:
            models.append(r.model)
    baseline = gpus[0] if gpus else None
    if args.baseline and gpus:
        match = [g for g in gpus if args.baseline.lower() in labels[g].lower()]
        if not match:
            print("report: --baseline %s matches none of: %s" % (args.baseline, ", ".join(labels[g] for g in gpus)),
                  file=sys.stderr)
            return 2
        baseline = match[0]
    mons = monitored(records, {r.path for r in superseded} - {r.path for r in best.values()})
    tables = [records_table(records), spec_table(devices, order, labels)]
    if runs:
        tables += [article_table(best, models, gpus, labels), runs_table(best, models, gpus, labels),
                   ratio_table(best, models, gpus, labels, baseline)]
    tables.append(thermal_table(mons, labels))
    if superseded:
        tables[0].notes.append("Superseded (a later record of the same model and GPU is used): "
                               + ", ".join(os.path.basename(r.path) for r in superseded))
    charts = build_charts(best, mons, models, gpus, labels)
    write(args.out, args.title, tables, charts, records)
    print("report: %d records, %d runs, %d charts -> %s/report.md, %s/report.html"
          % (len(records), len(best), len(charts), args.out, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
