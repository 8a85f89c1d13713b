#!/usr/bin/env python3
"""Writes the ResNet-block golden file of tests/test_golden.c with PyTorch (run by
/usr/bin/python3 with torch; any version from 1.13, CPU), in the manner of llm.c's
test_gpt2: a reference run made once and committed, so the tests never need torch.

The net, as our modules build it (Sequential names = PyTorch's state_dict names):
    0 Conv2d(3, 8, 3, padding=1, bias=False)   1 BatchNorm2d(8)   2 ReLU
    3 MaxPool2d(2, 2)
    4 BasicBlock(8, 8)                           torchvision's: conv-BN-ReLU-conv-BN,
    5 BasicBlock(8, 16, stride=2)                + identity or 1x1-conv-BN downsample, ReLU
    6 AdaptiveAvgPool2d(1)   7 Flatten   8 Linear(16, 10)
on x [4, 3, 8, 8] in training mode, cross-entropy (mean) against 4 labels.

Stored (float32 unless noted; every value computed in float64 first):
  init.<name>      the state_dict before training: weights, BN running stats,
                   num_batches_tracked (int64)
  x, y             five batches: x [5, 4, 3, 8, 8], y [5, 4] (int64)
  logits, loss     batch 0's forward from init (train mode: batch statistics)
  grad.<name>      every parameter's gradient of that loss
  losses           the loss of each of five SGD + GradScaler steps [5]
  scales           the scaler's scale after each update [5]
  final.<name>     the state_dict after the five steps
The steps follow PyTorch's loop: zero_grad; loss = CE(net(x_t), y_t);
scaler.scale(loss).backward(); scaler.step(opt); scaler.update(), with
SGD(lr=0.05, momentum=0.9, weight_decay=1e-3) and GradScaler(init_scale=1024,
growth_factor=2, backoff_factor=0.5, growth_interval=2). torch.cuda.amp.GradScaler does
nothing without a GPU, so its algorithm (unscale by the reciprocal, inf check, skip, grow
after growth_interval clean steps) is written out below; the scales are powers of two, so
scaling and unscaling are exact.

Metadata: format "dltrain-golden", version "1" (tests/test_golden.c refuses other versions
and says how to regenerate). Regenerate:
    /usr/bin/python3 tests/golden/gen_resnet_block_golden.py
"""
import json
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "fixtures", "resnet_block", "resnet_block.golden.safetensors")
VERSION = "1"
LR, MOMENTUM, WD = 0.05, 0.9, 1e-3
INIT_SCALE, GROWTH, BACKOFF, INTERVAL = 1024.0, 2.0, 0.5, 2
STEPS = 5


def save_safetensors(path, tensors, metadata):
    header, chunks, off = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        dt = {torch.float32: "F32", torch.int64: "I64"}[t.dtype]
        raw = t.numpy().tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)
    os.replace(tmp, path)


class BasicBlock(nn.Module):
    """torchvision.models.resnet.BasicBlock (torchvision is not needed)."""

    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


def make_net():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2, 2),
        BasicBlock(8, 8), BasicBlock(8, 16, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(16, 10))


def perturb_bn(net, gen):
    """BN weights near 1 and biases, running stats away from their defaults: a stronger test
    than PyTorch's initial values (ones, zeros)."""
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.weight.copy_(1.0 + 0.2 * torch.randn(c, generator=gen, dtype=torch.float64))
                m.bias.copy_(0.2 * torch.randn(c, generator=gen, dtype=torch.float64))
                m.running_mean.copy_(0.1 * torch.randn(c, generator=gen, dtype=torch.float64))
                m.running_var.copy_(1.0 + 0.5 * torch.rand(c, generator=gen, dtype=torch.float64))
                m.num_batches_tracked.fill_(3)


def state(net, prefix):
    out = {}
    for k, v in net.state_dict().items():
        out[prefix + k] = v.detach().clone().float() if v.dtype == torch.float64 else v.detach().clone()
    return out


def main():
    torch.manual_seed(20261201)
    gen = torch.Generator().manual_seed(22)
    net = make_net().double()
    perturb_bn(net, gen)
    # the file holds float32 weights: the reference starts from exactly those values
    with torch.no_grad():
        for p in net.state_dict().values():
            if p.dtype == torch.float64:
                p.copy_(p.float().double())
    net.train()
    xs = torch.randn(STEPS, 4, 3, 8, 8, generator=gen, dtype=torch.float64).float().double()
    ys = torch.randint(0, 10, (STEPS, 4), generator=gen)
    out = state(net, "init.")
    out["x"] = xs.float()
    out["y"] = ys

    # batch 0 from the initial state: logits, loss, every gradient (the BN running stats
    # this forward updates are put back, so the training loop starts from init)
    saved = {k: v.clone() for k, v in net.state_dict().items()}
    logits = net(xs[0])
    loss = F.cross_entropy(logits, ys[0])
    loss.backward()
    out["logits"] = logits.detach().float()
    out["loss"] = loss.detach().float().reshape(1)
    for name, p in net.named_parameters():
        out["grad." + name] = p.grad.detach().float()
    net.load_state_dict(saved)
    net.zero_grad(set_to_none=True)

    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    scale, tracker = INIT_SCALE, 0
    losses, scales = [], []
    for t in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(xs[t]), ys[t])
        (loss * scale).backward()
        inv = 1.0 / scale
        found_inf = False
        for p in net.parameters():
            p.grad.mul_(inv)
            found_inf |= not bool(torch.isfinite(p.grad).all())
        if not found_inf:
            opt.step()
        if found_inf:
            scale, tracker = scale * BACKOFF, 0
        else:
            tracker += 1
            if tracker == INTERVAL:
                scale, tracker = scale * GROWTH, 0
        losses.append(loss.item())
        scales.append(scale)
    out["losses"] = torch.tensor(losses, dtype=torch.float32)
    out["scales"] = torch.tensor(scales, dtype=torch.float32)
    out.update(state(net, "final."))
    meta = {"format": "dltrain-golden", "version": VERSION,
            "generator": "tests/golden/gen_resnet_block_golden.py", "torch": torch.__version__,
            "lr": repr(LR), "momentum": repr(MOMENTUM), "weight_decay": repr(WD),
            "init_scale": repr(INIT_SCALE), "growth_interval": str(INTERVAL)}
    save_safetensors(OUT, out, meta)
    print("%s: %d tensors, %d bytes (torch %s); losses %s; scales %s" % (
        os.path.relpath(OUT), len(out), os.path.getsize(OUT), torch.__version__,
        ", ".join("%.6f" % v for v in losses), ", ".join("%g" % v for v in scales)))


if __name__ == "__main__":
    main()
