#!/usr/bin/env python3
"""report_test.py - run records and the comparison report (TAP).

    /usr/bin/python3 tests/scripts/report_test.py SOURCE_ROOT

1. The schema checker (scripts/check_record.py): the committed fixture records
   (tests/fixtures/records, synthetic: two GPUs, two models, one thermally throttled run)
   are valid; broken copies of them are refused with the reason; docs/run-record.md names
   every field of the schema.
2. scripts/report.py renders the fixtures; the tables' cells are checked against numbers
   taken from the fixture records here (epoch times, utilisation, throughput, ratios,
   throttled seconds) and against hand-worked values; missing fields read "missing". The
   measured H200 records (docs/report-example/records-h200) render too: sub-second epoch times
   with three digits, the bench's rows with their own configuration's clocks and power, its
   configurations told apart on the time axis, close marks not overlapping.
3. The HTML page is self-contained and opens in headless Chromium without script errors,
   its status element reports every chart rendered, and a screenshot is taken. Where
   Chromium is absent or cannot start, that case skips with the reason (a page with a
   deliberate error checks that errors are seen at all).
Cases needing matplotlib skip where /usr/bin/python3 has none (scripts/test.sh installs it).
"""
import base64
import copy
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import check_record  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures", "records")
n = 0
failed_any = False


def report(ok, name, detail=""):
    global n, failed_any
    n += 1
    print("%s %d - %s" % ("ok" if ok else "not ok", n, name))
    if not ok:
        failed_any = True
        for line in str(detail).splitlines()[:25]:
            print("# " + line)


def skip(name, why):
    global n
    n += 1
    print("ok %d - %s # SKIP %s" % (n, name, why))


def load_fixture(name):
    with open(os.path.join(FIX, name)) as f:
        return json.load(f)


def md_tables(text):
    """{title: (header, rows)} of the Markdown report's tables."""
    out, title, lines = {}, None, text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("## "):
            title = lines[i][3:]
        elif lines[i].startswith("| ") and title and title not in out:
            split = lambda l: [c.strip() for c in re.split(r"(?<!\\)\|", l.strip())[1:-1]]  # noqa: E731
            header = split(lines[i])
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("| "):
                rows.append(split(lines[i]))
                i += 1
            out[title] = (header, rows)
            continue
        i += 1
    return out


def cell(tables, title_start, row_key, column):
    titles = [t for t in tables if t.startswith(title_start)]
    if not titles:
        return "<no table %s>" % title_start
    header, rows = tables[titles[0]]
    col = header.index(column) if column in header else None
    if col is None:
        return "<no column %s in %s>" % (column, header)
    for r in rows:
        if all(k in r for k in row_key):
            return r[col]
    return "<no row %s>" % (row_key,)


# ---- 1. records and schema ------------------------------------------------------------------
schema = check_record.load_schema()
fixtures = sorted(glob.glob(os.path.join(FIX, "*.json")))
errs = {os.path.basename(p): check_record.validate(json.load(open(p)), schema) for p in fixtures}
report(len(fixtures) == 6 and not any(errs.values()), "the 6 fixture records are valid run records",
       json.dumps(errs, indent=1))

base = load_fixture("a100-resnet50.json")
mutations = [
    ("a missing required field", lambda r: r["results"].pop("epoch_time_s"), "epoch_time_s"),
    ("a string where a number belongs", lambda r: r["results"].__setitem__("throughput_per_s", "fast"),
     "throughput_per_s"),
    ("a newer schema version", lambda r: r.__setitem__("schema_version", 2), "schema_version"),
    ("an unknown device kind", lambda r: r["devices"][0].__setitem__("kind", "tpu"), "kind"),
    ("a series array of the wrong length", lambda r: r["devices"][0]["monitor"]["series"]["temp_c"].pop(),
     "temp_c"),
    ("an epoch that ends before it starts", lambda r: r["results"]["epochs"][1].__setitem__("t_end_s", 0.0),
     "ends before"),
    ("a CPU device with an NVML monitor", lambda r: r["devices"][0].__setitem__("kind", "cpu"), "devices[0]"),
    ("a bad UTC time", lambda r: r.__setitem__("started_utc", "yesterday"), "started_utc"),
]
for what, mutate, expect in mutations:
    r = copy.deepcopy(base)
    mutate(r)
    e = check_record.validate(r, schema)
    report(bool(e) and any(expect in x for x in e), "the checker refuses %s" % what, "\n".join(e) or "accepted")

doc = open(os.path.join(ROOT, "docs", "run-record.md")).read()
names = set()


def walk(node):
    if isinstance(node, dict):
        for k, v in node.get("properties", {}).items():
            names.add(k)
            walk(v)
        for k in node.get("required", []):
            names.add(k)
        for k, v in node.items():
            if k != "properties":
                walk(v)
    elif isinstance(node, list):
        for v in node:
            walk(v)


walk(schema)
undocumented = sorted(k for k in names if "`%s`" % k not in doc)
report(not undocumented and len(names) > 100, "docs/run-record.md names every field of the schema (%d)" % len(names),
       "undocumented: %s" % undocumented)

# ---- 2. the report from the fixtures --------------------------------------------------------
have_mpl = subprocess.run([sys.executable, "-c", "import matplotlib"], capture_output=True).returncode == 0
tmp = tempfile.mkdtemp(prefix="dlt_report_test_")
out = os.path.join(tmp, "out")
NAMES = ["render the report from the fixtures", "results table (model x GPU): epoch time and GPU util",
         "runs table: throughput, peak memory, throttled time", "ratios to the baseline GPU",
         "spec table: measured beside theoretical and datasheet values", "throttling table and advice",
         "missing fields read 'missing', absent runs 'no run'", "the HTML page is self-contained with every chart"]
if not have_mpl:
    for name in NAMES:
        skip(name, "no matplotlib for %s (apt-get install python3-matplotlib)" % sys.executable)
else:
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "report.py")] + fixtures + ["--out", out, "--baseline", "A100"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    md = open(os.path.join(out, "report.md")).read() if p.returncode == 0 else ""
    report(p.returncode == 0 and "8 charts" in p.stdout, NAMES[0], p.stdout + p.stderr)
    T = md_tables(md)
    A, H = "NVIDIA A100-SXM4-80GB", "NVIDIA H200"
    fx = {(g, m): load_fixture("%s-%s.json" % (g, m)) for g in ("a100", "h200") for m in ("resnet50", "gpt2")}
    label = {"resnet50": "resnet50 (fp16, batch 256, 50,000 images/epoch)",
             "gpt2": "gpt2 (bf16, batch 16, 16,000,000 tokens/epoch)"}
    gname = {"a100": A, "h200": H}
    bad = []
    for (g, m), rec in fx.items():
        want_epoch = "%.2f" % rec["results"]["epoch_time_s"]
        want_util = "%.0f" % rec["devices"][0]["monitor"]["summary"]["gpu_util_mean"]
        got_e = cell(T, "Results", [label[m]], "%s epoch time (s)" % gname[g])
        got_u = cell(T, "Results", [label[m]], "%s GPU util (%%)" % gname[g])
        if (got_e, got_u) != (want_epoch, want_util):
            bad.append("%s %s: %s / %s, expected %s / %s" % (g, m, got_e, got_u, want_epoch, want_util))
    # by hand: the fixtures' round numbers
    hand = [("resnet50", A, "20.00", "95"), ("resnet50", H, "10.00", "97"), ("gpt2", A, "100.00", "96"),
            ("gpt2", H, "40.00", "98")]
    for m, gn, e, u in hand:
        got = (cell(T, "Results", [label[m]], "%s epoch time (s)" % gn), cell(T, "Results", [label[m]], "%s GPU util (%%)" % gn))
        if got != (e, u):
            bad.append("by hand %s %s: %s, expected %s" % (m, gn, got, (e, u)))
    report(not bad, NAMES[1], "\n".join(bad))

    bad = []
    for (g, m), rec in fx.items():
        res = rec["results"]
        want = "{:,.0f} {}/s".format(res["throughput_per_s"], res["sample_unit"])  # all >= 100
        got = cell(T, "Every run", [label[m], gname[g]], "throughput")
        if got != want:
            bad.append("%s %s throughput %s, expected %s" % (g, m, got, want))
        want_mem = "{:,.0f}".format(res["peak_memory_bytes"] / 2**20)
        if cell(T, "Every run", [label[m], gname[g]], "peak memory (MiB)") != want_mem:
            bad.append("%s %s memory %s" % (g, m, cell(T, "Every run", [label[m], gname[g]], "peak memory (MiB)")))
        th = cell(T, "Every run", [label[m], gname[g]], "throttled")
        want_th = "thermal 15.0 s" if (g, m) == ("a100", "resnet50") else "no"
        if th != want_th:
            bad.append("%s %s throttled %s, expected %s" % (g, m, th, want_th))
    for m, gn, want in [("resnet50", A, "2,500 images/s"), ("gpt2", H, "400,000 tokens/s")]:
        if cell(T, "Every run", [label[m], gn], "throughput") != want:
            bad.append("by hand: %s %s" % (m, gn))
    report(not bad, NAMES[2], "\n".join(bad))

    bad = []
    col_s, col_t = "speed-up (baseline epoch time / epoch time)", "throughput ratio"
    for m in ("resnet50", "gpt2"):
        a, h = fx[("a100", m)]["results"], fx[("h200", m)]["results"]
        want_s = "%.2fx" % (a["epoch_time_s"] / h["epoch_time_s"])
        want_t = "%.2fx" % (h["throughput_per_s"] / a["throughput_per_s"])
        got = (cell(T, "Ratios", [label[m], H], col_s), cell(T, "Ratios", [label[m], H], col_t))
        if got != (want_s, want_t):
            bad.append("%s: %s, expected %s" % (m, got, (want_s, want_t)))
        if cell(T, "Ratios", [label[m], A], col_s) != "1.00 (baseline)":
            bad.append("%s: baseline row %s" % (m, cell(T, "Ratios", [label[m], A], col_s)))
    if cell(T, "Ratios", [label["resnet50"], H], col_s) != "2.00x" or cell(T, "Ratios", [label["gpt2"], H], col_s) != "2.50x":
        bad.append("by hand: 2.00x and 2.50x")
    report(not bad, NAMES[3], "\n".join(bad))

    bad = []
    spec = lambda row, g: cell(T, "Spec table", [row], g)  # noqa: E731
    hg, ag = load_fixture("h200-gpu.json")["devices"][0], load_fixture("a100-gpu.json")["devices"][0]
    bw = hg["measured"]["copy_bandwidth_gbps"]
    want = "{:,.0f} GB/s, {:.0f}% of theoretical (datasheet {:,.0f} GB/s)".format(
        bw, 100 * bw / hg["theoretical"]["memory_bandwidth_gbps"], hg["datasheet"]["memory_bandwidth_gbps"])
    if spec("bandwidth, measured (D2D copy)", H) != want or want != "4,000 GB/s, 81% of theoretical (datasheet 4,800 GB/s)":
        bad.append("H200 bandwidth: %s, expected %s" % (spec("bandwidth, measured (D2D copy)", H), want))
    if spec("bandwidth, measured (D2D copy)", A) != "1,700 GB/s, 83% of theoretical":
        bad.append("A100 bandwidth (no datasheet): %s" % spec("bandwidth, measured (D2D copy)", A))
    for k in ("fp32", "tf32", "fp16", "bf16"):
        want_h = "%.1f TFLOP/s (datasheet %.1f)" % (hg["measured"]["gemm"][k]["tflops"], hg["datasheet"][k + "_tflops"])
        want_a = "%.1f TFLOP/s" % ag["measured"]["gemm"][k]["tflops"]
        if spec("GEMM %s, measured (cuBLAS)" % k, H) != want_h or spec("GEMM %s, measured (cuBLAS)" % k, A) != want_a:
            bad.append("GEMM %s: %s / %s" % (k, spec("GEMM %s, measured (cuBLAS)" % k, H),
                                               spec("GEMM %s, measured (cuBLAS)" % k, A)))
    for row, g, want in [("SMs", H, "132"), ("compute capability", A, "8.0 (Ampere)"), ("host", A, "gpu-b"),
                         ("CUDA", A, "driver 12.8, runtime 13.0")]:
        if spec(row, g) != want:
            bad.append("%s %s: %s, expected %s" % (row, g, spec(row, g), want))
    report(not bad, NAMES[4], "\n".join(bad))

    bad = []
    thr = cell(T, "Throttling", [label["resnet50"], A], "thermal throttling (s)")
    dur = fx[("a100", "resnet50")]["duration_s"]
    want = "15.0 (%.0f%% of %.1f s)" % (100 * 15.0 / dur, dur)
    if thr != want:
        bad.append("thermal seconds %s, expected %s" % (thr, want))
    if cell(T, "Throttling", [label["resnet50"], A], "SM clock while thermally throttled (MHz)") != "1,200":
        bad.append("clock while throttled: %s" % cell(T, "Throttling", [label["resnet50"], A],
                                                        "SM clock while thermally throttled (MHz)"))
    if cell(T, "Throttling", [label["resnet50"], H], "thermal throttling (s)") != "0.0 (0% of 36.0 s)":
        bad.append("H200 should not throttle")
    if not re.search(r"A100-SXM4-80GB ran resnet50 \(fp16, batch 256, 50,000 images/epoch\) thermally throttled "
                     r"for 15\.0 s "
                     r"\(30\.0-45\.0 s\).*1200 MHz while throttled against 1410 MHz", md):
        bad.append("the advice does not state the interval and the clocks")
    report(not bad, NAMES[5], "\n".join(bad))

    # missing fields and absent runs: a record without throughput and utilisation, one GPU
    # without a gpu_report, a model not run on one GPU
    mdir = os.path.join(tmp, "missing")
    os.makedirs(mdir)
    r = load_fixture("h200-resnet50.json")
    r["results"]["throughput_per_s"] = None
    r["devices"][0]["monitor"]["summary"]["gpu_util_mean"] = None
    json.dump(r, open(os.path.join(mdir, "h200-resnet50.json"), "w"))
    for name in ("a100-resnet50.json", "a100-gpt2.json", "h200-gpu.json"):
        shutil.copy(os.path.join(FIX, name), mdir)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "report.py")]
                       + sorted(glob.glob(os.path.join(mdir, "*.json"))) + ["--out", os.path.join(tmp, "mout")],
                       capture_output=True, text=True)
    M = md_tables(open(os.path.join(tmp, "mout", "report.md")).read()) if p.returncode == 0 else {}
    got = [cell(M, "Every run", [label["resnet50"], H], "throughput"),
           cell(M, "Results", [label["resnet50"]], "%s GPU util (%%)" % H),
           cell(M, "Results", [label["gpt2"]], "%s epoch time (s)" % H),
           cell(M, "Spec table", ["GEMM fp16, measured (cuBLAS)"], A),
           cell(M, "Spec table", ["GEMM fp16, measured (cuBLAS)"], H)]
    report(p.returncode == 0 and got == ["missing", "missing", "no run", "missing", "720.0 TFLOP/s (datasheet 989.4)"],
           NAMES[6], "%s\n%s" % (got, p.stderr))

    page = open(os.path.join(out, "report.html")).read()
    figs = re.findall(r'<figure class="chart"[^>]*><img alt="[^"]*" src="data:image/svg\+xml;base64,', page)
    remote = re.findall(r'(?:src|href)\s*=\s*"(?!data:|#)[^"]*"', page) + re.findall(r"https?://", page)
    # expected: 2 bar charts + one series chart per run with NVML samples (4 training, 2 gpu_report)
    expect = 2 + sum(1 for p_ in fixtures if json.load(open(p_))["devices"][0]["monitor"]["series"]["points"])
    report(len(figs) == expect == 8 and not remote, NAMES[7], "figures %d (expected %d), remote references %s"
           % (len(figs), expect, remote[:5]))

# ---- 2b. the measured H200 records (docs/report-example/records-h200) ----------------------
# The first GPU records the report saw: sub-second epoch times read 0.15 and 0.16 with two
# decimals, the bench's four rows all showed the run's one power mean, its eager and graph
# marks on the time axis both read "b256 fp16", and close epoch marks ran into each other.
H200_NAME = "the measured H200 records: three-digit epoch times, bench rows per configuration, distinct marks"
h200 = sorted(glob.glob(os.path.join(ROOT, "docs", "report-example", "records-h200", "*.json")))
if not have_mpl:
    skip(H200_NAME, "no matplotlib for %s" % sys.executable)
elif len(h200) != 4:
    report(False, H200_NAME, "expected 4 records in docs/report-example/records-h200, found %d" % len(h200))
else:
    hout = os.path.join(tmp, "h200")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "report.py")] + h200 + ["--out", hout],
                       capture_output=True, text=True)
    bad = [] if p.returncode == 0 and "6 charts" in p.stdout else ["report.py: %s%s" % (p.stdout, p.stderr)]
    HT = md_tables(open(os.path.join(hout, "report.md")).read()) if p.returncode == 0 else {}
    H = "NVIDIA H200"
    for prec in ("fp16", "bf16"):
        rec = json.load(open(os.path.join(ROOT, "docs", "report-example", "records-h200", "h200-resnet50-%s.json" % prec)))
        lab = "resnet50 (%s, batch 256, 10,000 images/epoch)" % prec
        want = "%.3f" % rec["results"]["epoch_time_s"]
        for title, col in (("Results", "%s epoch time (s)" % H), ("Every run", "epoch time (s)")):
            if cell(HT, title, [lab], col) != want:
                bad.append("%s %s: %s, expected %s" % (title, lab, cell(HT, title, [lab], col), want))
    if cell(HT, "Results", ["resnet50 (bf16, batch 256, 10,000 images/epoch)"], "%s epoch time (s)" % H) != "0.147":
        bad.append("by hand: bf16 epoch 0.147 s")
    brec = json.load(open(os.path.join(ROOT, "docs", "report-example", "records-h200", "h200-bench.json")))
    ser = brec["devices"][0]["monitor"]["series"]
    powers = set()
    for c in brec["results"]["configs"]:
        lab = "resnet50 step bench (%s, batch 256, nhwc, %s, 50,000 images/epoch)" % (c["precision"], c["mode"])
        vals = [w for t, w in zip(ser["t_s"], ser["power_w"]) if c["t_start_s"] <= t <= c["t_end_s"]]
        want = "{:,.0f}".format(sum(vals) / len(vals))
        got = cell(HT, "Every run", [lab, H], "power mean (W)")
        powers.add(got)
        if got != want:
            bad.append("%s power %s, expected the configuration's %s" % (lab, got, want))
    if len(powers) < 2:
        bad.append("the bench rows share one power mean: %s" % powers)
    page = open(os.path.join(hout, "report.html")).read() if p.returncode == 0 else ""
    svgs = [base64.b64decode(x).decode() for x in re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', page)]
    bench_svg = [x for x in svgs if "h200-bench.json" in x]
    for mark in ("fp16 eager", "fp16 graph", "bf16 eager", "bf16 graph"):
        if not bench_svg or mark not in bench_svg[0]:
            bad.append("the bench chart has no mark %r" % mark)
    import report_charts
    levels = getattr(report_charts, "mark_levels", lambda *a: "no report_charts.mark_levels")
    got = [levels([0.25, 2.52, 2.66], ["epoch 0", "epoch 1", "epoch 2"], 2.6),
           levels([0.2, 1.5, 2.4, 3.4], ["fp16 eager"] * 4, 4.2),
           [report_charts.sig(v) for v in (0.1473, 0.0123, 2.5, 64362.2)]]
    if got != [[0, 0, 1], [0, 0, 0, 0], ["0.147", "0.0123", "2.50", "64,362"]]:
        bad.append("mark rows and bar labels: %s" % (got,))
    report(not bad, H200_NAME, "\n".join(bad))

# ---- 3. the page in headless Chromium ------------------------------------------------------
CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium():
    for c in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(c)
        if p:
            return p
    return None


def run_chromium(exe, url, extra, timeout=120):
    """(returncode, stdout, stderr) of one headless run with a fresh profile."""
    profile = tempfile.mkdtemp(prefix="dlt_chromium_")
    try:
        p = subprocess.run([exe] + CHROME_FLAGS + ["--user-data-dir=" + profile, "--enable-logging=stderr", "--v=0"]
                           + extra + [url], capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return -1, "", "timed out after %d s" % timeout
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def console_errors(stderr):
    return [l for l in stderr.splitlines() if "CONSOLE" in l and ("Uncaught" in l or "Error" in l)]


def status_of(dom):
    m = re.search(r'<p id="report-status"([^>]*)>([^<]*)</p>', dom)
    return (m.group(2), m.group(1)) if m else (None, "")


CH_NAMES = ["Chromium sees a deliberate script error (the check can fail)",
            "the report opens in headless Chromium without script errors, every chart rendered",
            "a screenshot of the report"]
exe = chromium()
why = None
if exe is None:
    why = "chromium is not installed (apt-get install chromium)"
elif not have_mpl:
    why = "no report to open (matplotlib missing)"
else:
    rc, dom, err = run_chromium(exe, "about:blank", ["--dump-dom"], timeout=60)
    if rc != 0 or "<html" not in dom:
        why = "chromium cannot start here: rc %s, %s" % (rc, (err.strip().splitlines() or ["no output"])[-1][:200])
if why:
    for name in CH_NAMES:
        skip(name, why)
else:
    broken = os.path.join(tmp, "broken.html")
    page = open(os.path.join(out, "report.html")).read()
    with open(broken, "w") as f:
        f.write(page.replace("</body>", "<script>window.addEventListener('load', function () "
                                        "{ undefinedFunction(); });</script></body>"))
    rc, dom, err = run_chromium(exe, "file://" + broken, ["--virtual-time-budget=5000", "--dump-dom"])
    st, attrs = status_of(dom)
    report(rc == 0 and (console_errors(err) or (st or "").startswith("error")), CH_NAMES[0],
           "rc %s status %r, console: %s" % (rc, st, console_errors(err)))

    rc, dom, err = run_chromium(exe, "file://" + os.path.join(out, "report.html"),
                                ["--virtual-time-budget=5000", "--dump-dom"])
    st, attrs = status_of(dom)
    charts = re.search(r'data-charts="(\d+)"', attrs)
    ok = rc == 0 and st == "ok: 8 charts" and charts and charts.group(1) == "8" and not console_errors(err)
    report(ok, CH_NAMES[1], "rc %s status %r attrs %r console errors %s\n%s"
           % (rc, st, attrs, console_errors(err), err[-1500:]))

    shot = os.path.join(tmp, "report.png")
    rc, _, err = run_chromium(exe, "file://" + os.path.join(out, "report.html"),
                              ["--window-size=1280,3000", "--screenshot=" + shot])
    sig = open(shot, "rb").read(8) if os.path.exists(shot) else b""
    size = os.path.getsize(shot) if os.path.exists(shot) else 0
    report(rc == 0 and sig == b"\x89PNG\r\n\x1a\n" and size > 50000, CH_NAMES[2],
           "rc %s, %d bytes\n%s" % (rc, size, err[-800:]))
    keep = os.environ.get("DLT_REPORT_SCREENSHOT")
    if keep and os.path.exists(shot):
        shutil.copy(shot, keep)

shutil.rmtree(tmp, ignore_errors=True)
print("1..%d" % n)
sys.exit(1 if failed_any else 0)
