"""The ops behind Tensor's operators, indexing and shape methods.

They call the C ops the lead is adding (issue 16): dlt_sub, dlt_mul, dlt_div (broadcasting,
type promotion), dlt_add (broadcasting), dlt_add_scalar, dlt_neg, dlt_matmul, dlt_narrow,
dlt_cat, dlt_transpose, dlt_permute; each returns a new tensor and records itself for
autograd. A function the loaded library does not export raises NotImplementedError naming
it, except where an older op gives the same result (noted below).

Their signatures are rows of _lib._SIGNATURES (include/dltrain/ops.h).
"""

import ctypes
import operator

from . import _lib
from ._lib import lib, check, STATUS, PTR, I32, I64, F64, P
from ._guard import tag_array
from ._handle import arg
from ._tensor import Tensor
from .ops import mul_scalar  # noqa: F401 - the operators use it from here

#: The C ops this module needs (tests skip their cases while one is missing).
C_OPS = ("dlt_sub", "dlt_mul", "dlt_div", "dlt_add_scalar", "dlt_neg", "dlt_matmul", "dlt_narrow",
         "dlt_cat", "dlt_transpose", "dlt_permute")


def _call(fn, ctx, *args):
    out = ctypes.c_void_p()
    check(fn(*args, ctypes.byref(out)))
    return Tensor._wrap(out.value, ctx)


def _t(x, name):
    return arg(x, Tensor, name)


def _dim(d, ndim, name="dim"):
    d = operator.index(d)
    n = max(ndim, 1)
    if not -n <= d < n:
        raise IndexError("Dimension out of range (expected to be in range of [%d, %d], but got "
                         "%d)" % (-n, n - 1, d))
    return d + n if d < 0 else d


def add(a, b):
    """a + b with broadcasting (dlt_add)."""
    from .ops import add as _add
    return _add(a, b)


def sub(a, b):
    """a - b with broadcasting (dlt_sub; without it, same shapes through dlt_add)."""
    if not lib.has("dlt_sub") and isinstance(b, Tensor):
        from .ops import add as _add, mul_scalar
        return _add(a, mul_scalar(b, None, -1.0))
    return _call(lib.dlt_sub, a.ctx, _t(a, "a"), _t(b, "b"))


def mul(a, b):
    """a * b with broadcasting (dlt_mul). Without dlt_mul a one-element operand scales the
    other through dlt_mul_scalar (no gradient flows into the one-element operand then)."""
    if not lib.has("dlt_mul") and isinstance(a, Tensor) and isinstance(b, Tensor):
        from .ops import mul_scalar
        if b.numel == 1 and b.dtype.long_name == "float32":
            return mul_scalar(a, b, 1.0)
        if a.numel == 1 and a.dtype.long_name == "float32":
            return mul_scalar(b, a, 1.0)
    return _call(lib.dlt_mul, a.ctx, _t(a, "a"), _t(b, "b"))


def div(a, b):
    """a / b with broadcasting (dlt_div)."""
    return _call(lib.dlt_div, a.ctx, _t(a, "a"), _t(b, "b"))


def add_scalar(x, s):
    """x + s for a Python number s (dlt_add_scalar; without it, dlt_add of a filled tensor)."""
    if not lib.has("dlt_add_scalar") and isinstance(x, Tensor):
        from ._factories import full_like
        from .ops import add as _add
        return _add(x, full_like(x, s))
    return _call(lib.dlt_add_scalar, x.ctx, _t(x, "x"), float(s))


def neg(x):
    """-x (dlt_neg; without it, dlt_mul_scalar by -1)."""
    if not lib.has("dlt_neg"):
        from .ops import mul_scalar
        return mul_scalar(x, None, -1.0)
    return _call(lib.dlt_neg, x.ctx, _t(x, "x"))


def matmul(a, b):
    """a @ b with PyTorch's matmul rules (dlt_matmul)."""
    return _call(lib.dlt_matmul, a.ctx, _t(a, "a"), _t(b, "b"))


def narrow(x, dim, start, length):
    """length entries of dimension dim from start (dlt_narrow)."""
    d = _dim(dim, x.ndim)
    return _call(lib.dlt_narrow, x.ctx, _t(x, "x"), d, operator.index(start),
                 operator.index(length))


def transpose(x, dim0, dim1):
    n = x.ndim
    return _call(lib.dlt_transpose, x.ctx, _t(x, "x"), _dim(dim0, n), _dim(dim1, n))


def permute(x, dims):
    dims = [_dim(d, x.ndim) for d in dims]
    arr = (ctypes.c_int32 * max(len(dims), 1))(*dims)
    return _call(lib.dlt_permute, x.ctx, _t(x, "x"), arr, len(dims))


def cat(tensors, dim=0):
    """Concatenation along dim (dlt_cat); every tensor of one context."""
    ts = list(tensors)
    if not ts:
        raise ValueError("cat() expects a non-empty list of tensors")
    handles = (ctypes.c_void_p * len(ts))()
    for i, t in enumerate(ts):
        handles[i] = arg(t, Tensor, "tensors[%d]" % i)
    first = ts[0]
    tag_array(handles, ts)
    return _call(lib.dlt_cat, first.ctx, handles, len(ts), _dim(dim, first.ndim))


def scalar_tensor(s, like):
    """A 0-d tensor holding s, of like's dtype and context."""
    from ._factories import full
    return full((), s, dtype=like.dtype, ctx=like.ctx)
