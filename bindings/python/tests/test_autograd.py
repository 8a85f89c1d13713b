"""Autograd through the binding against numerically computed gradients.

The reference is independent of the library: the same function written in plain Python
float64, differentiated by central finite differences.
"""

import math
import random

import dltrain
import dltrain.functional as F

from util import assert_close, cpu


def _linear_ce_loss(x, w, b, targets):
    """mean over rows of cross_entropy(x w^T + b) in float64 (lists of lists)."""
    total = 0.0
    for i, row in enumerate(x):
        z = [sum(row[k] * w[j][k] for k in range(len(row))) + b[j] for j in range(len(w))]
        m = max(z)
        lse = m + math.log(sum(math.exp(v - m) for v in z))
        total += lse - z[targets[i]]
    return total / len(x)


def _fd_grad(f, values, eps=1e-6):
    """Central differences of f() w.r.t. every entry of the nested list `values`."""
    def walk(v):
        if isinstance(v[0], list):
            return [walk(r) for r in v]
        g = []
        for k in range(len(v)):
            old = v[k]
            v[k] = old + eps
            fp = f()
            v[k] = old - eps
            fm = f()
            v[k] = old
            g.append((fp - fm) / (2 * eps))
        return g
    return walk(values)


def test_linear_cross_entropy_gradients_match_finite_differences():
    ctx = cpu()
    rng = random.Random(7)
    N, K, M = 5, 4, 3
    xv = [[rng.uniform(-1, 1) for _ in range(K)] for _ in range(N)]
    wv = [[rng.uniform(-1, 1) for _ in range(K)] for _ in range(M)]
    bv = [rng.uniform(-0.5, 0.5) for _ in range(M)]
    tv = [rng.randrange(M) for _ in range(N)]
    x = dltrain.tensor(xv, ctx=ctx).requires_grad_()
    w = dltrain.tensor(wv, ctx=ctx).requires_grad_()
    b = dltrain.tensor(bv, ctx=ctx).requires_grad_()
    t = dltrain.tensor(tv, ctx=ctx)
    loss = F.cross_entropy(F.linear(x, w, b), t)
    assert loss.shape == () and loss.dtype == dltrain.f32
    ref = _linear_ce_loss(xv, wv, bv, tv)
    assert_close(loss.item(), ref, rtol=1e-5, what="loss")
    loss.backward()
    f = lambda: _linear_ce_loss(xv, wv, bv, tv)  # noqa: E731
    assert_close(w.grad.tolist(), _fd_grad(f, wv), rtol=1e-4, atol=1e-6, what="dL/dw")
    assert_close(b.grad.tolist(), _fd_grad(f, bv), rtol=1e-4, atol=1e-6, what="dL/db")
    assert_close(x.grad.tolist(), _fd_grad(f, xv), rtol=1e-4, atol=1e-6, what="dL/dx")
    assert w.grad.shape == (M, K) and w.grad.dtype == dltrain.f32


def test_elementwise_chain_gradients_match_finite_differences():
    ctx = cpu()
    rng = random.Random(3)
    # values kept away from the ReLU kink at 0
    av = [rng.choice([-1, 1]) * rng.uniform(0.1, 1.0) for _ in range(6)]
    bv = [rng.uniform(-1, 1) for _ in range(6)]
    a = dltrain.tensor(av, ctx=ctx).requires_grad_()
    b = dltrain.tensor(bv, ctx=ctx).requires_grad_()
    # loss = mean(relu(a) * 2.5 + b) + sum(b) * -0.5 ; b feeds two ops (fan-out sums)
    loss_t = F.add(F.mean(F.add(F.mul_scalar(F.relu(a), None, 2.5), b)),
                   F.mul_scalar(F.sum(b), None, -0.5))

    def f():
        return (sum(max(v, 0.0) * 2.5 + u for v, u in zip(av, bv)) / len(av)
                - 0.5 * sum(bv))
    assert_close(loss_t.item(), f(), rtol=1e-6, what="loss")
    loss_t.backward()
    assert_close(a.grad.tolist(), _fd_grad(f, av), rtol=1e-5, atol=1e-7, what="dL/da")
    assert_close(b.grad.tolist(), _fd_grad(f, bv), rtol=1e-5, atol=1e-7, what="dL/db")


def test_backward_with_explicit_output_gradient():
    ctx = cpu()
    x = dltrain.tensor([[1.0, -2.0], [3.0, 0.5]], ctx=ctx).requires_grad_()
    y = F.mul_scalar(x, None, 3.0)
    g = dltrain.tensor([[1.0, 2.0], [-1.0, 0.25]], ctx=ctx)
    dltrain.backward(y, g)
    assert x.grad.tolist() == [[3.0, 6.0], [-3.0, 0.75]]


def test_gradients_accumulate_and_zero_grad_resets():
    ctx = cpu()
    w = dltrain.tensor([1.0, -1.0, 2.0], ctx=ctx).requires_grad_()
    assert w.requires_grad and w.grad is None
    for _ in range(2):
        (w * 2.0).sum().backward()
    assert w.grad.tolist() == [4.0, 4.0, 4.0]  # += across backward passes
    dltrain.zero_grad([w], set_to_none=False)
    assert w.grad.tolist() == [0.0, 0.0, 0.0]
    dltrain.zero_grad([w, None])  # set_to_none=True, None entries skipped
    assert w.grad is None
    (w * 5.0).sum().backward()
    assert w.grad.tolist() == [5.0, 5.0, 5.0]  # overwritten after set-to-none


def test_no_grad_records_nothing_and_detach_cuts_the_tape():
    ctx = cpu()
    w = dltrain.tensor([1.0, 2.0], ctx=ctx).requires_grad_()
    assert ctx.tape_live_nodes() == 0
    with dltrain.no_grad(ctx):
        assert not ctx.grad_enabled
        y = (w * 2.0).sum()
    assert ctx.grad_enabled
    assert ctx.tape_live_nodes() == 0
    try:
        y.backward()
    except dltrain.InvalidArgument as e:
        assert e.code == dltrain.errors.ERR_INVALID_STATE
    else:
        raise AssertionError("backward through a no-grad result worked")
    z = (w * 2.0)
    assert ctx.tape_live_nodes() >= 1
    d = z.detach()
    assert d.tolist() == [2.0, 4.0]
    del z, d
    assert ctx.tape_live_nodes() == 0  # releasing the results frees their recording
    assert dltrain.set_grad_enabled(False, ctx) is True
    assert dltrain.set_grad_enabled(True, ctx) is False


def test_tape_memory_returns_after_backward():
    ctx = cpu()
    w = dltrain.tensor([[0.5] * 8] * 8, ctx=ctx).requires_grad_()
    x = dltrain.rand((16, 8), ctx=ctx)
    (F.linear(x, w).relu().sum()).backward()  # creates w.grad
    base_count = ctx.memory_stat("count")
    base_bytes = ctx.memory_allocated()
    for _ in range(5):
        loss = F.linear(x, w).relu().sum()
        loss.backward()
        del loss
    assert ctx.tape_live_nodes() == 0
    assert ctx.memory_stat("count") == base_count
    assert ctx.memory_allocated() == base_bytes
