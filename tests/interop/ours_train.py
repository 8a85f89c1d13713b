#!/usr/bin/env python3
"""ours_train.py - libdltrain's side of tests/interop/torch_train_parity.py.

Runs ResNet50 training steps through the Python binding (bindings/python) on weights and
batches given as files, and writes what it saw as files, so that the PyTorch side can
compare without loading libdltrain (and its cuDNN) into the torch process. No torch needed:
numpy and the binding only.

Modes (one per call):

  train (default)
    ours_train.py --weights W.safetensors --inputs X.npy --labels Y.npy --out DIR
                  [--lib build/libdltrain.so] [--device cpu|cuda] [--format auto|contiguous|
                  channels_last] [--mode fp32|fp16|bf16] [--batch 32] [--steps 20]
                  [--init-scale 65536] [--dump-step 1] [--lr 0.01]
    The model is resnet50 with the classifier width of W's fc.bias, in train mode (batch
    statistics), loaded from W (PyTorch state_dict names). Step k (1-based) uses images
    [(k-1)*batch, k*batch) of X ([N,3,32,32] float32, NCHW) and Y ([N] int64). Per step:
      zero_grad(set_to_none) -> forward (fp16/bf16: inside autocast) -> cross_entropy (mean)
      -> fp32, bf16: backward, SGD step | fp16: scaler.scale(loss).backward(),
      scaler.unscale_, scaler.step, scaler.update (GradScaler(init_scale), PyTorch's other
      defaults). bf16 has no scaler, as in PyTorch's bf16 recipes.
    SGD: lr 0.01, momentum 0. TF32 off in every mode. --format auto is channels-last on
    CUDA (both model and input) and contiguous on the CPU.
    Writes DIR/result.json (per step: loss, found_inf, applied, scale after update) and,
    after step --dump-step (0: none), DIR/grads.safetensors (every parameter gradient by
    parameter name; fp16: after unscale, i.e. true gradients) and DIR/state.safetensors
    (every state entry after the optimizer step, dlt_module_save).

  save-init
    ours_train.py --save-init W.safetensors [--classes 10] [--seed 0] [--lib ...]
    Our own freshly initialised resnet50 (dlt_module_save), for runs without torch.

  make-batches
    ours_train.py --make-batches data_batch_1.bin --count 640 --inputs X.npy --labels Y.npy
    The first --count records as ToTensor gives them (byte / 255 in float32, true division,
    NCHW) and int64 labels, computed with numpy only (no library, no torch).

  check-loader
    ours_train.py --check-loader data_batch_1.bin --inputs X.npy --labels Y.npy [--lib ...]
    Reads the same file through dlt_cifar10_open_file and a non-shuffled f32 loader and
    compares bit for bit with X/Y (the first len(X) images). Exit 0 when identical; prints
    one JSON line.

The library: --lib sets DLTRAIN_LIBRARY (else the variable, else the binding's search);
the package is taken from bindings/python of this checkout when not installed.
Exit status: 0 on success, 1 on a failed check or library error, 2 on bad arguments.
"""

import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))

RECORD = 3073  # CIFAR-10 binary record: 1 label byte + 3072 pixel bytes (R, G, B planes)


# ---- files, shared with torch_train_parity.py and the smoke check (no library needed) ----

def read_cifar(path, count):
    """First `count` records of a CIFAR-10 binary file: (uint8 [count,3,32,32], int64 [count])."""
    with open(path, "rb") as f:
        raw = f.read(count * RECORD)
    if len(raw) != count * RECORD:
        raise ValueError("%s holds fewer than %d records" % (path, count))
    rec = np.frombuffer(raw, dtype=np.uint8).reshape(count, RECORD)
    return rec[:, 1:].reshape(count, 3, 32, 32).copy(), rec[:, 0].astype(np.int64)


def to_tensor_numpy(images_u8):
    """ToTensor in numpy: float32(byte) / float32(255), correctly rounded like torch's div."""
    return images_u8.astype(np.float32) / np.float32(255.0)


_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64,
              "I32": np.int32, "U8": np.uint8, "I8": np.int8, "I16": np.int16,
              "BOOL": np.bool_}


def read_safetensors(path):
    """{name: numpy array} of a safetensors file (a few lines instead of the safetensors
    package, so the smoke check runs where it is not installed). BF16 is not handled."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dt = np.dtype(_ST_DTYPES[meta["dtype"]]).newbyteorder("<")
        a, b = meta["data_offsets"]
        out[name] = np.frombuffer(data[base + a:base + b], dtype=dt).reshape(meta["shape"]).copy()
    return out


# ---- the library ----------------------------------------------------------------------------

def import_dltrain(lib):
    if lib:
        os.environ["DLTRAIN_LIBRARY"] = os.path.abspath(lib)
    import importlib
    try:
        return importlib.import_module("dltrain")
    except ImportError:  # a source checkout: the package in bindings/python
        sys.path.insert(0, os.path.join(REPO, "bindings", "python"))
        return importlib.import_module("dltrain")


def save_init(args):
    dlt = import_dltrain(args.lib)
    ctx = dlt.Context("cpu", seed=args.seed)
    model = dlt.nn.resnet50(args.classes, ctx=ctx)
    model.save(args.save_init)
    print(json.dumps({"saved": args.save_init, "classes": args.classes, "seed": args.seed,
                      "state_entries": model.num_state()}))
    return 0


def make_batches(args):
    x_u8, y = read_cifar(args.make_batches, args.count)
    np.save(args.inputs, to_tensor_numpy(x_u8))
    np.save(args.labels, y)
    print(json.dumps({"inputs": args.inputs, "labels": args.labels, "count": args.count}))
    return 0


def check_loader(args):
    """Our CIFAR-10 reader and loader against the given arrays, bit for bit."""
    dlt = import_dltrain(args.lib)
    x = np.load(args.inputs)
    y = np.load(args.labels)
    n = x.shape[0]
    ctx = dlt.Context("cpu")
    ds = dlt.data.CIFAR10.from_file(args.check_loader, ctx=ctx)
    loader = dlt.data.DataLoader(ds, batch_size=min(n, 256), shuffle=False, drop_last=False,
                                 dtype="f32", memory_format="contiguous", label_dtype="i64")
    xs, ys = [], []
    got = 0
    for bx, by in loader:
        xs.append(bx.numpy().copy())
        ys.append(by.numpy().copy())
        got += bx.shape[0]
        if got >= n:
            break
    ox = np.concatenate(xs)[:n]
    oy = np.concatenate(ys)[:n]
    same_x = ox.shape == x.shape and np.array_equal(ox.view(np.uint32), x.astype(np.float32).view(np.uint32))
    same_y = oy.shape == y.shape and np.array_equal(oy, y)
    diff = int(np.count_nonzero(ox.view(np.uint32) != x.astype(np.float32).view(np.uint32))) \
        if ox.shape == x.shape else -1
    print(json.dumps({"images": n, "inputs_identical": bool(same_x), "labels_identical": bool(same_y),
                      "differing_elements": diff}))
    return 0 if same_x and same_y else 1


def train(args):
    dlt = import_dltrain(args.lib)
    import dltrain.functional as F

    t0 = time.time()
    x_all = np.load(args.inputs)
    y_all = np.load(args.labels)
    if x_all.dtype != np.float32 or x_all.ndim != 4 or y_all.dtype != np.int64:
        print("ours_train: inputs must be float32 [N,3,H,W], labels int64 [N]", file=sys.stderr)
        return 2
    if x_all.shape[0] < args.steps * args.batch or y_all.shape[0] < args.steps * args.batch:
        print("ours_train: %d steps of %d need %d images, the files hold %d"
              % (args.steps, args.batch, args.steps * args.batch, x_all.shape[0]), file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)

    ctx = dlt.Context(args.device)
    ctx.set_allow_tf32(False)
    fmt = args.format
    if fmt == "auto":
        fmt = "channels_last" if ctx.is_cuda else "contiguous"
    fp16 = args.mode == "fp16"
    amp = {"fp16": dlt.float16, "bf16": dlt.bfloat16}.get(args.mode)

    classes = dlt.load_tensor(args.weights, "fc.bias", ctx=ctx).shape[0]
    with ctx:
        model = dlt.nn.resnet50(classes)
        if fmt == "channels_last":
            model.set_format("channels_last")
        model.load(args.weights)
        model.train()
        named = list(model.named_parameters())  # fetched after set_format
        names = [n for n, _ in named]
        params = [p for _, p in named]
        opt = dlt.optim.SGD(params, lr=args.lr, momentum=0.0)
        scaler = dlt.amp.GradScaler(init_scale=args.init_scale) if fp16 else None
        t_setup = time.time() - t0

        rec = {"loss": [], "found_inf": [], "applied": [], "scale": []}
        t1 = time.time()
        for k in range(args.steps):
            lo, hi = k * args.batch, (k + 1) * args.batch
            x = dlt.from_numpy(x_all[lo:hi], format=fmt)
            y = dlt.from_numpy(y_all[lo:hi])
            opt.zero_grad(set_to_none=True)
            with dlt.autocast(dtype=amp or dlt.float16, enabled=amp is not None):
                loss = F.cross_entropy(model(x), y)
            dump = k + 1 == args.dump_step
            if fp16:
                scaler.scale(loss).backward()
                scaler.unscale_(opt)  # the true gradients, as PyTorch's explicit unscale_
                found = scaler.found_inf(opt)
                if dump:
                    dlt.safetensors_save(os.path.join(args.out, "grads.safetensors"),
                                         [(n, p.grad) for n, p in zip(names, params)])
                scaler.step(opt)
                applied = opt.last_step_applied
                scaler.update()
                scale = scaler.get_scale()
            else:
                loss.backward()
                found = False
                if dump:
                    dlt.safetensors_save(os.path.join(args.out, "grads.safetensors"),
                                         [(n, p.grad) for n, p in zip(names, params)])
                opt.step()
                applied = opt.last_step_applied
                scale = None
            if dump:
                model.save(os.path.join(args.out, "state.safetensors"))
            rec["loss"].append(loss.item())
            rec["found_inf"].append(bool(found))
            rec["applied"].append(bool(applied))
            rec["scale"].append(scale)
        ctx.synchronize()
        t_steps = time.time() - t1

    result = dict(rec)
    result.update({
        "side": "libdltrain", "library": dlt.library_path(), "version": dlt.version_string(),
        "device": ctx.device, "device_name": ctx.device_name, "format": fmt, "mode": args.mode,
        "classes": classes, "batch": args.batch, "steps": args.steps, "lr": args.lr,
        "init_scale": args.init_scale if fp16 else None, "dump_step": args.dump_step,
        "grads": "grads.safetensors" if 0 < args.dump_step <= args.steps else None,
        "state": "state.safetensors" if 0 < args.dump_step <= args.steps else None,
        "setup_s": round(t_setup, 3), "steps_s": round(t_steps, 3),
    })
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    bad = [i + 1 for i, v in enumerate(rec["loss"]) if not math.isfinite(v)]
    print("ours_train: %s %s %s, %d steps of %d: loss %.6f -> %.6f%s (setup %.1f s, steps %.1f s)"
          % (ctx.device, args.mode, fmt, args.steps, args.batch, rec["loss"][0], rec["loss"][-1],
             (", non-finite loss at steps %s" % bad) if bad else "", t_setup, t_steps))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description="libdltrain's side of torch_train_parity.py")
    ap.add_argument("--lib", help="path to libdltrain.so (sets DLTRAIN_LIBRARY)")
    ap.add_argument("--save-init", metavar="W.safetensors")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--make-batches", metavar="CIFAR_FILE")
    ap.add_argument("--count", type=int, default=640)
    ap.add_argument("--check-loader", metavar="CIFAR_FILE")
    ap.add_argument("--weights")
    ap.add_argument("--inputs")
    ap.add_argument("--labels")
    ap.add_argument("--out")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--format", default="auto", choices=("auto", "contiguous", "channels_last"))
    ap.add_argument("--mode", default="fp32", choices=("fp32", "fp16", "bf16"))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--init-scale", type=float, default=65536.0)
    ap.add_argument("--dump-step", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.01)
    args = ap.parse_args(argv)

    if args.save_init:
        return save_init(args)
    if not (args.inputs and args.labels):
        ap.error("--inputs and --labels are needed")
    if args.make_batches:
        return make_batches(args)
    if args.check_loader:
        return check_loader(args)
    if not (args.weights and args.out):
        ap.error("training needs --weights and --out")
    if args.steps < 1 or args.batch < 1:
        ap.error("--steps and --batch must be positive")
    return train(args)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # the library's message, not a traceback, reaches the caller
        if os.environ.get("OURS_TRAIN_TRACEBACK"):
            raise
        print("ours_train: %s: %s" % (type(exc).__name__, exc), file=sys.stderr)
        sys.exit(1)
