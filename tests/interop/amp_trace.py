#!/usr/bin/env python3
# amp_trace.py - where does a mixed-precision ResNet50 forward lose accuracy? Every
# convolution and BatchNorm output of one train-mode forward, ours and PyTorch's, measured
# against a float64 PyTorch forward of the same weights and batch (the parity setup of
# torch_train_parity.py: torchvision resnet50(num_classes=10) after torch.manual_seed(0), the
# first 32 CIFAR-10 images through to_tensor).
#
#     python3 tests/interop/amp_trace.py --lib build-gpu/libdltrain.so --data .device/cifar10
#
# Our side runs in its own process (this file with --side ours; torch's cuDNN is never loaded
# into it). It writes the model's own forward loss and a functional re-run of the same forward
# (block.c's order: conv, BatchNorm with ReLU fused, the block's last BatchNorm with the
# residual add and ReLU fused), which keeps every intermediate; the two losses must agree.
# PyTorch's BatchNorm outputs before a ReLU are passed through the ReLU, and the block's last
# BatchNorm is compared after the add and ReLU (the block's output), so both sides name the
# same quantity. --variants runs our side again with environment settings (NAME=VALUE[,...],
# ';' between variants) to see which implementation moves the error.
#
# The first table: relative L2 error of each activation against float64, per mode and side;
# its last rows are the logits and the loss. The second: the forward loss of --batches
# batches against float64 (mean, median, max of the relative gap): one batch's gap is one
# draw of a noisy quantity, the mean over many says which side is more accurate.
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ours_train  # noqa: E402  (CIFAR reader, library import)

LAYERS = ((64, 3), (128, 4), (256, 6), (512, 3))


def block_names():
    """(prefix, stride, has_downsample) of every bottleneck, torchvision's names."""
    out = []
    for li, (_planes, n) in enumerate(LAYERS):
        for b in range(n):
            out.append(("layer%d.%d" % (li + 1, b), 2 if (b == 0 and li > 0) else 1, b == 0))
    return out


def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    den = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / den) if den > 0 else float(np.linalg.norm(a))


# ---- our side ------------------------------------------------------------------------------

def ours_side(args):
    dlt = ours_train.import_dltrain(args.lib)
    import dltrain.functional as F
    ctx = dlt.Context(args.device)
    ctx.set_allow_tf32(False)
    fmt = "channels_last" if ctx.is_cuda else "contiguous"
    amp = {"fp32": None, "bf16": dlt.bfloat16, "fp16": dlt.float16}[args.mode]
    x_np = np.load(args.inputs)
    y_np = np.load(args.labels)
    out = {}
    with ctx:
        names = json.loads(args.names)
        W = {}
        for n in names:
            t = dlt.load_tensor(args.weights, n)
            W[n] = t.to_format("channels_last") if (fmt == "channels_last" and len(t.shape) == 4) else t
        x = dlt.from_numpy(x_np[:args.batch], format=fmt)
        y = dlt.from_numpy(y_np[:args.batch])

        # the model's own forward: the loss the training step sees
        model = dlt.nn.resnet50(int(W["fc.bias"].shape[0]))
        if fmt == "channels_last":
            model.set_format("channels_last")
        model.load(args.weights)
        model.train()
        losses = []
        for k in range(len(x_np) // args.batch):
            xb = dlt.from_numpy(x_np[k * args.batch:(k + 1) * args.batch], format=fmt)
            yb = dlt.from_numpy(y_np[k * args.batch:(k + 1) * args.batch])
            with dlt.autocast(dtype=amp or dlt.float16, enabled=amp is not None):
                losses.append(F.cross_entropy(model(xb), yb).item())
        out["loss_model"] = np.array(losses[0])
        out["batch_losses"] = np.array(losses)

        acts = {}

        def conv(name, t, stride=1, pad=0):
            r = F.conv2d(t, W[name + ".weight"], None, stride, pad)
            acts[name] = r
            return r

        def bn(name, t, residual=None, relu=True, key=None):
            r = F.batch_norm2d_act(t, residual, relu, W[name + ".weight"], W[name + ".bias"],
                                   W[name + ".running_mean"], W[name + ".running_var"], True,
                                   0.1, 1e-5)
            acts[key or name] = r
            return r

        with dlt.autocast(dtype=amp or dlt.float16, enabled=amp is not None):
            a = bn("bn1", conv("conv1", x, 2, 3))
            a = F.max_pool2d(a, 3, 2, 1)
            acts["maxpool"] = a
            for prefix, stride, ds in block_names():
                h = bn(prefix + ".bn1", conv(prefix + ".conv1", a))
                h = bn(prefix + ".bn2", conv(prefix + ".conv2", h, stride, 1))
                h = conv(prefix + ".conv3", h)
                if ds:
                    idt = bn(prefix + ".downsample.1", conv(prefix + ".downsample.0", a, stride),
                             relu=False)
                else:
                    idt = a
                a = bn(prefix + ".bn3", h, idt, True, key=prefix)
            p = F.flatten(F.adaptive_avg_pool2d(a, 1), 1)
            acts["avgpool"] = p
            logits = F.linear(p, W["fc.weight"], W["fc.bias"])
            acts["logits"] = logits
            loss = F.cross_entropy(logits, y)
        out["loss"] = np.array(loss.item())
        for k, v in acts.items():
            out["act:" + k] = v.numpy().astype(np.float32)
    np.savez(args.out, **out)


# ---- PyTorch's side ------------------------------------------------------------------------

def torch_forward(torch, model, x, y, mode, dev):
    import torch.nn.functional as TF
    acts, hooks = {}, []
    relu_after = {"bn1"} | {p + s for p, _, _ in block_names() for s in (".bn1", ".bn2")}

    def hook(name):
        def f(_m, _inp, o):
            o = o.detach()
            acts[name] = (torch.relu(o) if name in relu_after else o).float().cpu().numpy()
        return f

    for name, m in model.named_modules():
        if isinstance(m, (torch.nn.Conv2d, torch.nn.BatchNorm2d)) and not name.endswith(".bn3"):
            hooks.append(m.register_forward_hook(hook(name)))
        elif name in [p for p, _, _ in block_names()]:
            hooks.append(m.register_forward_hook(hook(name)))
        elif name in ("maxpool", "fc"):
            hooks.append(m.register_forward_hook(hook("logits" if name == "fc" else name)))
    hooks.append(model.avgpool.register_forward_hook(
        lambda _m, _i, o: acts.__setitem__("avgpool", o.detach().flatten(1).float().cpu().numpy())))
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mode)
    with torch.autocast(torch.device(dev).type, dtype=amp or torch.float16, enabled=amp is not None):
        loss = TF.cross_entropy(model(x), y)
    for h in hooks:
        h.remove()
    return float(loss.item()), acts


def torch_losses(torch, model, X, Y, mode, dev, batch):
    """The forward loss of each batch of `batch` images (train mode, autocast per mode)."""
    import torch.nn.functional as TF
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mode)
    out = []
    with torch.no_grad():
        for k in range(X.shape[0] // batch):
            with torch.autocast(torch.device(dev).type, dtype=amp or torch.float16,
                                enabled=amp is not None):
                out.append(float(TF.cross_entropy(model(X[k * batch:(k + 1) * batch]),
                                                  Y[k * batch:(k + 1) * batch]).item()))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1] if __doc__ else None)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--data", help="directory holding data_batch_1.bin, or the file")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--modes", default="bf16,fp16,fp32")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--batches", type=int, default=20,
                    help="forward losses of this many batches against float64 (the first is traced)")
    ap.add_argument("--variants", default="DLT_BN_IMPL=cudnn;DLT_BN_IMPL=native;DLT_CONV_IMPL=native",
                    help="';'-separated environment settings for extra runs of our side (bf16)")
    ap.add_argument("--side", default="both", choices=("both", "ours"))
    ap.add_argument("--mode"), ap.add_argument("--inputs"), ap.add_argument("--labels")
    ap.add_argument("--weights"), ap.add_argument("--names"), ap.add_argument("--out")
    args = ap.parse_args()
    if args.side == "ours":
        return ours_side(args)

    import torch
    import torchvision
    from safetensors.torch import save_file
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    work = tempfile.mkdtemp(prefix="dlt_amp_trace_")
    cifar = args.data
    if os.path.isdir(cifar):
        cifar = os.path.join(cifar, "data_batch_1.bin")
    u8, labels = ours_train.read_cifar(cifar, args.batch * args.batches)
    x_np = ours_train.to_tensor_numpy(u8)
    files = {"inputs": os.path.join(work, "x.npy"), "labels": os.path.join(work, "y.npy"),
             "weights": os.path.join(work, "w.safetensors")}
    np.save(files["inputs"], x_np)
    np.save(files["labels"], labels)
    torch.manual_seed(0)
    init = torchvision.models.resnet50(num_classes=10)
    state = {k: v.contiguous() for k, v in init.state_dict().items()}
    save_file(state, files["weights"])
    names = [k for k in state if not k.endswith("num_batches_tracked")]

    dev = args.device
    X = torch.from_numpy(x_np).to(dev)
    Y = torch.from_numpy(labels).to(dev)
    runs = {}
    m64 = torchvision.models.resnet50(num_classes=10)
    m64.load_state_dict(state)
    m64 = m64.to(dev, dtype=torch.float64).train()
    B = args.batch
    runs["truth"] = torch_forward(torch, m64, X[:B].double(), Y[:B], "fp64", dev)
    batch_losses = {"truth": torch_losses(torch, m64, X.double(), Y, "fp64", dev, B)}
    modes = args.modes.split(",")
    for mode in modes:
        m = torchvision.models.resnet50(num_classes=10)
        m.load_state_dict(state)
        m = m.to(dev).to(memory_format=torch.channels_last).train()
        Xc = X.contiguous(memory_format=torch.channels_last)
        runs["torch " + mode] = torch_forward(torch, m, Xc[:B], Y[:B], mode, dev)
        batch_losses["torch " + mode] = torch_losses(torch, m, Xc, Y, mode, dev, B)
    jobs = [(mode, "") for mode in modes] + [("bf16", v) for v in args.variants.split(";") if v]
    for mode, var in jobs:
        out = os.path.join(work, "ours-%s-%d.npz" % (mode, len(runs)))
        env = dict(os.environ)
        for kv in filter(None, var.split(",")):
            k, _, v = kv.partition("=")
            env[k] = v
        cmd = [sys.executable, os.path.abspath(__file__), "--side", "ours", "--lib", args.lib,
               "--device", dev, "--mode", mode, "--inputs", files["inputs"], "--labels",
               files["labels"], "--weights", files["weights"], "--names", json.dumps(names),
               "--out", out, "--batch", str(B)]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            print("ours %s %s failed:\n%s" % (mode, var, r.stderr[-3000:]))
            continue
        z = np.load(out)
        acts = {k[4:]: z[k] for k in z.files if k.startswith("act:")}
        label = "ours " + mode + ((" " + var) if var else "")
        runs[label] = (float(z["loss"]), acts)
        batch_losses[label] = [float(v) for v in z["batch_losses"]]
        print("%s: model forward loss %.6f, functional %.6f" % (label, float(z["loss_model"]), float(z["loss"])))

    loss64, truth = runs["truth"]
    cols = [k for k in runs if k != "truth"]
    print("\nrelative L2 error against float64 (PyTorch, same weights and batch); loss64 = %.6f" % loss64)
    print("| activation | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for name in truth:
        cells = []
        for c in cols:
            a = runs[c][1].get(name)
            cells.append("%.2e" % rel_err(a, truth[name]) if a is not None and a.shape == truth[name].shape
                         else "-")
        print("| %s | %s |" % (name, " | ".join(cells)))
    print("| loss (rel. to fp64) | " + " | ".join("%.3f%%" % (100 * abs(runs[c][0] - loss64) / loss64)
                                              for c in cols) + " |")
    print("| loss | " + " | ".join("%.6f" % runs[c][0] for c in cols) + " |")

    # one batch's loss gap is one draw: the same over many batches
    t64 = np.array(batch_losses["truth"])
    print("\nforward loss of %d batches of %d against float64: |loss - loss64| / loss64"
          % (len(t64), B))
    print("| run | mean | median | max | batch 1 |")
    print("|---|---|---|---|---|")
    for c in cols:
        g = np.abs(np.array(batch_losses[c]) - t64) / t64
        print("| %s | %.3f%% | %.3f%% | %.3f%% | %.3f%% |"
              % (c, 100 * g.mean(), 100 * np.median(g), 100 * g.max(), 100 * g[0]))


if __name__ == "__main__":
    main()
