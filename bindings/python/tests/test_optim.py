"""Adam/AdamW, parameter groups, clip_grad_norm_ (and its fused form,
Optimizer.set_clip_grad_norm) and the nanoGPT schedule through the binding, against float64
loops of PyTorch's formulas (the C tests check the bits)."""

import math

import dltrain
import dltrain.nn.utils
from dltrain.nn.utils import clip_grad_norm_

from util import assert_close, cpu, require


def _flat(t):
    out = t.tolist()
    while out and isinstance(out[0], list):
        out = [v for row in out for v in row]
    return out


def _adam64(p, m, v, g, t, lr, wd, b1, b2, eps, decoupled):
    bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
    for i in range(len(p)):
        gi = g[i]
        if decoupled:
            p[i] *= 1 - lr * wd
        else:
            gi += wd * p[i]
        m[i] = b1 * m[i] + (1 - b1) * gi
        v[i] = b2 * v[i] + (1 - b2) * gi * gi
        p[i] -= lr / bc1 * m[i] / (math.sqrt(v[i]) / math.sqrt(bc2) + eps)


def test_adamw_two_groups_match_pytorch_formula():
    require("dlt_adamw_create_ex")
    ctx = cpu()
    w0, b0 = [0.5, -1.0, 2.0, 0.25], [0.1, -0.2]
    w = dltrain.tensor([w0[:2], w0[2:]], ctx=ctx).requires_grad_()
    b = dltrain.tensor(b0, ctx=ctx).requires_grad_()
    opt = dltrain.optim.AdamW(dltrain.optim.nanogpt_param_groups([w, b], 0.1), lr=1e-2,
                              betas=(0.9, 0.99))
    assert opt.kind == "AdamW" and len(opt) == 2
    groups = opt.param_groups
    assert len(groups) == 2 and groups[0]["weight_decay"] == 0.1 and groups[1]["weight_decay"] == 0.0
    assert groups[0]["params"][0].handle == w.handle and groups[1]["params"][0].handle == b.handle
    assert groups[0]["betas"] == (0.9, 0.99)
    pw, mw, vw = list(w0), [0.0] * 4, [0.0] * 4
    pb, mb, vb = list(b0), [0.0] * 2, [0.0] * 2
    lr = 1e-2
    for t in range(1, 5):
        if t == 3:
            lr = 5e-3
            for g in opt.param_groups:  # nanoGPT's loop
                g["lr"] = lr
        gw = [0.3 * t, -0.1, 0.7, -0.5 / t]
        gb = [0.2, -0.4 * t]
        dltrain.zero_grad([w, b])
        w.backward(dltrain.tensor([gw[:2], gw[2:]], ctx=ctx))
        b.backward(dltrain.tensor(gb, ctx=ctx))
        opt.step()
        lr32 = float(dltrain.tensor([lr], ctx=ctx).tolist()[0])  # the device keeps lr in f32
        _adam64(pw, mw, vw, gw, t, lr32, 0.1, 0.9, 0.99, 1e-8, True)
        _adam64(pb, mb, vb, gb, t, lr32, 0.0, 0.9, 0.99, 1e-8, True)
        assert_close(_flat(w), pw, rtol=2e-6, atol=2e-7, what="w at step %d" % t)
        assert_close(_flat(b), pb, rtol=2e-6, atol=2e-7, what="b at step %d" % t)
    assert_close(_flat(opt.exp_avg(0)), mw, rtol=1e-6, atol=1e-8, what="exp_avg")
    assert_close(_flat(opt.exp_avg_sq(1)), vb, rtol=1e-6, atol=1e-8, what="exp_avg_sq")
    assert opt.param_step(0) == 4 and opt.step_count == 4
    assert abs(opt.param_groups[1]["lr"] - 5e-3) < 1e-9


def test_adam_l2_and_defaults():
    require("dlt_adamw_create_ex")
    ctx = cpu()
    p = dltrain.tensor([1.0, -2.0], ctx=ctx).requires_grad_()
    opt = dltrain.optim.Adam([p], lr=0.1, weight_decay=0.5)
    assert opt.kind == "Adam"
    pv, m, v = [1.0, -2.0], [0.0, 0.0], [0.0, 0.0]
    for t in range(1, 4):
        dltrain.zero_grad([p])
        p.backward(dltrain.tensor([0.5, 0.25], ctx=ctx))
        opt.step()
        _adam64(pv, m, v, [0.5, 0.25], t, 0.1, 0.5, 0.9, 0.999, 1e-8, False)
    assert_close(p.tolist(), pv, rtol=2e-6, atol=1e-7, what="Adam")
    q = dltrain.tensor([1.0], ctx=ctx).requires_grad_()
    assert dltrain.optim.AdamW([q]).param_groups[0]["weight_decay"] == 0.01
    assert dltrain.optim.Adam([q]).param_groups[0]["weight_decay"] == 0.0


def test_param_group_errors_and_tying():
    require("dlt_adamw_create_ex")
    ctx = cpu()
    a = dltrain.tensor([1.0, 2.0], ctx=ctx).requires_grad_()
    c = dltrain.tensor([3.0], ctx=ctx).requires_grad_()
    opt = dltrain.optim.AdamW([a, a, c])  # a tied weight listed twice
    assert len(opt) == 2
    try:
        opt.add_param_group({"params": [a]})
    except ValueError as e:
        assert "more than one parameter group" in str(e), e
    else:
        raise AssertionError("a parameter in two groups was accepted")
    try:
        dltrain.optim.AdamW([{"params": [a], "betas": (0.5, 0.9)}])
    except ValueError as e:
        assert "betas" in str(e)
    else:
        raise AssertionError("a per-group betas was accepted")
    try:
        dltrain.optim.AdamW([a], betas=(1.0, 0.9))
    except ValueError as e:
        assert "Invalid beta parameter at index 0" in str(e), e
    else:
        raise AssertionError("beta1 = 1 was accepted")
    try:
        dltrain.optim.SGD([{"params": [a]}, {"params": [c]}], lr=0.1)
    except dltrain.NotSupported:
        pass
    else:
        raise AssertionError("SGD took a second group")


def test_clip_grad_norm_matches_float64():
    require("dlt_clip_grad_norm")
    ctx = cpu()
    a = dltrain.tensor([[3.0, 4.0], [0.0, 12.0]], ctx=ctx).requires_grad_()
    b = dltrain.tensor([1.0, 2.0], ctx=ctx).requires_grad_()
    none = dltrain.tensor([1.0], ctx=ctx).requires_grad_()
    a.backward(dltrain.tensor([[3.0, 4.0], [0.0, 12.0]], ctx=ctx))
    b.backward(dltrain.tensor([-4.0, 2.0], ctx=ctx))
    total = clip_grad_norm_([a, b, none], max_norm=1.0)
    want = math.sqrt(9 + 16 + 144 + 16 + 4)
    assert total.ndim == 0 and abs(total.item() - want) < 1e-5 * want
    coef = 1.0 / (want + 1e-6)
    assert_close(_flat(a.grad), [3 * coef, 4 * coef, 0.0, 12 * coef], rtol=1e-6, atol=1e-8)
    assert none.grad is None
    # no clipping below max_norm; inf norm; nn.utils spellings
    t2 = dltrain.nn.utils.clip_grad_norm_([a, b], 10.0, norm_type=float("inf"))
    assert abs(t2.item() - 12 * coef) < 1e-6
    assert dltrain.nn.utils.clip_grad_norm is not None
    # error_if_nonfinite leaves the gradients alone
    b.backward(dltrain.tensor([float("inf"), 0.0], ctx=ctx))
    before = _flat(a.grad)
    try:
        clip_grad_norm_([a, b], 1.0, error_if_nonfinite=True)
    except RuntimeError as e:
        assert "non-finite" in str(e)
    else:
        raise AssertionError("a non-finite norm did not raise")
    assert _flat(a.grad) == before


def test_fused_clip_grad_norm_matches_clip_then_step():
    """opt.set_clip_grad_norm: the same parameters as clip_grad_norm_ + step (bit for bit on
    the CPU), the gradients left unclipped, opt.grad_norm() the total; the GradScaler path;
    errors; clear."""
    require("dlt_optimizer_set_clip_grad_norm", "dlt_optimizer_grad_norm")
    from dltrain import errors
    ctx = cpu()
    w0, g0 = [[0.5, -1.0, 2.0], [0.25, 3.0, -0.5]], [[3.0, 4.0, 0.0], [-12.0, 1.0, 2.0]]
    want_total = math.sqrt(9 + 16 + 144 + 1 + 4)
    for make in (lambda ps: dltrain.optim.AdamW(ps, lr=1e-2),
                 lambda ps: dltrain.optim.SGD(ps, lr=0.1, momentum=0.9)):
        a = dltrain.tensor(w0, ctx=ctx).requires_grad_()
        b = dltrain.tensor(w0, ctx=ctx).requires_grad_()
        fused, ref = make([a]), make([b])
        fused.set_clip_grad_norm(1.0)
        total = fused.grad_norm()
        assert total.ndim == 0 and total.item() == 0.0
        for step in range(3):
            g = [[v * (step + 1) for v in row] for row in g0]
            for p in (a, b):
                dltrain.zero_grad([p])
                p.backward(dltrain.tensor(g, ctx=ctx))
            ref_total = clip_grad_norm_([b], 1.0)
            ref.step()
            fused.step()
            assert _flat(a) == _flat(b), (fused.kind, step, _flat(a), _flat(b))
            assert _flat(a.grad) == _flat(dltrain.tensor(g, ctx=ctx))  # not clipped
            assert total.item() == ref_total.item()  # the same tensor, overwritten
            assert abs(total.item() - want_total * (step + 1)) < 1e-5 * want_total * (step + 1)
        fused.clear_clip_grad_norm()
        try:
            fused.grad_norm()
        except errors.InvalidArgument as e:
            assert e.code == errors.ERR_INVALID_STATE and "set_clip_grad_norm" in str(e), e
        else:
            raise AssertionError("grad_norm() without clipping did not raise")
    # the GradScaler: unscale, clip, step == the scaler's step with the clipping fused
    a = dltrain.tensor(w0, ctx=ctx).requires_grad_()
    b = dltrain.tensor(w0, ctx=ctx).requires_grad_()
    fused, ref = dltrain.optim.AdamW([a], lr=1e-2), dltrain.optim.AdamW([b], lr=1e-2)
    fused.set_clip_grad_norm(2.0, norm_type=float("inf"))
    s1, s2 = (dltrain.amp.GradScaler(init_scale=1024.0, ctx=ctx) for _ in range(2))
    for p in (a, b):
        p.backward(dltrain.tensor([[v * 1024.0 for v in row] for row in g0], ctx=ctx))
    s2.unscale_(ref)
    clip_grad_norm_([b], 2.0, norm_type=float("inf"))
    s2.step(ref)
    s1.step(fused)
    assert _flat(a) == _flat(b) and fused.grad_norm().item() == 12.0
    # errors: the library's words, nothing set
    opt = dltrain.optim.SGD([dltrain.tensor([1.0], ctx=ctx).requires_grad_()], lr=0.1)
    for bad, exc in (((-1.0, 2.0), errors.InvalidArgument), ((1.0, 0.0), errors.InvalidArgument),
                     ((1.0, 3.0), errors.NotSupported)):
        try:
            opt.set_clip_grad_norm(*bad)
        except exc:
            pass
        else:
            raise AssertionError("set_clip_grad_norm%r was accepted" % (bad,))
    try:
        opt.grad_norm()
    except errors.InvalidArgument:
        pass
    else:
        raise AssertionError("a failed set_clip_grad_norm turned clipping on")


def test_warmup_cosine_schedule_is_nanogpts():
    require("dlt_lr_schedule_warmup_cosine")
    ctx = cpu()
    p = dltrain.tensor([1.0], ctx=ctx).requires_grad_()
    opt = dltrain.optim.AdamW([p], lr=1e-3)
    opt.schedule_warmup_cosine(warmup_iters=2, lr_decay_iters=6, min_lr=1e-4)

    def get_lr(it):  # nanoGPT train.py
        if it < 2:
            return 1e-3 * (it + 1) / (2 + 1)
        if it > 6:
            return 1e-4
        ratio = (it - 2) / (6 - 2)
        return 1e-4 + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (1e-3 - 1e-4)
    for it in range(9):
        assert abs(opt.lr - get_lr(it)) <= 1e-7 * get_lr(it), (it, opt.lr, get_lr(it))
        dltrain.zero_grad([p])
        p.backward(dltrain.tensor([0.1], ctx=ctx))
        opt.step()


def test_option_structs_match_the_library():
    """The ctypes mirrors of dlt_sgd_options / dlt_adamw_options have the C sizes and the
    defaults the library fills in."""
    require("dlt_adamw_options_init", "dlt_sgd_options_init")
    import ctypes
    from dltrain import optim
    from dltrain._lib import lib
    a = optim._AdamWOptions()
    lib.dlt_adamw_options_init(ctypes.byref(a), ctypes.sizeof(a))
    assert a.size == ctypes.sizeof(a), (a.size, ctypes.sizeof(a))
    assert (a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.decoupled_weight_decay) == \
        (1e-3, 0.9, 0.999, 1e-8, 1e-2, 1)
    lib.dlt_adam_options_init(ctypes.byref(a), ctypes.sizeof(a))
    assert a.weight_decay == 0.0 and a.decoupled_weight_decay == 0
    s = optim._SgdOptions()
    lib.dlt_sgd_options_init(ctypes.byref(s), ctypes.sizeof(s))
    assert s.size == ctypes.sizeof(s) and s.lr == 1e-3 and s.momentum == 0.0
