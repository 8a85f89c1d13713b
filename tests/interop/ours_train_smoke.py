#!/usr/bin/env python3
"""ours_train_smoke.py - checks tests/interop/ours_train.py (our side of the PyTorch
training-parity script) without torch, on the CPU, and the parity script's comparison code
on our own results. Run by hand (it is not part of meson test: about a minute on 2 cores):

    DLTRAIN_LIBRARY=$PWD/build/libdltrain.so /usr/bin/python3 tests/interop/ours_train_smoke.py \
        [--data /path/to/data_batch_1.bin] [--keep]

It makes our own freshly initialised resnet50(10) (dlt_module_save), the first images of a
CIFAR-10 file as ToTensor gives them (numpy), then runs ours_train.py as the parity script
does (fp32 x3, fp16 x1 at init_scale 1024, fp16 x8 from 65536, bf16 x1) and checks:
  - our CIFAR-10 loader gives the numpy ToTensor bits (and a 1-ulp change is caught);
  - every result is complete and finite; gradient files hold every parameter by name;
  - the weights after step 1 are exactly w - float32(0.01) * grad (1 ulp allowed for FMA);
    num_batches_tracked is 1 and the running means moved;
  - fp16: the scale halves exactly on the steps with inf/NaN and stays otherwise, skipped
    steps are the found_inf steps; at init_scale 1024 no overflow, and loss and gradients
    near fp32's (the unscale happened);
  - torch_train_parity.compare() passes our results given as both sides, and FAILs when a
    gradient is off by 1%, a scale or skip differs, or the loss curve leaves PyTorch's band
    or stays too far from its runs' mean.
Prints "ok"/"not ok" lines and "N passed, N failed"; exit 1 on any failure.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ours_train  # noqa: E402
import torch_train_parity as ttp  # noqa: E402  (torch is optional at import)

DEFAULT_DATA = "/work/shared/data/cifar10-subset/data_batch_1.bin"
BATCH = 32
PASSED, FAILED = [], []


def check(name, ok, detail=""):
    (PASSED if ok else FAILED).append(name)
    print("%s - %s%s" % ("ok" if ok else "not ok", name, (" (%s)" % detail) if detail else ""),
          flush=True)


def ours(*args):
    p = subprocess.run([sys.executable, os.path.join(HERE, "ours_train.py")] + list(args),
                       capture_output=True, text=True)
    if p.stdout.strip():
        print("  " + p.stdout.strip().replace("\n", "\n  "))
    return p


def run(files, out, mode, steps, init_scale=65536.0, dump_step=1, fmt="contiguous", inputs=None):
    p = ours("--device", "cpu", "--format", fmt, "--mode", mode, "--batch", str(BATCH), "--steps", str(steps),
             "--init-scale", repr(init_scale), "--dump-step", str(dump_step),
             "--weights", files["w"], "--inputs", inputs or files["x"], "--labels", files["y"], "--out", out)
    if p.returncode != 0:
        raise SystemExit("ours_train.py failed: %s" % p.stderr)
    with open(os.path.join(out, "result.json")) as f:
        rec = json.load(f)
    for key in ("grads", "state"):
        rec[key] = ours_train.read_safetensors(os.path.join(out, rec[key])) if rec.get(key) else None
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=DEFAULT_DATA, help="a CIFAR-10 binary file")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if not os.environ.get("DLTRAIN_LIBRARY"):
        raise SystemExit("set DLTRAIN_LIBRARY to the libdltrain.so to test")
    tmp = tempfile.mkdtemp(prefix="dlt_ours_train_smoke_")
    files = {"w": os.path.join(tmp, "w.safetensors"), "x": os.path.join(tmp, "x.npy"),
             "y": os.path.join(tmp, "y.npy")}

    # ---- inputs and weights ----
    p = ours("--save-init", files["w"], "--classes", "10", "--seed", "0")
    check("save-init writes our resnet50(10)", p.returncode == 0 and os.path.isfile(files["w"]), p.stderr)
    w0 = ours_train.read_safetensors(files["w"])
    pnames = [n for n in w0 if "running_" not in n and not n.endswith("num_batches_tracked")]
    check("weights: 161 parameters, 159 buffers, fc [10, 2048]",
          len(pnames) == 161 and len(w0) == 320 and w0["fc.weight"].shape == (10, 2048))
    p = ours("--make-batches", args.data, "--count", str(8 * BATCH), "--inputs", files["x"],
             "--labels", files["y"])
    x = np.load(files["x"])
    check("make-batches: float32 [256,3,32,32] in [0,1], labels int64 0..9",
          p.returncode == 0 and x.dtype == np.float32 and x.shape == (8 * BATCH, 3, 32, 32)
          and x.min() >= 0 and x.max() <= 1 and np.load(files["y"]).dtype == np.int64)
    p = ours("--check-loader", args.data, "--inputs", files["x"], "--labels", files["y"])
    check("check-loader: our loader == numpy ToTensor, bit for bit", p.returncode == 0, p.stderr)
    bad = x.copy()
    bad[3, 1, 7, 9] = np.nextafter(bad[3, 1, 7, 9], np.float32(2))
    np.save(os.path.join(tmp, "bad.npy"), bad)
    p = ours("--check-loader", args.data, "--inputs", os.path.join(tmp, "bad.npy"), "--labels", files["y"])
    check("check-loader: a 1-ulp difference fails",
          p.returncode == 1 and '"differing_elements": 1' in p.stdout)

    # ---- the three runs of the parity script ----
    r32 = run(files, os.path.join(tmp, "fp32"), "fp32", 3)
    r16g = run(files, os.path.join(tmp, "fp16_grad"), "fp16", 1, 1024.0)
    r16s = run(files, os.path.join(tmp, "fp16_scale"), "fp16", 8, 65536.0, 0)
    rbf = run(files, os.path.join(tmp, "bf16"), "bf16", 1)
    # rounding-level twins of the fp32 step 1: the other memory format, and inputs 1 ulp off
    r32cl = run(files, os.path.join(tmp, "fp32_cl"), "fp32", 1, fmt="channels_last")
    xu = x.view(np.uint32).copy()
    xu[(x > 0) & (np.arange(x.size).reshape(x.shape) % 2 == 0)] += 1
    np.save(os.path.join(tmp, "x_ulp.npy"), xu.view(np.float32))
    r32u = run(files, os.path.join(tmp, "fp32_ulp"), "fp32", 1, inputs=os.path.join(tmp, "x_ulp.npy"))

    for name, r, n in (("fp32", r32, 3), ("fp16 1024", r16g, 1), ("fp16 65536", r16s, 8)):
        complete = all(len(r[k]) == n for k in ("loss", "found_inf", "applied", "scale"))
        check("%s: %d steps recorded, finite losses" % (name, n),
              complete and all(np.isfinite(r["loss"])), str(r["loss"]))
    check("fp32: every step applied, no scale", all(r32["applied"]) and r32["scale"] == [None] * 3)

    for name, r in (("fp32", r32), ("fp16 1024", r16g), ("bf16", rbf)):
        g = r["grads"]
        check("%s: gradients of all 161 parameters by name, shapes as the weights" % name,
              sorted(g) == sorted(pnames) and all(g[n].shape == w0[n].shape for n in pnames))
        check("%s: gradients finite and non-zero" % name,
              all(np.isfinite(g[n]).all() and np.any(g[n] != 0) for n in pnames))
        st = r["state"]
        check("%s: state after the step has every entry" % name, sorted(st) == sorted(w0))
        bad = 0
        for n in pnames:  # p + float32(-0.01) * g, rounded twice or once (FMA): either is exact
            two = w0[n] + np.float32(-0.01) * g[n]
            fma = (w0[n].astype(np.float64)  # a float32 product is exact in float64
                   + np.float64(np.float32(-0.01)) * g[n].astype(np.float64)).astype(np.float32)
            bad += int(np.count_nonzero((st[n] != two) & (st[n] != fma)))
        check("%s: weights after step 1 == w + float32(-0.01)*grad exactly" % name, bad == 0,
              "%d elements differ" % bad)
        moved = np.mean([np.mean(st[n] != w0[n]) for n in pnames])
        check("%s: the step changed the weights" % name, moved > 0.5, "%.3f of elements" % moved)
        counts = [n for n in w0 if n.endswith("num_batches_tracked")]
        check("%s: num_batches_tracked == 1, running means moved" % name,
              all(int(st[n]) == 1 for n in counts) and
              all(np.any(st[n] != 0) for n in w0 if n.endswith("running_mean")))

    # fp16 scaler behaviour, from PyTorch's update rule (growth_interval 2000 is not reached)
    s, ok = 65536.0, True
    for f, a, sc in zip(r16s["found_inf"], r16s["applied"], r16s["scale"]):
        s = s * 0.5 if f else s
        ok &= sc == s and a == (not f)
    check("fp16 65536: scale halves exactly on inf/NaN steps, those steps skipped", ok,
          "found_inf %s, scales %s" % (r16s["found_inf"], r16s["scale"]))
    check("fp16 65536: the loss of step 1 equals the init_scale-1024 run's (same weights, batch)",
          r16s["loss"][0] == r16g["loss"][0], "%r vs %r" % (r16s["loss"][0], r16g["loss"][0]))
    check("fp16 1024: no overflow at step 1, step applied, scale stays 1024",
          r16g["found_inf"] == [False] and r16g["applied"] == [True] and r16g["scale"] == [1024.0])
    e = abs(r16g["loss"][0] - r32["loss"][0]) / r32["loss"][0]
    check("fp16 vs fp32 step-1 loss within 1e-2", e <= 1e-2, "%.2e" % e)
    w, wn = ttp.worst_rel(r16g["grads"], r32["grads"], pnames)
    check("fp16 gradients are unscaled: within 2x of fp32's (a missing 1/1024 gives ~1e3)", w <= 2,
          "worst rel. err %.2e %s" % (w, wn))
    e = abs(rbf["loss"][0] - r32["loss"][0]) / r32["loss"][0]
    check("bf16 vs fp32 step-1 loss within 0.15, and not equal (autocast was on)",
          0 < e <= 0.15, "%.2e" % e)

    # how far rounding alone moves the step-1 gradients of this model (docs/numerics.md)
    for name, twin in (("channels_last", r32cl), ("1-ulp inputs", r32u)):
        w, wn = ttp.worst_rel(twin["grads"], r32["grads"], pnames)
        errs = sorted(ttp.rel_err(twin["grads"][n], r32["grads"][n]) for n in pnames)
        le = abs(twin["loss"][0] - r32["loss"][0]) / r32["loss"][0]
        print("# fp32 step 1, contiguous vs %s: loss %.1e, gradients median %.1e, worst %.1e (%s)"
              % (name, le, errs[len(errs) // 2], w, wn))

    # ---- the parity script's comparison, with our results as both sides ----
    r32b = dict(r32, loss=[v * (1 + 1e-3 * (-1) ** k) for k, v in enumerate(r32["loss"])])
    res = {"fp32": {"reruns": [r32, r32b], "ours": r32,
                    "twins": [("torch rerun", r32), ("torch channels_last", r32cl)]},
           "fp16_grad": {"ref": r16g, "ours": r16g, "twins": [("torch rerun", r16g)]},
           "fp16_scale": {"ref": r16s, "ours": r16s}}
    rows, lines, notes = ttp.compare(res, 1024.0)
    print("\n".join(lines))
    ttp.print_table(rows)
    print("\n".join(notes))
    check("compare(): identical results pass every row (%d rows)" % len(rows),
          all(r[3] == "ok" for r in rows), str([r[0] for r in rows if r[3] != "ok"]))

    def statuses(res_x, judge="both"):
        return {r[0]: r[3] for r in ttp.compare(res_x, 1024.0, judge)[0]}

    def fails(label, res_bad, expect_substring, judge="both"):
        st = statuses(res_bad, judge)
        failed = [k for k, v in st.items() if v == "FAIL"]
        check("compare(): %s fails" % label,
              failed and all(expect_substring in f for f in failed), str(failed))
        return st

    g_bad = dict(r32["grads"])
    g_bad["layer3.1.conv2.weight"] = g_bad["layer3.1.conv2.weight"] * np.float32(1.01)
    fp32_bad = dict(res["fp32"], ours=dict(r32, grads=g_bad),
                    twins=[("torch rerun", r32)])
    fails("a gradient 1% off (PyTorch reruns identical)", dict(res, fp32=fp32_bad), "gradients")
    # a rounding-level difference (our channels-last run as "ours") against a yardstick of
    # the same kind (inputs 1 ulp off): the fixed limit fails, the spread row passes
    cl = dict(res, fp32=dict(res["fp32"], ours=dict(r32cl, loss=r32cl["loss"] + r32["loss"][1:]),
                             twins=[("torch rerun", r32), ("torch 1-ulp inputs", r32u)]))
    st = statuses(cl, "both")
    grad_rows = [k for k in st if k.startswith("fp32: gradients")]
    check("compare(): rounding-level gradients: issue limit FAILs, PyTorch-spread row passes",
          [st[k] for k in grad_rows] == ["FAIL", "ok"], str([(k, st[k]) for k in grad_rows]))
    st = statuses(cl, "spread")
    check("compare(): --judge spread turns the issue-limit rows into info",
          "FAIL" not in st.values() and any(v.startswith("info") for v in st.values()), str(st))
    twin_run = dict(r16s, applied=[False] + r16s["applied"][1:])  # one more skipped step
    tw = dict(res, fp16_scale={"ref": r16s, "ours": r16s, "twin": ("torch NCHW", twin_run)})
    st = statuses(tw)
    twin_rows = [k for k in st if "torch NCHW skipped steps" in k]
    check("compare(): the other format's skip sequence is an information row, never a FAIL",
          len(twin_rows) == 1 and st[twin_rows[0]] == "info" and "FAIL" not in st.values(),
          str(st))
    # the losses before the first applied step, against PyTorch's other format on the same
    # batches: 6e-3 off with PyTorch 4e-3 from itself passes the spread row (not the issue's
    # 2e-3); 2e-2 off fails it
    tw_off = dict(r16s, loss=[v * (1 + 4e-3) for v in r16s["loss"]])
    for off, want in ((6e-3, ["FAIL", "ok"]), (2e-2, ["FAIL", "FAIL"])):
        ours_off = dict(r16s, loss=[v * (1 + off) for v in r16s["loss"]])
        st = statuses(dict(res, fp16_scale={"ref": r16s, "ours": ours_off, "twin": ("torch NCHW", tw_off)}))
        pre = [k for k in st if "losses of steps" in k]
        check("compare(): pre-update losses %.0e off, PyTorch's NCHW 4e-3: issue row %s, spread row %s"
              % (off, want[0], want[1]), [st[k] for k in pre] == want, str([(k, st[k]) for k in pre]))
    sc_bad = dict(r16s, scale=r16s["scale"][:-1] + [r16s["scale"][-1] * 2])
    fails("a different last scale", dict(res, fp16_scale={"ref": r16s, "ours": sc_bad}), "scale")
    ap_bad = dict(r16s, applied=[not a for a in r16s["applied"]],
                  found_inf=[not f for f in r16s["found_inf"]])
    fails("different skipped steps", dict(res, fp16_scale={"ref": r16s, "ours": ap_bad}), "fp16 x8")
    far = dict(r32, loss=r32["loss"][:2] + [r32["loss"][2] * 1.05])
    st = fails("a loss 5% outside the reruns' band", dict(res, fp32=dict(res["fp32"], ours=far)),
               "fp32 x3")
    check("compare(): ... both curve rows fail", [v for k, v in st.items() if "x3" in k] == ["FAIL"] * 2)
    drift = dict(r32, loss=[v * 1.0025 for v in r32["loss"]])  # inside the band, 2.5x too far
    st = statuses(dict(res, fp32=dict(res["fp32"], ours=drift, twins=[])))
    check("compare(): a curve steadily 2.5x farther than the reruns: band ok, RMS row FAILs",
          [v for k, v in st.items() if "x3" in k] == ["ok", "FAIL"], str(st))
    st = statuses(dict(res, fp32=dict(res["fp32"], reruns=[r32, r32], twins=[])))
    check("compare(): identical PyTorch runs make the curve rows SKIP",
          [v for k, v in st.items() if "x3" in k] == ["SKIP"] * 2)
    # bf16 rows: our bf16 run as PyTorch's, a copy 0.1% off as its rerun, our fp32 run as
    # the float64 truth
    twin = dict(rbf, loss=[rbf["loss"][0] * (1 + 1e-4)],
                grads={n: v * np.float32(1.001) for n, v in rbf["grads"].items()})
    bres = {"bf16": {"ref": rbf, "ours": rbf, "twins": [("torch rerun", twin)]}}
    st = {r[0]: r[3] for r in ttp.compare(bres, 1024.0, "both", r32)[0]}
    check("compare(): bf16 rows pass for identical runs (%d rows)" % len(st),
          len(st) == 4 and all(v == "ok" for v in st.values()), str(st))
    # bf16 step-1 gradients are ~100% from float64's (docs/numerics.md), so 4x, not 1.5x
    g_far = {n: v * np.float32(4.0) for n, v in rbf["grads"].items()}
    st = {r[0]: r[3] for r in ttp.compare({"bf16": dict(bres["bf16"], ours=dict(rbf, grads=g_far))},
                                          1024.0, "both", r32)[0]}
    failed = sorted(k for k, v in st.items() if v == "FAIL")
    check("compare(): bf16 gradients 4x too large fail the spread and the float64 rows",
          len(failed) == 2 and all("gradients" in f for f in failed), str(failed))
    over = dict(r16g, found_inf=[True])
    fails("an overflow in the init_scale-1024 step",
          dict(res, fp16_grad=dict(res["fp16_grad"], ours=over)), "overflow")

    if args.keep:
        print("files kept in %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (len(PASSED), len(FAILED)))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
