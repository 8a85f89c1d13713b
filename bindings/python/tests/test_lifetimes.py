"""Issue 20 item 1: a tensor or module handed out by an owner stays safe after the owner's
close(): tensors hold a reference of their own (they keep their values and never touch
memory that was freed), modules that belonged to a closed container raise ValueError.

Each case failed before the fix (the library freed the handle under the wrapper: ASan saw a
heap-use-after-free, plain builds read nonsense or wrote into another live tensor). The
checks here do not need ASan: after the owner is closed, new objects are made so that
freed memory would be reused, then the old wrapper's values are compared and written, and
the new objects must be unchanged.
"""

import gc

import dltrain
import dltrain.nn as nn

from util import cpu, require


def _churn(ctx, like, n=8):
    """Tensors of like's size and dtype filled with 42: they take over freed memory."""
    return [dltrain.full(like.shape, 42, dtype=like.dtype, ctx=ctx) for _ in range(n)]


def _assert_intact(tensors):
    for t in tensors:
        assert all(v == 42 for v in _flat(t.tolist())), "a live tensor was overwritten"


def _flat(v):
    if isinstance(v, list):
        return [x for y in v for x in _flat(y)]
    return [v]


def _check_survivor(ctx, t, values):
    """t (taken from a closed owner) still reads values, and writing it harms no one."""
    assert t.tolist() == values
    others = _churn(ctx, t)
    assert t.tolist() == values
    t.fill_(-3)
    _assert_intact(others)
    assert all(v == -3 for v in _flat(t.tolist()))


def test_parameters_survive_their_module_close():
    require("dlt_linear_create")
    ctx = cpu(seed=1)
    m = nn.Linear(4, 3, ctx=ctx)
    p = m.parameters()[0]
    values = p.tolist()
    m.close()
    gc.collect()
    assert p.shape == (3, 4)
    _check_survivor(ctx, p, values)


def test_state_dict_and_find_survive_their_module_close():
    require("dlt_linear_create", "dlt_batchnorm2d_create")
    ctx = cpu(seed=2)
    m = nn.Linear(4, 3, ctx=ctx)
    sd = m.state_dict()
    w = m.find("bias")
    a = m.weight  # attribute access is find()
    wv, bv = sd["weight"].tolist(), w.tolist()
    m.close()
    bn = nn.BatchNorm2d(3, ctx=ctx)
    buf = bn.state_dict()["running_var"]
    bn.close()
    gc.collect()
    _check_survivor(ctx, sd["weight"], wv)
    _check_survivor(ctx, w, bv)
    assert a.shape == (3, 4)
    _check_survivor(ctx, buf, [1.0, 1.0, 1.0])
    try:
        m.weight
    except ValueError as e:
        assert "closed" in str(e)
    else:
        raise AssertionError("a closed module still answered")


def test_gradient_survives_its_leaf_close():
    ctx = cpu()
    w = dltrain.tensor([1.0, 2.0, 3.0], ctx=ctx).requires_grad_()
    (w * 2.0).sum().backward()
    g = w.grad
    w.close()
    gc.collect()
    _check_survivor(ctx, g, [2.0, 2.0, 2.0])


def test_optimizer_buffers_and_params_survive_its_close():
    require("dlt_sgd_create")
    ctx = cpu()
    w = dltrain.tensor([1.0, -1.0], ctx=ctx).requires_grad_()
    opt = dltrain.optim.SGD([w], lr=0.5, momentum=0.9)
    (w * 4.0).sum().backward()
    opt.step()
    buf = opt.momentum_buffer(0)
    q = opt.param(0)
    assert buf.tolist() == [4.0, 4.0] and q.tolist() == [-1.0, -3.0]
    w.close()
    opt.close()
    gc.collect()
    _check_survivor(ctx, buf, [4.0, 4.0])
    _check_survivor(ctx, q, [-1.0, -3.0])


def test_scale_tensor_survives_the_scaler_close():
    require("dlt_grad_scaler_create")
    ctx = cpu()
    scaler = dltrain.amp.GradScaler(init_scale=256.0, ctx=ctx)
    s = scaler.scale_tensor
    scaler.close()
    gc.collect()
    _check_survivor(ctx, s, [256.0] if s.ndim else 256.0)


def test_children_of_a_closed_sequential_refuse_use():
    require("dlt_sequential_create", "dlt_linear_create")
    ctx = cpu(seed=4)
    lin = nn.Linear(4, 3, ctx=ctx)
    inner = nn.Sequential(nn.Linear(3, 3, ctx=ctx))
    seq = nn.Sequential(lin, nn.ReLU(ctx=ctx), inner)
    w = lin.weight
    wv = w.tolist()
    seq.close()
    gc.collect()
    for use in (lambda: lin.weight, lambda: lin(dltrain.zeros(2, 4, ctx=ctx)),
                lambda: lin.parameters(), lambda: inner[0].bias, lambda: inner.handle):
        try:
            use()
        except ValueError as e:
            assert "closed" in str(e) and "Sequential" in str(e), str(e)
        else:
            raise AssertionError("a child of a closed Sequential was usable")
    _check_survivor(ctx, w, wv)  # taken before the close: a reference of its own


def test_module_close_defers_nothing_the_user_cannot_see():
    """Closing a module frees it at once (no hidden deferral): its own handle is gone and
    the memory of parameters nobody holds is returned."""
    require("dlt_linear_create")
    ctx = cpu()
    base = ctx.memory_stat("count")
    m = nn.Linear(64, 64, ctx=ctx)
    assert ctx.memory_stat("count") > base
    m.close()
    assert m.closed and ctx.memory_stat("count") == base
