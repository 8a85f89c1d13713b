"""Training a small network on the CPU through the binding: the loss must fall.

Task: 4 classes of 8-D points, each class a noisy copy of its own centre (separable).
Network: linear(8->16) + relu + linear(16->4), cross-entropy, SGD.
"""

import math
import random

import dltrain
import dltrain.functional as F

from util import cpu, require


def _task(n=64, seed=11):
    rng = random.Random(seed)
    xs, ys = [], []
    for i in range(n):
        k = i % 4
        centre = [2.0 if j in (2 * k, 2 * k + 1) else 0.0 for j in range(8)]
        xs.append([c + rng.gauss(0.0, 0.3) for c in centre])
        ys.append(k)
    return xs, ys


def _accuracy(logits, ys):
    rows = logits.tolist()
    return sum(1 for r, y in zip(rows, ys) if max(range(len(r)), key=r.__getitem__) == y) / len(ys)


def test_mlp_with_ops_and_sgd_learns_a_separable_task():
    ctx = cpu(seed=5)
    xs, ys = _task()
    x = dltrain.tensor(xs, ctx=ctx)
    y = dltrain.tensor(ys, ctx=ctx)  # int64 targets
    assert y.dtype == dltrain.int64

    def param(shape, fan_in):
        bound = 1.0 / math.sqrt(fan_in)
        return dltrain.rand(shape, low=-bound, high=bound, ctx=ctx).requires_grad_()
    w1, b1 = param((16, 8), 8), param((16,), 8)
    w2, b2 = param((4, 16), 16), param((4,), 16)
    opt = dltrain.optim.SGD([w1, b1, w2, b2], lr=0.2)
    assert len(opt) == 4 and abs(opt.lr - 0.2) < 1e-7

    losses = []
    for step in range(120):
        opt.zero_grad()
        logits = F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert abs(losses[0] - math.log(4)) < 0.3, losses[0]
    assert losses[-1] < 0.1 * losses[0], (losses[0], losses[-1])
    assert losses[-1] < min(losses[:10]), "the loss did not fall"
    assert opt.step_count == 120
    with dltrain.no_grad(ctx):
        acc = _accuracy(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), ys)
    assert acc == 1.0, acc
    # the optimizer's parameters are the tensors given (borrowed views of the same handles)
    assert opt.param(0).handle == w1.handle and opt.param(4) is None


def test_sgd_update_rule_matches_pytorch_formula():
    """One SGD step with momentum, dampening and weight decay against the formula."""
    ctx = cpu()
    p = dltrain.tensor([1.0, -2.0, 0.5], ctx=ctx).requires_grad_()
    opt = dltrain.optim.SGD([p], lr=0.1, momentum=0.9, dampening=0.25, weight_decay=0.01)
    assert opt.options() == {"momentum": 0.9, "dampening": 0.25, "weight_decay": 0.01,
                             "nesterov": False, "maximize": False}
    pv = [1.0, -2.0, 0.5]
    buf = None
    for step in range(3):
        opt.zero_grad()
        (p * float(step + 1)).sum().backward()  # grad = step + 1 everywhere
        opt.step()
        g = [(step + 1) + 0.01 * v for v in pv]
        buf = g if buf is None else [0.9 * bv + 0.75 * gv for bv, gv in zip(buf, g)]
        pv = [v - 0.1 * bv for v, bv in zip(pv, buf)]
    got = p.tolist()
    for a, b in zip(got, pv):
        assert abs(a - b) < 1e-6, (got, pv)
    mb = opt.momentum_buffer(0).tolist()
    for a, b in zip(mb, buf):
        assert abs(a - b) < 1e-5, (mb, buf)
    opt.lr = 0.05
    assert abs(opt.lr - 0.05) < 1e-7


def test_mlp_with_modules_learns_a_separable_task():
    require("dlt_linear_create", "dlt_relu_create", "dlt_sequential_create",
            "dlt_module_forward")
    ctx = cpu(seed=5)
    with ctx:
        model = dltrain.nn.Sequential(dltrain.nn.Linear(8, 16), dltrain.nn.ReLU(),
                                      dltrain.nn.Linear(16, 4))
        names = [n for n, _ in model.named_parameters()]
        assert names == ["0.weight", "0.bias", "2.weight", "2.bias"], names
        assert model.param_count() == 8 * 16 + 16 + 16 * 4 + 4
        opt = dltrain.optim.SGD(model.parameters(), lr=0.2)
        xs, ys = _task()
        x, y = dltrain.tensor(xs), dltrain.tensor(ys)
        first = None
        for _ in range(120):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            first = first if first is not None else loss.item()
        last = loss.item()
        assert last < 0.1 * first, (first, last)
        with dltrain.no_grad():
            assert _accuracy(model(x), ys) == 1.0
