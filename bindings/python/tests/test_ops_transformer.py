"""The Transformer ops through the binding, checked against numpy (float64) on the CPU:
values, broadcasting, gradients through backward, and the error classes."""

import math

import dltrain
import dltrain.functional as F

from util import cpu, numpy_or_skip


def _t(np, a, ctx):
    return dltrain.tensor(np.asarray(a, dtype=np.float32).tolist(), dtype="f32", ctx=ctx)


def _arr(np, t):
    return np.array(t.tolist(), dtype=np.float64)


def test_broadcasting_binary_ops_match_numpy():
    np = numpy_or_skip()
    ctx = cpu()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = (rng.random((3, 1)) + 0.5).astype(np.float32)
    ta, tb = _t(np, a, ctx), _t(np, b, ctx)
    for fn, ref in ((F.add, a + b), (F.sub, a - b), (F.mul, a * b), (F.div, a / b)):
        out = fn(ta, tb)
        assert tuple(out.shape) == (2, 3, 4)
        assert np.allclose(_arr(np, out), ref, rtol=1e-6, atol=1e-6), fn.__name__


def test_activations_softmax_layer_norm():
    np = numpy_or_skip()
    ctx = cpu()
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 3, 4)
    t = _t(np, x, ctx)
    xd = x.astype(np.float64)
    gelu = 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd ** 3)))
    assert np.allclose(_arr(np, F.gelu(t, approximate="tanh")), gelu, atol=1e-6)
    assert np.allclose(_arr(np, F.leaky_relu(t)), np.where(xd > 0, xd, 0.01 * xd), atol=1e-7)
    assert np.allclose(_arr(np, F.leaky_relu(t, 0.2)), np.where(xd > 0, xd, 0.2 * xd), atol=1e-7)
    e = np.exp(xd - xd.max(-1, keepdims=True))
    assert np.allclose(_arr(np, F.softmax(t, -1)), e / e.sum(-1, keepdims=True), atol=1e-6)
    mu, var = xd.mean(-1, keepdims=True), xd.var(-1, keepdims=True)
    assert np.allclose(_arr(np, F.layer_norm(t, (4,))), (xd - mu) / np.sqrt(var + 1e-5), atol=1e-5)
    # layer_norm_to: layer_norm then cast, bit for bit
    assert np.array_equal(_arr(np, F.cast(F.layer_norm_to(t, (4,), "bf16"), "f32")),
                          _arr(np, F.cast(F.cast(F.layer_norm(t, (4,)), "bf16"), "f32")))
    # add_layer_norm: the add, then layer_norm_to, bit for bit
    r = _t(np, np.cos(np.arange(24, dtype=np.float32)).reshape(2, 3, 4), ctx)
    s, y = F.add_layer_norm(t, F.cast(r, "bf16"), (4,), "bf16")
    s_ref = F.add(t, F.cast(r, "bf16"))
    assert np.array_equal(_arr(np, s), _arr(np, s_ref))
    assert np.array_equal(_arr(np, F.cast(y, "f32")), _arr(np, F.cast(F.layer_norm_to(s_ref, (4,), "bf16"), "f32")))
    assert np.allclose(_arr(np, F.sum_dims(t, (0, 2), keepdim=True)), xd.sum((0, 2), keepdims=True), atol=1e-5)
    assert _arr(np, F.argmax(t, -1)).tolist() == np.argmax(x, -1).tolist()


def test_matmul_and_layout():
    np = numpy_or_skip()
    ctx = cpu()
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    out = F.matmul(_t(np, a, ctx), _t(np, b, ctx))
    assert np.allclose(_arr(np, out), a.astype(np.float64) @ b, atol=1e-5)
    ta = _t(np, a, ctx)
    assert np.array_equal(_arr(np, F.transpose(ta, 0, 2)), np.transpose(a, (2, 1, 0)))
    assert np.array_equal(_arr(np, F.permute(ta, 1, 0, 2)), np.transpose(a, (1, 0, 2)))
    assert np.array_equal(_arr(np, F.narrow(ta, 2, 1, 2)), a[:, :, 1:3])
    parts = F.split(ta, 3, dim=2)
    assert [tuple(p.shape) for p in parts] == [(2, 3, 3), (2, 3, 1)]
    assert np.array_equal(_arr(np, F.cat(list(reversed(parts)), dim=2)),
                          np.concatenate([a[:, :, 3:], a[:, :, :3]], axis=2))


def test_attention_matches_the_formula():
    np = numpy_or_skip()
    ctx = cpu()
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 2, 5, 4)).astype(np.float32) for _ in range(3))
    out = F.scaled_dot_product_attention(_t(np, q, ctx), _t(np, k, ctx), _t(np, v, ctx), is_causal=True)
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / 2.0
    s = s + np.triu(np.full((5, 5), -np.inf), 1)
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    assert np.allclose(_arr(np, out), w @ v, atol=1e-5)


def test_attention_qkvpacked_is_split_transpose_attend_merge():
    np = numpy_or_skip()
    ctx = cpu()
    rng = np.random.default_rng(5)
    B, T, H, D = 2, 5, 3, 4
    C = H * D
    qkv = rng.standard_normal((B, T, 3 * C)).astype(np.float32)
    out = F.scaled_dot_product_attention_qkvpacked(_t(np, qkv, ctx), H, is_causal=True)
    assert tuple(out.shape) == (B, T, C)
    q, k, v = (qkv[:, :, i * C:(i + 1) * C].reshape(B, T, H, D).transpose(0, 2, 1, 3).astype(np.float64)
               for i in range(3))
    s = q @ np.swapaxes(k, -1, -2) / 2.0 + np.triu(np.full((T, T), -np.inf), 1)
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    ref = (w @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
    assert np.allclose(_arr(np, out), ref, atol=1e-5)
    try:
        F.scaled_dot_product_attention_qkvpacked(_t(np, qkv, ctx), 5)
        raise AssertionError("36 = 3 x 12 columns do not split into 5 heads")
    except dltrain.errors.InvalidArgument as e:
        assert "heads" in str(e), str(e)


def test_cross_entropy_smoothing_and_errors():
    np = numpy_or_skip()
    ctx = cpu()
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    y = np.array([[0, 4, 2], [1, 1, 3]])
    tx = _t(np, x, ctx)
    ty = dltrain.tensor(y.tolist(), dtype="i64", ctx=ctx)
    loss = F.cross_entropy(tx, ty, label_smoothing=0.1).item()
    xd = x.astype(np.float64).reshape(-1, 5)
    lse = np.log(np.exp(xd - xd.max(1, keepdims=True)).sum(1)) + xd.max(1)
    nll = lse - xd[np.arange(6), y.reshape(-1)]
    smooth = lse - xd.mean(1)
    assert abs(loss - (0.9 * nll + 0.1 * smooth).mean()) < 1e-5
    try:
        F.cross_entropy(tx, dltrain.tensor([0, 1], dtype="i64", ctx=ctx))
    except dltrain.errors.InvalidArgument as e:
        assert e.code == 102, e.code  # DLT_ERR_SHAPE

    else:
        raise AssertionError("a targets shape mismatch was accepted")
