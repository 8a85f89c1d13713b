#!/usr/bin/env python3
# torch_interop.py - libdltrain's resnet50 against torchvision's, through safetensors files.
#
# Run on the GPU machine (torch, torchvision, safetensors and numpy installed), after
# building the tests (which builds tests/interop/resnet_io.c as <build>/tests/resnet_io):
#
#     python3 tests/interop/torch_interop.py --exe build/tests/resnet_io
#     python3 tests/interop/torch_interop.py --exe build/tests/resnet_io --batch 4 --hw 64 --no-cuda
#
# Checks, each printed as a row of the table at the end (exit status 1 if any fails):
#  1. a checkpoint our library wrote (freshly initialised resnet50) loads into torchvision's
#     resnet50 with safetensors.torch.load_file + load_state_dict(strict=True), every dtype and
#     shape equal to torchvision's own state_dict;
#  2. torchvision weights saved with safetensors.torch.save_file (BN parameters and running
#     statistics perturbed so that they matter) load into ours, and the two forward passes
#     agree (fp32, TF32 off on both sides, relative norm error <= 1e-4) in eval mode and in
#     train mode, on the CPU and on CUDA (contiguous and channels-last on CUDA); after a
#     train-mode forward the running statistics and num_batches_tracked agree too;
#  3. our initialisation run through torchvision gives the same logits as through ours.
import argparse
import copy
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torchvision
from safetensors.torch import load_file, save_file

TOL = 1e-4


def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    den = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / den) if den > 0 else float(np.linalg.norm(a))


def run(exe, *args):
    p = subprocess.run([exe, *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{exe} {' '.join(args)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return p.stdout


def perturbed_torchvision(seed):
    torch.manual_seed(seed)
    m = torchvision.models.resnet50(weights=None)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
                mod.num_batches_tracked.fill_(5)
    return m


def state_errors(ours_sd, ref_sd):
    """Worst relative error of the running statistics, and whether the counts agree."""
    worst, worst_name, counts_ok = 0.0, "", True
    for k, v in ref_sd.items():
        if "running_" in k:
            e = rel_err(ours_sd[k].numpy(), v.detach().cpu().numpy())
            if e > worst:
                worst, worst_name = e, k
        elif k.endswith("num_batches_tracked"):
            counts_ok &= int(ours_sd[k]) == int(v)
    return worst, worst_name, counts_ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", required=True, help="path to the resnet_io program")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--hw", type=int, default=64)
    ap.add_argument("--no-cuda", action="store_true")
    args = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(False)

    tmp = tempfile.mkdtemp(prefix="dlt_interop_")
    path = lambda name: os.path.join(tmp, name)
    rows = []  # (check, value, ok)

    # 1. ours -> torchvision, strict
    run(args.exe, "--seed", "1", "--save-init", path("ours.safetensors"))
    ours = load_file(path("ours.safetensors"))
    tv = torchvision.models.resnet50(weights=None)
    try:
        tv.load_state_dict(ours, strict=True)
        ref_sd = tv.state_dict()
        same = list(ours.keys()) and all(
            ours[k].dtype == v.dtype and tuple(ours[k].shape) == tuple(v.shape) for k, v in ref_sd.items()
        ) and set(ours) == set(ref_sd)
        rows.append(("ours -> torchvision load_state_dict(strict=True)", f"{len(ours)} tensors", bool(same)))
    except Exception as exc:  # noqa: BLE001 - reported in the table
        rows.append(("ours -> torchvision load_state_dict(strict=True)", str(exc)[:60], False))

    # input, shared by every forward
    torch.manual_seed(123)
    x = torch.randn(args.batch, 3, args.hw, args.hw, dtype=torch.float32)
    x.numpy().astype("<f4").tofile(path("x.f32"))
    shape = f"{args.batch},3,{args.hw},{args.hw}"

    # 3. our initialisation through torchvision (eval, CPU) vs through ours
    run(args.exe, "--load", path("ours.safetensors"), "--input", path("x.f32"), "--shape", shape,
        "--output", path("y_ours_init.f32"))
    tv.eval()
    with torch.no_grad():
        y_ref = tv(x).numpy()
    y = np.fromfile(path("y_ours_init.f32"), dtype="<f4").reshape(args.batch, 1000)
    e = rel_err(y, y_ref)
    rows.append(("our init: torchvision vs ours, cpu eval", f"{e:.2e}", e <= TOL))

    # 2. torchvision -> ours, forward parity
    tvm = perturbed_torchvision(7)
    save_file({k: v.contiguous() for k, v in tvm.state_dict().items()}, path("tv.safetensors"))
    devices = ["cpu"]
    if not args.no_cuda and torch.cuda.is_available():
        devices.append("cuda")
    for dev in devices:
        formats = ["contiguous"] + (["channels-last"] if dev == "cuda" else [])
        for fmt in formats:
            for mode in ("eval", "train"):
                ref = copy.deepcopy(tvm).to(dev)
                xr = x.to(dev)
                if fmt == "channels-last":
                    ref = ref.to(memory_format=torch.channels_last)
                    xr = xr.to(memory_format=torch.channels_last)
                ref.train(mode == "train")
                with torch.no_grad():
                    y_ref = ref(xr).float().cpu().numpy()
                extra = (["--cuda"] if dev == "cuda" else []) + (["--channels-last"] if fmt == "channels-last" else [])
                extra += ["--train"] if mode == "train" else []
                run(args.exe, *extra, "--load", path("tv.safetensors"), "--input", path("x.f32"),
                    "--shape", shape, "--output", path("y.f32"), "--save-state", path("state.safetensors"))
                y = np.fromfile(path("y.f32"), dtype="<f4").reshape(args.batch, 1000)
                e = rel_err(y, y_ref)
                rows.append((f"torchvision -> ours, {dev} {fmt} {mode}: logits", f"{e:.2e}", e <= TOL))
                se, sname, counts_ok = state_errors(load_file(path("state.safetensors")), ref.state_dict())
                rows.append((f"torchvision -> ours, {dev} {fmt} {mode}: running stats, counts",
                             f"{se:.2e} {'ok' if counts_ok else 'COUNTS DIFFER'}", se <= TOL and counts_ok))

    w = max(len(r[0]) for r in rows)
    print(f"{'check'.ljust(w)}  {'value':>22}  result")
    print("-" * (w + 34))
    for name, value, ok in rows:
        print(f"{name.ljust(w)}  {value:>22}  {'ok' if ok else 'FAIL'}")
    print(f"(torch {torch.__version__}, torchvision {torchvision.__version__}, batch {args.batch}, "
          f"{args.hw}x{args.hw}, tolerance {TOL}; files in {tmp})")
    return 0 if all(ok for _, _, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
