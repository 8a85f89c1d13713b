"""Differentiable operations (include/dltrain/ops.h).

Each op returns a new Tensor owned by Python and, in grad mode, records itself on its
context's tape. None for a required tensor is passed to the library as NULL, which reports
it (InvalidArgument, code 101). Inside an autocast region conv2d and linear compute in the
region's dtype.
"""

import ctypes
import numbers

from . import dtypes as _dt
from ._handle import arg
from ._lib import lib, check
from ._tensor import Tensor, _shape_arg

REDUCTION_MEAN = 0
REDUCTION_SUM = 1
REDUCTION_NONE = 2
GELU_NONE = 0
GELU_TANH = 1
NO_PADDING_IDX = -(2 ** 63)

__all__ = ["conv2d", "batch_norm2d", "batch_norm2d_act", "relu", "max_pool2d",
           "global_avg_pool2d", "adaptive_avg_pool2d", "linear", "add", "mul_scalar", "sum",
           "mean", "reshape", "flatten", "cast", "cross_entropy", "REDUCTION_MEAN",
           "REDUCTION_SUM", "REDUCTION_NONE", "GELU_NONE", "GELU_TANH",
           "sub", "mul", "div", "neg", "exp", "log", "sqrt", "rsqrt", "abs", "pow", "add_scalar",
           "gelu", "silu", "sigmoid", "tanh", "softplus", "sum_dims", "mean_dims", "amax", "argmax",
           "softmax", "log_softmax", "layer_norm", "layer_norm_to", "add_layer_norm", "dropout", "embedding", "leaky_relu",
           "scaled_dot_product_attention", "scaled_dot_product_attention_qkvpacked", "matmul", "bmm", "transpose", "permute", "narrow",
           "split", "cat", "contiguous", "expand", "mse_loss", "binary_cross_entropy_with_logits"]


def _ctx_of(*tensors):
    for t in tensors:
        if isinstance(t, Tensor):
            return t.ctx
    return None


def _call(fn, inputs, *args):
    out = ctypes.c_void_p()
    check(fn(*args, ctypes.byref(out)))
    return Tensor._wrap(out.value, _ctx_of(*inputs))


def _t(x, name):
    return arg(x, Tensor, name)


def _opt(x, name):
    return arg(x, Tensor, name, optional=True)


def _pair(v, name):
    if isinstance(v, numbers.Integral):
        return int(v), int(v)
    v = tuple(int(a) for a in v)
    if len(v) != 2:
        raise ValueError("%s must be an int or a pair, got %r" % (name, v))
    return v


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution (cross-correlation) as torch.nn.functional.conv2d."""
    sh, sw = _pair(stride, "stride")
    ph, pw = _pair(padding, "padding")
    dh, dw = _pair(dilation, "dilation")
    return _call(lib.dlt_conv2d, (x, weight), _t(x, "x"), _t(weight, "weight"),
                 _opt(bias, "bias"), sh, sw, ph, pw, dh, dw, int(groups))


def batch_norm2d(x, weight=None, bias=None, running_mean=None, running_var=None,
                 training=True, momentum=0.1, eps=1e-5):
    """BatchNorm2d over [N,C,H,W]; weight/bias (gamma/beta) and the running statistics are
    f32 [C] or None. training=True uses batch statistics and updates the running ones."""
    return _call(lib.dlt_batch_norm2d, (x,), _t(x, "x"), _opt(weight, "weight"),
                 _opt(bias, "bias"), _opt(running_mean, "running_mean"),
                 _opt(running_var, "running_var"), 1 if training else 0, float(momentum),
                 float(eps))


def batch_norm2d_act(x, residual=None, relu=True, weight=None, bias=None, running_mean=None,
                     running_var=None, training=True, momentum=0.1, eps=1e-5):
    """relu(batch_norm2d(x) + residual) in one call (residual and relu optional)."""
    return _call(lib.dlt_batch_norm2d_act, (x,), _t(x, "x"), _opt(residual, "residual"),
                 1 if relu else 0, _opt(weight, "weight"), _opt(bias, "bias"),
                 _opt(running_mean, "running_mean"), _opt(running_var, "running_var"),
                 1 if training else 0, float(momentum), float(eps))


def relu(x):
    return _call(lib.dlt_relu, (x,), _t(x, "x"))


def max_pool2d(x, kernel_size, stride=None, padding=0):
    """max_pool2d (no dilation, floor mode); stride defaults to kernel_size."""
    kh, kw = _pair(kernel_size, "kernel_size")
    sh, sw = _pair(kernel_size if stride is None else stride, "stride")
    ph, pw = _pair(padding, "padding")
    return _call(lib.dlt_max_pool2d, (x,), _t(x, "x"), kh, kw, sh, sw, ph, pw)


def global_avg_pool2d(x):
    """adaptive_avg_pool2d(x, (1, 1)): [N,C,H,W] -> [N,C,1,1]."""
    return _call(lib.dlt_global_avg_pool2d, (x,), _t(x, "x"))


def adaptive_avg_pool2d(x, output_size=1):
    if _pair(output_size, "output_size") != (1, 1):
        raise NotImplementedError("libdltrain has adaptive_avg_pool2d to (1, 1) only")
    return global_avg_pool2d(x)


def linear(x, weight, bias=None):
    """y = x weight^T + bias; x [..., K], weight [N,K], bias [N] or None."""
    return _call(lib.dlt_linear, (x, weight), _t(x, "x"), _t(weight, "weight"),
                 _opt(bias, "bias"))


def add(a, b):
    """a + b with broadcasting and dtype promotion."""
    return _call(lib.dlt_add, (a, b), _t(a, "a"), _t(b, "b"))


def mul_scalar(x, s=None, alpha=1.0):
    """x * s[0] * alpha, where s is a one-element f32 tensor (a device value; no gradient
    flows into it) or None."""
    return _call(lib.dlt_mul_scalar, (x,), _t(x, "x"), _opt(s, "s"), float(alpha))


def sum(x):
    """Sum of all elements (0-d tensor of x's dtype, fp32 accumulation)."""
    return _call(lib.dlt_sum, (x,), _t(x, "x"))


def mean(x):
    return _call(lib.dlt_mean, (x,), _t(x, "x"))


def reshape(x, shape):
    """A view with another shape; one size may be -1."""
    arr, nd, _ = _shape_arg(shape)
    return _call(lib.dlt_reshape, (x,), _t(x, "x"), arr, nd)


def flatten(x, start_dim=0, end_dim=-1):
    return _call(lib.dlt_flatten, (x,), _t(x, "x"), int(start_dim), int(end_dim))


def cast(x, dtype):
    """Differentiable dtype conversion (the gradient is converted back)."""
    return _call(lib.dlt_cast, (x,), _t(x, "x"), _dt.dtype(dtype))


_REDUCTIONS = {"mean": REDUCTION_MEAN, "sum": REDUCTION_SUM, "none": REDUCTION_NONE}


def _reduction(reduction):
    if isinstance(reduction, str):
        if reduction not in _REDUCTIONS:
            raise ValueError("reduction must be 'mean', 'sum' or 'none', got %r" % reduction)
        return _REDUCTIONS[reduction]
    return int(reduction)


def cross_entropy(logits, targets, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """Cross-entropy of logits [N,C] (or [..., C], classes last) against integer targets [N]
    (or [...]), PyTorch's F.cross_entropy with its defaults; f32 result."""
    reduction = _reduction(reduction)
    if label_smoothing:
        return _call(lib.dlt_cross_entropy_ex, (logits, targets), _t(logits, "logits"),
                     _t(targets, "targets"), int(ignore_index), reduction, float(label_smoothing))
    return _call(lib.dlt_cross_entropy, (logits, targets), _t(logits, "logits"),
                 _t(targets, "targets"), int(ignore_index), reduction)


# ---- broadcasting elementwise ops -------------------------------------------------------

def sub(a, b):
    """a - b with broadcasting and dtype promotion."""
    return _call(lib.dlt_sub, (a, b), _t(a, "a"), _t(b, "b"))


def mul(a, b):
    """a * b (elementwise) with broadcasting and dtype promotion."""
    return _call(lib.dlt_mul, (a, b), _t(a, "a"), _t(b, "b"))


def div(a, b):
    """a / b (true division) with broadcasting and dtype promotion."""
    return _call(lib.dlt_div, (a, b), _t(a, "a"), _t(b, "b"))


# ---- unary math and activations ----------------------------------------------------------

def _unary(fn, x):
    return _call(fn, (x,), _t(x, "x"))


def neg(x):
    return _unary(lib.dlt_neg, x)


def exp(x):
    return _unary(lib.dlt_exp, x)


def log(x):
    return _unary(lib.dlt_log, x)


def sqrt(x):
    return _unary(lib.dlt_sqrt, x)


def rsqrt(x):
    return _unary(lib.dlt_rsqrt, x)


def abs(x):  # noqa: A001 (torch.abs)
    return _unary(lib.dlt_abs, x)


def pow(x, exponent):  # noqa: A001 (torch.pow with a scalar exponent)
    return _call(lib.dlt_pow_scalar, (x,), _t(x, "x"), float(exponent))


def add_scalar(x, value):
    return _call(lib.dlt_add_scalar, (x,), _t(x, "x"), float(value))


def gelu(x, approximate="none"):
    """GELU; approximate="tanh" is GPT-2's form."""
    modes = {"none": GELU_NONE, "tanh": GELU_TANH}
    if approximate not in modes:
        raise ValueError("approximate must be 'none' or 'tanh', got %r" % (approximate,))
    return _call(lib.dlt_gelu, (x,), _t(x, "x"), modes[approximate])


def silu(x):
    return _unary(lib.dlt_silu, x)


def sigmoid(x):
    return _unary(lib.dlt_sigmoid, x)


def tanh(x):
    return _unary(lib.dlt_tanh, x)


def softplus(x):
    return _unary(lib.dlt_softplus, x)


def leaky_relu(x, negative_slope=0.01):
    """torch.nn.functional.leaky_relu: x where x > 0, else negative_slope * x."""
    return _call(lib.dlt_leaky_relu, (x,), _t(x, "x"), float(negative_slope))


# ---- reductions --------------------------------------------------------------------------

def _dims(dim):
    if dim is None:
        return (ctypes.c_int32 * 1)(0), 0
    if isinstance(dim, numbers.Integral):
        dim = (int(dim),)
    dim = tuple(int(d) for d in dim)
    return (ctypes.c_int32 * max(len(dim), 1))(*dim), len(dim)


def sum_dims(x, dim=None, keepdim=False):
    """torch.sum(x, dim, keepdim); dim None reduces every dimension."""
    arr, n = _dims(dim)
    return _call(lib.dlt_sum_dims, (x,), _t(x, "x"), arr, n, 1 if keepdim else 0)


def mean_dims(x, dim=None, keepdim=False):
    arr, n = _dims(dim)
    return _call(lib.dlt_mean_dims, (x,), _t(x, "x"), arr, n, 1 if keepdim else 0)


def amax(x, dim=None, keepdim=False):
    arr, n = _dims(dim)
    return _call(lib.dlt_amax, (x,), _t(x, "x"), arr, n, 1 if keepdim else 0)


def argmax(x, dim=None, keepdim=False):
    """Index (int64) of the first maximum along dim; dim None: over the flattened tensor."""
    if dim is None:
        x = flatten(x)
        dim = 0
    return _call(lib.dlt_argmax, (x,), _t(x, "x"), int(dim), 1 if keepdim else 0)


def softmax(x, dim):
    return _call(lib.dlt_softmax, (x,), _t(x, "x"), int(dim))


def log_softmax(x, dim):
    return _call(lib.dlt_log_softmax, (x,), _t(x, "x"), int(dim))


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    arr, nd, _ = _shape_arg(normalized_shape)
    return _call(lib.dlt_layer_norm, (x,), _t(x, "x"), arr, nd, _opt(weight, "weight"),
                 _opt(bias, "bias"), float(eps))


def layer_norm_to(x, normalized_shape, dtype, weight=None, bias=None, eps=1e-5):
    """layer_norm(...).to(dtype) in one kernel: the same values and gradients, no f32 output."""
    arr, nd, _ = _shape_arg(normalized_shape)
    return _call(lib.dlt_layer_norm_to, (x,), _t(x, "x"), arr, nd, _opt(weight, "weight"),
                 _opt(bias, "bias"), float(eps), _dt.dtype(dtype))


def add_layer_norm(x, b, normalized_shape, dtype, weight=None, bias=None, eps=1e-5):
    """(x + b, layer_norm(x + b).to(dtype)): a pre-LN block's residual add and the LayerNorm
    after it, the two ops' values and gradients in fewer passes (dlt_add_layer_norm)."""
    arr, nd, _ = _shape_arg(normalized_shape)
    s, y = ctypes.c_void_p(), ctypes.c_void_p()
    check(lib.dlt_add_layer_norm(_t(x, "x"), _t(b, "b"), arr, nd, _opt(weight, "weight"), _opt(bias, "bias"),
                                 float(eps), _dt.dtype(dtype), ctypes.byref(s), ctypes.byref(y)))
    ctx = _ctx_of(x, b)
    return Tensor._wrap(s.value, ctx), Tensor._wrap(y.value, ctx)


def dropout(x, p=0.5, training=True):
    return _call(lib.dlt_dropout, (x,), _t(x, "x"), float(p), 1 if training else 0)


def embedding(idx, weight, padding_idx=None):
    """F.embedding(idx, weight, padding_idx): rows of weight [V, D] at integer idx."""
    pad = NO_PADDING_IDX if padding_idx is None else int(padding_idx)
    return _call(lib.dlt_embedding, (weight,), _t(weight, "weight"), _t(idx, "idx"), pad)


def scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False,
                                 scale=None):
    """F.scaled_dot_product_attention for q [B,H,T,D], k, v [B,H,S,D] (no attn_mask)."""
    if attn_mask is not None:
        raise NotImplementedError("libdltrain's attention takes is_causal, not attn_mask")
    return _call(lib.dlt_scaled_dot_product_attention, (q, k, v), _t(q, "q"), _t(k, "k"),
                 _t(v, "v"), 1 if is_causal else 0, float(dropout_p),
                 0.0 if scale is None else float(scale))


def scaled_dot_product_attention_qkvpacked(qkv, n_head, dropout_p=0.0, is_causal=False, scale=None):
    """Attention of the heads packed in qkv [B,T,3C] (q, k, v side by side, nanoGPT's c_attn
    output), merged back to [B,T,C]: split, view as n_head heads, transpose, SDPA, transpose
    back, in one op (no copies where cuDNN serves)."""
    return _call(lib.dlt_scaled_dot_product_attention_qkvpacked, (qkv,), _t(qkv, "qkv"), int(n_head),
                 1 if is_causal else 0, float(dropout_p), 0.0 if scale is None else float(scale))


def matmul(a, b):
    return _call(lib.dlt_matmul, (a, b), _t(a, "a"), _t(b, "b"))


def bmm(a, b):
    return _call(lib.dlt_bmm, (a, b), _t(a, "a"), _t(b, "b"))


# ---- layout (copies, except contiguous-block narrow/split pieces) ------------------------

def transpose(x, dim0, dim1):
    return _call(lib.dlt_transpose, (x,), _t(x, "x"), int(dim0), int(dim1))


def permute(x, *dims):
    if len(dims) == 1 and not isinstance(dims[0], numbers.Integral):
        dims = tuple(dims[0])
    arr = (ctypes.c_int32 * max(len(dims), 1))(*[int(d) for d in dims])
    return _call(lib.dlt_permute, (x,), _t(x, "x"), arr, len(dims))


def narrow(x, dim, start, length):
    return _call(lib.dlt_narrow, (x,), _t(x, "x"), int(dim), int(start), int(length))


def split(x, split_size, dim=0):
    """Pieces of split_size along dim (an int size; the last piece may be smaller)."""
    n = ctypes.c_int32()
    h = _t(x, "x")
    cap = 64
    while True:
        outs = (ctypes.c_void_p * cap)()
        st = lib.dlt_split(h, int(split_size), int(dim), outs, cap, ctypes.byref(n))
        if st != 0 and n.value > cap:
            cap = n.value
            continue
        check(st)
        return tuple(Tensor._wrap(outs[i], _ctx_of(x)) for i in range(n.value))


def cat(tensors, dim=0):
    tensors = list(tensors)
    arr = (ctypes.c_void_p * max(len(tensors), 1))(*[_t(t, "tensors[%d]" % i)
                                                     for i, t in enumerate(tensors)])
    return _call(lib.dlt_cat, tuple(tensors), arr, len(tensors), int(dim))


def contiguous(x):
    return _call(lib.dlt_contiguous, (x,), _t(x, "x"))


def expand(x, *shape):
    if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
        shape = tuple(shape[0])
    arr, nd, _ = _shape_arg(shape)
    return _call(lib.dlt_expand, (x,), _t(x, "x"), arr, nd)


# ---- losses --------------------------------------------------------------------------------

def mse_loss(input, target, reduction="mean"):  # noqa: A002 (PyTorch's argument names)
    return _call(lib.dlt_mse_loss, (input, target), _t(input, "input"), _t(target, "target"),
                 _reduction(reduction))


def binary_cross_entropy_with_logits(input, target, weight=None, reduction="mean",  # noqa: A002
                                     pos_weight=None):
    return _call(lib.dlt_binary_cross_entropy_with_logits, (input, target), _t(input, "input"),
                 _t(target, "target"), _opt(weight, "weight"), _opt(pos_weight, "pos_weight"),
                 _reduction(reduction))

