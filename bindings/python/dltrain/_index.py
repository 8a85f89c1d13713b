"""t[key]: PyTorch's basic indexing, built from dlt_narrow and dlt_reshape.

Supported: integers (negative count from the end), slices with step 1 (or None), None (a
new dimension of size 1) and one Ellipsis. Every integer or partial slice is one
dlt_narrow along its dimension; integers then drop their dimension and None adds one,
through one dlt_reshape at the end. All of it is recorded for autograd, so
`loss = x[0, 1:3].sum()` flows back into x. Whether the result shares x's memory is the
library's choice (dlt_narrow gives a view where its layout allows, a copy otherwise);
write into a tensor with copy_/fill_, not through an index (t[...] = v on a whole tensor is
the one form of assignment, as fill_/copy_).

Refused with a clear error: steps other than 1 (ValueError), tensors, lists and bools as
indices (TypeError: no advanced indexing), too many indices and out-of-range integers
(IndexError, PyTorch's messages).
"""

import numbers
import operator


def _expand(key, ndim):
    if not isinstance(key, tuple):
        key = (key,)
    for k in key:
        if isinstance(k, bool) or not (k is None or k is Ellipsis or isinstance(k, slice) or
                                       hasattr(k, "__index__")):
            raise TypeError("only integers, slices (step 1), None and Ellipsis are valid "
                            "indices (no advanced indexing with %s)" % type(k).__name__)
        if hasattr(k, "__index__") and not isinstance(k, numbers.Integral) and \
                getattr(k, "ndim", 0) not in (0, None):
            raise TypeError("only integers, slices (step 1), None and Ellipsis are valid "
                            "indices (no advanced indexing with %s)" % type(k).__name__)
    n_ell = sum(1 for k in key if k is Ellipsis)
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consuming = sum(1 for k in key if k is not None and k is not Ellipsis)
    if consuming > ndim:
        raise IndexError("too many indices for tensor of dimension %d" % ndim)
    if n_ell:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (ndim - consuming) + key[i + 1:]
    else:
        key = key + (slice(None),) * (ndim - consuming)
    return key


def plan(shape, key):
    """([(dim, start, length) narrows], final shape or None when unchanged) for t[key]."""
    key = _expand(key, len(shape))
    narrows = []
    out_shape = []
    d = 0
    for k in key:
        if k is None:
            out_shape.append(1)
            continue
        size = shape[d]
        if isinstance(k, slice):
            step = 1 if k.step is None else operator.index(k.step)
            if step == 0:
                raise ValueError("slice step cannot be zero")
            if step < 0:
                raise ValueError("negative slice steps are not supported (step %d)" % step)
            if step != 1:
                raise ValueError("slice step %d is not supported (only step 1: libdltrain has "
                                 "no strided views)" % step)
            start, stop, _ = k.indices(size)
            length = max(0, stop - start)
            if start != 0 or length != size:
                narrows.append((d, start, length))
            out_shape.append(length)
        else:
            i = operator.index(k)
            if not -size <= i < size:
                raise IndexError("index %d is out of bounds for dimension %d with size %d"
                                 % (i, d, size))
            narrows.append((d, i + size if i < 0 else i, 1))
        d += 1
    if not narrows and tuple(out_shape) == tuple(shape):
        return [], None
    return narrows, tuple(out_shape)


def getitem(t, key):
    shape = t.shape
    if not shape and key not in (Ellipsis, None, ()) and not (
            isinstance(key, tuple) and all(k is None or k is Ellipsis for k in key)):
        raise IndexError("invalid index of a 0-dim tensor. Use `tensor.item()` to convert a "
                         "0-dim tensor to a Python number")
    narrows, out_shape = plan(shape, key)
    if out_shape is None:
        return t
    from ._ops_ext import narrow
    from .ops import reshape
    r = t
    for d, start, length in narrows:
        r = narrow(r, d, start, length)
    if tuple(r.shape) != out_shape:
        r = reshape(r, out_shape)
    return r


def setitem(t, key, value):
    from ._tensor import Tensor
    narrows, out_shape = plan(t.shape, key)
    if narrows:
        raise TypeError("assignment to part of a tensor is not supported (libdltrain has no "
                        "in-place slice writes); build the values and copy_() them into the "
                        "whole tensor")
    if isinstance(value, Tensor):
        if value.shape != t.shape:
            raise ValueError("shape mismatch: value of shape %s cannot be assigned to a tensor "
                             "of shape %s" % (list(value.shape), list(t.shape)))
        t.copy_(value)
    elif isinstance(value, numbers.Number):
        t.fill_(value)
    else:
        raise TypeError("can assign a number or a Tensor, not %s" % type(value).__name__)
