"""Issue 19's Python items for tensors: PyTorch's factory signatures, .to() argument rules,
one default context per device, operators, indexing, printing, host conversions.

Cases that need a C op the lead is adding (dlt_sub, dlt_mul, dlt_div, dlt_matmul,
dlt_narrow, dlt_cat, dlt_transpose, dlt_permute, dlt_add_scalar, dlt_neg) skip with the
op's name until the library has it. The expected repr strings were printed by torch 1.13
for the same values (torch is not needed to run this file).
"""

import math

import dltrain
import dltrain.functional as F

from util import Skip, assert_close, cpu, expect_error, numpy_or_skip, require


def _raises(exc, fn, *args, contains=None, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc as e:
        if contains is not None:
            assert contains in str(e), "%r lacks %r" % (str(e), contains)
        return e
    raise AssertionError("%s did not raise %s" % (getattr(fn, "__name__", fn), exc.__name__))


# ---- factories -----------------------------------------------------------------------------
def test_factories_take_sizes_as_pytorch_does():
    ctx = cpu()
    with ctx:
        for t in (dltrain.zeros(2, 3), dltrain.zeros((2, 3)), dltrain.zeros([2, 3]),
                  dltrain.ones(2, 3), dltrain.empty(2, 3), dltrain.rand(2, 3),
                  dltrain.randn((2, 3))):
            assert t.shape == (2, 3) and t.dtype == dltrain.float32 and t.ctx is ctx
        assert dltrain.zeros(2, 3).tolist() == [[0.0] * 3] * 2
        assert dltrain.ones(4, dtype=dltrain.int32).tolist() == [1, 1, 1, 1]
        assert dltrain.zeros(()).shape == () and dltrain.zeros(0, 5).shape == (0, 5)
        # the trap of issue 19: a dtype where a size belongs is refused, not read as a size
        _raises(TypeError, dltrain.zeros, 2, dltrain.int32, contains="keyword")
        _raises(TypeError, dltrain.zeros, (2, 3), "f16", contains="keyword")
        _raises(TypeError, dltrain.ones, (2, 3), dltrain.float16, contains="keyword")
        # full infers the dtype from the value as PyTorch
        assert dltrain.full((2,), 7).dtype == dltrain.int64
        assert dltrain.full((2,), 7).tolist() == [7, 7]
        assert dltrain.full((2, 1), 2.5).tolist() == [[2.5], [2.5]]
        assert dltrain.full(3, 1.0, dtype="f16").dtype == dltrain.float16
        cl = dltrain.zeros(2, 3, 4, 4, memory_format=dltrain.channels_last)
        assert cl.is_channels_last and cl.format is dltrain.channels_last
        r = dltrain.rand(8, requires_grad=True)
        assert r.requires_grad and all(0.0 <= v < 1.0 for v in r.tolist())
        n = dltrain.randn(1000, mean=2.0, std=0.5).tolist()
        assert abs(sum(n) / 1000 - 2.0) < 0.1
        like = dltrain.full_like(dltrain.zeros(2, 2, dtype="i32"), 5)
        assert like.dtype == dltrain.int32 and like.tolist() == [[5, 5], [5, 5]]
        assert dltrain.zeros_like(r).shape == (8,) and not dltrain.zeros_like(r).requires_grad
        assert dltrain.ones_like(cl).is_channels_last
        assert dltrain.empty_like(r, dtype="f16").dtype == dltrain.float16
        assert dltrain.rand_like(r).shape == dltrain.randn_like(r).shape == (8,)
    assert ctx.zeros(2, 3).ctx is ctx and ctx.ones(2).tolist() == [1.0, 1.0]


def test_tensor_from_lists_scalars_and_arrays():
    ctx = cpu()
    with ctx:
        assert dltrain.tensor([[1, 2], [3, 4]]).dtype == dltrain.int64
        assert dltrain.tensor([1, 2.5]).dtype == dltrain.float32
        s = dltrain.tensor(3.5)
        assert s.shape == () and s.item() == 3.5 and s.tolist() == 3.5
        big = dltrain.tensor([2 ** 62 + 1])
        assert big.item() == 2 ** 62 + 1  # exact: integer items do not go through a double
        assert dltrain.tensor([1.0], requires_grad=True).requires_grad
        _raises(OverflowError, dltrain.tensor, [300], dtype="u8")
        _raises(ValueError, dltrain.tensor, [[1, 2], [3]], contains="ragged")
        t = dltrain.tensor([1.0, 2.0])
        c = dltrain.tensor(t)
        assert c is not t and c.tolist() == [1.0, 2.0]
        assert t.numel == 2 and t.numel() == 2 and t.nelement() == 2
        assert t.element_size() == 4 and t.size() == (2,) and t.size(-1) == 2
        _raises(IndexError, t.size, 1)


def test_numpy_conversions():
    np = numpy_or_skip()
    ctx = cpu()
    a64 = np.arange(6, dtype=np.float64).reshape(2, 3) / 4
    t = dltrain.tensor(a64, ctx=ctx)  # float64 has no libdltrain dtype: float32
    assert t.dtype == dltrain.float32 and t.numpy().tolist() == a64.tolist()
    ti = dltrain.tensor(np.array([True, False]), ctx=ctx)
    assert ti.dtype == dltrain.uint8 and ti.tolist() == [1, 0]
    assert dltrain.tensor(np.arange(3, dtype=np.int16), ctx=ctx).dtype == dltrain.int32
    h = dltrain.tensor(a64, dtype=dltrain.float16, ctx=ctx)
    assert h.dtype == dltrain.float16 and h.numpy().dtype == np.float16
    b = dltrain.tensor(a64, dtype="bf16", ctx=ctx)
    assert b.dtype == dltrain.bfloat16 and b.numpy().tolist() == a64.tolist()
    f = dltrain.from_numpy(np.arange(4, dtype=np.int64), ctx=ctx)
    assert f.dtype == dltrain.int64 and f.tolist() == [0, 1, 2, 3]
    assert dltrain.tensor(np.float32(2.5), ctx=ctx).item() == 2.5


# ---- devices and contexts ----------------------------------------------------------------
def test_one_default_context_per_device():
    d = dltrain.default_context("cpu")
    assert d is dltrain.default_context("cpu") and d.device == "cpu"
    assert dltrain.current_context() is d
    # two implicit CPU uses meet on one context (issue 19: they used to mismatch)
    a = dltrain.zeros(2, device="cpu")
    b = dltrain.tensor([1.0, 2.0]).to("cpu")
    assert a.ctx is d and b.ctx is d and (a + b).tolist() == [1.0, 2.0]
    if dltrain.is_implemented("dlt_linear_create"):
        lin = dltrain.nn.Linear(2, 1, device="cpu")
        assert lin.ctx is d and lin(dltrain.ones(3, 2)).shape == (3, 1)
    # device= means the current context when it is on that device
    other = cpu()
    with other:
        assert dltrain.zeros(1, device="cpu").ctx is other
        assert dltrain.zeros(1).ctx is other
        assert dltrain.zeros(1, ctx=d).ctx is d
    _raises(ValueError, dltrain.zeros, 1, device="cpu:1")
    _raises(ValueError, dltrain.zeros, 1, device="tpu", contains="tpu")
    if not dltrain.cuda_is_available():
        _raises(dltrain.NoDevice, dltrain.zeros, 1, device="cuda")
        _raises(dltrain.NoDevice, dltrain.zeros, 1, device=0)  # an int is a CUDA index


def test_to_follows_pytorchs_argument_rules():
    ctx = cpu()
    t = dltrain.tensor([[1.5, 2.0]], ctx=ctx)
    assert t.to("cpu") is t and t.to(dltrain.float32) is t and t.to(t) is t
    assert t.to(device="cpu", dtype="f32") is t
    c = t.to("cpu", copy=True)
    assert c is not t and c.tolist() == t.tolist()
    h = t.to(dltrain.float16)
    assert h.dtype == dltrain.float16 and h.ctx is ctx and h.tolist() == [[1.5, 2.0]]
    assert t.to("cpu", dltrain.float16).dtype == dltrain.float16
    assert t.to(dtype="half").dtype == dltrain.float16
    i = dltrain.zeros(1, dtype="i32", ctx=ctx)
    assert t.to(i).dtype == dltrain.int32 and t.to(i).tolist() == [[1, 2]]
    other = cpu()
    moved = t.to(other)  # a Context moves between contexts of one device
    assert moved.ctx is other and moved.tolist() == t.tolist()
    x4 = dltrain.rand(1, 2, 3, 3, ctx=ctx)
    cl = x4.to(memory_format=dltrain.channels_last)
    assert cl.is_channels_last and cl.tolist() == x4.tolist()
    assert x4.to(memory_format="preserve_format") is x4
    assert x4.contiguous() is x4 and cl.contiguous().format == dltrain.contiguous_format
    _raises(ValueError, t.to, "tpu", contains="neither a device")
    _raises(TypeError, t.to, 1.5)
    _raises(TypeError, t.to, "cpu", "cuda")
    _raises(TypeError, t.to, dltrain.float16, "cpu")
    _raises(TypeError, t.to, "cpu", bogus=1)
    if not dltrain.cuda_is_available():
        # issue 19: t.to('cuda') said "unknown dtype"
        e = _raises(dltrain.NoDevice, t.to, "cuda")
        assert "dtype" not in str(e)
        _raises(dltrain.NoDevice, t.cuda)
    assert t.cpu() is t and t.float() is t and t.half().dtype == dltrain.float16
    assert t.long().dtype == dltrain.int64 and t.int().dtype == dltrain.int32


# ---- operators -----------------------------------------------------------------------------
def test_operators_with_python_scalars():
    ctx = cpu()
    x = dltrain.tensor([1.0, -2.0, 4.0], ctx=ctx)
    v = [1.0, -2.0, 4.0]
    assert (x + 1).tolist() == [a + 1 for a in v] and (1 + x).tolist() == [1 + a for a in v]
    assert (x - 2.5).tolist() == [a - 2.5 for a in v]
    assert (3 - x).tolist() == [3 - a for a in v]
    assert (x * 2).tolist() == [2 * a for a in v] and (0.5 * x).tolist() == [0.5 * a for a in v]
    assert (x / 4).tolist() == [a / 4 for a in v]
    assert (-x).tolist() == [-a for a in v] and (+x) is x
    # integer tensors: int scalars keep the dtype, float scalars and true division give f32
    i = dltrain.tensor([1, 2, 3], ctx=ctx)
    if dltrain.is_implemented("dlt_add_scalar"):  # dlt_add (the fallback) is float-only
        assert (i + 1).dtype == dltrain.int64 and (i + 1).tolist() == [2, 3, 4]
    assert (i * 1.5).dtype == dltrain.float32 and (i * 1.5).tolist() == [1.5, 3.0, 4.5]
    assert (i / 2).dtype == dltrain.float32 and (i / 2).tolist() == [0.5, 1.0, 1.5]
    # gradients flow through every form: d/dx sum((3 - 2x + 1) / 4) = -1/2
    w = dltrain.tensor([0.5, 1.5], ctx=ctx).requires_grad_()
    ((3 - 2 * w + 1) / 4).sum().backward()
    assert w.grad.tolist() == [-0.5, -0.5]
    assert f"{x.sum():.2f}" == "3.00" and float(x[0] if dltrain.is_implemented("dlt_narrow")
                                                     else x.sum()) in (1.0, 3.0)


def test_reflected_division_needs_dlt_div():
    require("dlt_div")
    ctx = cpu()
    x = dltrain.tensor([1.0, -2.0, 4.0], ctx=ctx).requires_grad_()
    y = 2 / x
    assert y.tolist() == [2.0, -1.0, 0.5]
    y.sum().backward()
    assert_close(x.grad.tolist(), [-2.0, -0.5, -0.125])


def test_tensor_operators_broadcast():
    require("dlt_sub", "dlt_mul", "dlt_div")
    ctx = cpu()
    av = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    bv = [10.0, 20.0, 40.0]
    a = dltrain.tensor(av, ctx=ctx).requires_grad_()
    b = dltrain.tensor(bv, ctx=ctx).requires_grad_()
    assert (a + b).tolist() == [[x + y for x, y in zip(r, bv)] for r in av]
    assert (a - b).tolist() == [[x - y for x, y in zip(r, bv)] for r in av]
    assert (b - a).tolist() == [[y - x for x, y in zip(r, bv)] for r in av]
    assert (a * b).tolist() == [[x * y for x, y in zip(r, bv)] for r in av]
    assert_close((a / b).tolist(), [[x / y for x, y in zip(r, bv)] for r in av])
    (a * b).sum().backward()  # d/da = b broadcast, d/db = column sums of a
    assert a.grad.tolist() == [bv, bv] and b.grad.tolist() == [5.0, 7.0, 9.0]
    i = dltrain.tensor([[1, 2]], ctx=ctx)
    assert (i / dltrain.tensor([2, 4], ctx=ctx)).tolist() == [[0.5, 0.5]]


def test_matmul_operator():
    require("dlt_matmul")
    ctx = cpu()
    av = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    bv = [[1.0, 0.5, -1.0], [2.0, 0.0, 1.0]]
    a = dltrain.tensor(av, ctx=ctx).requires_grad_()
    b = dltrain.tensor(bv, ctx=ctx).requires_grad_()
    c = a @ b
    want = [[sum(av[i][k] * bv[k][j] for k in range(2)) for j in range(3)] for i in range(3)]
    assert c.tolist() == want and a.matmul(b).tolist() == want
    assert dltrain.matmul(a, b).tolist() == want
    c.sum().backward()
    assert a.grad.tolist() == [[sum(bv[0]), sum(bv[1])]] * 3
    assert b.grad.tolist() == [[9.0] * 3, [12.0] * 3]
    _raises(TypeError, lambda: a @ 2)


# ---- indexing ------------------------------------------------------------------------------
def _nested(shape, base=0):
    if len(shape) == 1:
        return [float(base + i) for i in range(shape[0])]
    step = 1
    for s in shape[1:]:
        step *= s
    return [_nested(shape[1:], base + i * step) for i in range(shape[0])]


def test_indexing_and_slicing():
    require("dlt_narrow")
    ctx = cpu()
    v = _nested((3, 4, 5))
    t = dltrain.tensor(v, ctx=ctx)
    cases = [
        (1, v[1]), (-1, v[-1]), ((0, 2), v[0][2]), ((0, 2, 4), v[0][2][4]),
        (slice(1, 3), v[1:3]), ((slice(None), 1), [r[1] for r in v]),
        ((Ellipsis, 0), [[c[0] for c in r] for r in v]),
        ((1, Ellipsis, slice(2, 4)), [c[2:4] for c in v[1]]),
        ((slice(0, 3, 1), slice(-2, None)), [r[-2:] for r in v]),
        ((slice(5, 9),), []), (None, [v]), ((slice(None), None, 0), [[r[0]] for r in v]),
        ((0, 1, slice(1, 2)), v[0][1][1:2]),
    ]
    for key, want in cases:
        got = t[key]
        assert got.tolist() == want, (key, got.tolist(), want)
    assert t[2, 3, 4].shape == () and t[2, 3, 4].item() == 59.0
    assert t[None].shape == (1, 3, 4, 5) and t[..., None].shape == (3, 4, 5, 1)
    assert t[:] is t and t[...] is t
    assert [r.tolist() for r in t] == v  # iteration yields t[i]
    # gradients flow back through an index
    w = dltrain.tensor(_nested((2, 3)), ctx=ctx).requires_grad_()
    (w[1, 1:] * 2.0).sum().backward()
    assert w.grad.tolist() == [[0.0, 0.0, 0.0], [0.0, 2.0, 2.0]]


def test_indexing_errors_say_what_is_unsupported():
    ctx = cpu()
    t = dltrain.zeros(3, 4, ctx=ctx)
    _raises(ValueError, t.__getitem__, slice(None, None, 2), contains="step 2")
    _raises(ValueError, t.__getitem__, slice(None, None, -1), contains="negative")
    _raises(IndexError, t.__getitem__, 3, contains="out of bounds for dimension 0 with size 3")
    _raises(IndexError, t.__getitem__, (0, -5), contains="dimension 1 with size 4")
    _raises(IndexError, t.__getitem__, (0, 0, 0), contains="too many indices")
    _raises(IndexError, t.__getitem__, (Ellipsis, Ellipsis), contains="single ellipsis")
    _raises(TypeError, t.__getitem__, [0, 1], contains="advanced indexing")
    _raises(TypeError, t.__getitem__, t, contains="advanced indexing")
    _raises(TypeError, t.__getitem__, True)
    _raises(IndexError, dltrain.tensor(1.0, ctx=ctx).__getitem__, 0, contains="0-dim")
    # whole-tensor assignment is fill_/copy_; part assignment is refused
    t[...] = 2.5
    assert t.tolist() == [[2.5] * 4] * 3
    t[:] = dltrain.ones(3, 4, ctx=ctx)
    assert t.tolist() == [[1.0] * 4] * 3
    _raises(TypeError, t.__setitem__, 0, 1.0, contains="not supported")
    _raises(ValueError, t.__setitem__, Ellipsis, dltrain.ones(2, ctx=ctx))


def test_shape_methods():
    ctx = cpu()
    t = dltrain.tensor(_nested((2, 3)), ctx=ctx)
    assert t.unsqueeze(0).shape == (1, 2, 3) and t.unsqueeze(-1).shape == (2, 3, 1)
    assert t.unsqueeze(0).squeeze().shape == (2, 3) and t.squeeze(0) is t
    assert t.view(3, 2).shape == (3, 2) and t.reshape(-1).tolist() == [0.0, 1, 2, 3, 4, 5]
    _raises(IndexError, t.unsqueeze, 3)
    if dltrain.is_implemented("dlt_transpose"):
        assert t.t().tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
        assert t.T.tolist() == t.transpose(0, 1).tolist() == t.transpose(-1, -2).tolist()
    if dltrain.is_implemented("dlt_permute"):
        u = dltrain.tensor(_nested((2, 3, 4)), ctx=ctx)
        p = u.permute(2, 0, 1)
        assert p.shape == (4, 2, 3) and p[1, 0, 2].item() == u[0, 2, 1].item()
    if dltrain.is_implemented("dlt_narrow"):
        assert t.narrow(1, 1, 2).tolist() == [[1.0, 2.0], [4.0, 5.0]]
    if dltrain.is_implemented("dlt_cat"):
        c = dltrain.cat([t, t * 2.0], dim=0)
        assert c.shape == (4, 3) and c.tolist()[2:] == [[0.0, 2, 4], [6, 8, 10]]
        assert dltrain.cat([t, t], -1).shape == (2, 6)
    _raises(ValueError, dltrain.cat, [])


# ---- printing ------------------------------------------------------------------------------
_REPRS = [  # (values, dtype, requires_grad, what torch 1.13 prints)
    ([[1.0, 2.5], [3, 4]], None, False, "tensor([[1.0000, 2.5000],\n        [3.0000, 4.0000]])"),
    ([1, -20, 300], None, False, "tensor([  1, -20, 300])"),
    ([1.0, 2.0, -3.0], None, False, "tensor([ 1.,  2., -3.])"),
    ([1e-5, 1.0, 123.0], None, False, "tensor([1.0000e-05, 1.0000e+00, 1.2300e+02])"),
    ([1e9, 2.0], None, False, "tensor([1.0000e+09, 2.0000e+00])"),
    (3.5, None, False, "tensor(3.5000)"),
    ([0.5, 1.25], "f16", False, "tensor([0.5000, 1.2500], dtype=dltrain.float16)"),
    ([[1, 2], [3, 4]], "i32", False, "tensor([[1, 2],\n        [3, 4]], dtype=dltrain.int32)"),
    ([0, 255], "u8", False, "tensor([  0, 255], dtype=dltrain.uint8)"),
    ([1.0, 2.0], None, True, "tensor([1., 2.], requires_grad=True)"),
    ([float("nan"), float("inf"), 1.5], None, False, "tensor([   nan,    inf, 1.5000])"),
    ([0.0, 0.0, 0.0], None, False, "tensor([0., 0., 0.])"),
    ([i / 3 for i in range(30)], None, False,
     "tensor([0.0000, 0.3333, 0.6667, 1.0000, 1.3333, 1.6667, 2.0000, 2.3333, 2.6667,\n"
     "        3.0000, 3.3333, 3.6667, 4.0000, 4.3333, 4.6667, 5.0000, 5.3333, 5.6667,\n"
     "        6.0000, 6.3333, 6.6667, 7.0000, 7.3333, 7.6667, 8.0000, 8.3333, 8.6667,\n"
     "        9.0000, 9.3333, 9.6667])"),
    ([i / 7 for i in range(2000)], None, False,
     "tensor([0.0000e+00, 1.4286e-01, 2.8571e-01,  ..., 2.8529e+02, 2.8543e+02,\n"
     "        2.8557e+02])"),
]


def test_repr_prints_values_as_pytorch():
    ctx = cpu()
    for vals, dt, rg, want in _REPRS:
        t = dltrain.tensor(vals, dtype=dt, ctx=ctx)
        if rg:
            t.requires_grad_()
        assert repr(t) == want, "\n%s\n!=\n%s" % (repr(t), want)
        assert str(t) == want
    assert repr(dltrain.zeros(0, ctx=ctx)) == "tensor([])"
    assert repr(dltrain.zeros(0, 5, ctx=ctx)) == "tensor([], size=(0, 5))"
    assert repr(dltrain.zeros(0, dtype="i64", ctx=ctx)) == "tensor([], dtype=dltrain.int64)"


def test_repr_summarises_large_tensors():
    ctx = cpu()
    t = dltrain.tensor(_nested((10, 12, 10)), ctx=ctx)
    text = repr(t)
    lines = text.split("\n")
    # torch 1.13's first lines and last line for torch.arange(1200.).reshape(10, 12, 10)
    assert lines[0] == "tensor([[[0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 7.0000e+00,"
    assert lines[1] == "          8.0000e+00, 9.0000e+00],"
    assert lines[6] == "         ...,"
    assert lines[-1] == "          1.1980e+03, 1.1990e+03]]])"
    assert len(lines) == 85 and text.count("...") == 43  # as torch
    # a large tensor prints without reading all of it: element reads stay few
    big = dltrain.zeros(3000, 3000, ctx=ctx)
    assert repr(big).startswith("tensor([[0., 0., 0.,  ..., 0., 0., 0.],")
    p = dltrain.nn.Parameter(dltrain.ones(2, ctx=ctx))
    assert repr(p) == "Parameter containing:\ntensor([1., 1.], requires_grad=True)"


def test_printoptions_and_bool_conversions():
    ctx = cpu()
    try:
        dltrain.set_printoptions(precision=2)
        assert repr(dltrain.tensor([1.2345], ctx=ctx)) == "tensor([1.23])"
    finally:
        dltrain.set_printoptions(precision=4)
    assert bool(dltrain.tensor([2.0], ctx=ctx)) and not bool(dltrain.tensor(0, ctx=ctx))
    _raises(RuntimeError, bool, dltrain.zeros(2, ctx=ctx), contains="ambiguous")
    assert list(range(dltrain.tensor(3, ctx=ctx))) == [0, 1, 2]
    _raises(TypeError, list, dltrain.tensor(3.0, ctx=ctx))
    assert math.isclose(float(dltrain.tensor([0.25], ctx=ctx)), 0.25)
