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

__all__ = ["conv2d", "batch_norm2d", "batch_norm2d_act", "relu", "max_pool2d",
           "global_avg_pool2d", "adaptive_avg_pool2d", "linear", "add", "mul_scalar", "sum",
           "mean", "reshape", "flatten", "cast", "cross_entropy", "REDUCTION_MEAN",
           "REDUCTION_SUM"]


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
    """y = x weight^T + bias; x [M,K], weight [N,K], bias [N] or None."""
    return _call(lib.dlt_linear, (x, weight), _t(x, "x"), _t(weight, "weight"),
                 _opt(bias, "bias"))


def add(a, b):
    """a + b (same shape, dtype and format)."""
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


_REDUCTIONS = {"mean": REDUCTION_MEAN, "sum": REDUCTION_SUM}


def cross_entropy(logits, targets, ignore_index=-100, reduction="mean"):
    """Cross-entropy of logits [N,K] against integer targets [N] (f32 scalar result),
    PyTorch's F.cross_entropy with its defaults."""
    if isinstance(reduction, str):
        if reduction not in _REDUCTIONS:
            raise ValueError("reduction must be 'mean' or 'sum', got %r" % reduction)
        reduction = _REDUCTIONS[reduction]
    return _call(lib.dlt_cross_entropy, (logits, targets), _t(logits, "logits"),
                 _t(targets, "targets"), int(ignore_index), int(reduction))

