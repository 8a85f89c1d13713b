"""The gradient tape (include/dltrain/autograd.h): backward, zero-grad, no-grad.

backward ACCUMULATES into leaf gradients (+=); zero_grad(set_to_none=True) marks them absent
and lets their buffers go, so the next backward writes new ones. Grad mode is per context.
"""

import ctypes

from ._guard import tag_array
from ._handle import arg
from ._lib import lib, check
from .context import resolve
from ._tensor import Tensor


def backward(root, grad=None):
    """Runs backward from root (a loss). grad: d(output)/d(root), or None for a
    one-element root (then 1 is used)."""
    check(lib.dlt_backward(arg(root, Tensor, "root"), arg(grad, Tensor, "grad", optional=True)))


def _param_array(params):
    if isinstance(params, Tensor):
        params = [params]
    params = list(params)
    arr = (ctypes.c_void_p * max(len(params), 1))()
    for i, p in enumerate(params):
        arr[i] = arg(p, Tensor, "params[%d]" % i, optional=True)
    tag_array(arr, params)
    return arr, len(params), params


def zero_grad(params, set_to_none=True):
    """Resets the gradients of the given leaves (None entries are skipped)."""
    arr, n, keep = _param_array(params)
    check(lib.dlt_zero_grad(arr, n, 1 if set_to_none else 0))
    del keep


def is_grad_enabled(ctx=None):
    return resolve(ctx).grad_enabled


def set_grad_enabled(enabled, ctx=None):
    """Turns recording on/off for ctx; returns the previous setting."""
    return resolve(ctx).set_grad_enabled(enabled)


class _GradMode:
    _enabled = True

    def __init__(self, ctx=None):
        self._ctx = ctx
        self._prev = []

    def __enter__(self):
        ctx = resolve(self._ctx)
        self._prev.append((ctx, ctx.set_grad_enabled(self._enabled)))
        return self

    def __exit__(self, *exc):
        ctx, prev = self._prev.pop()
        ctx.set_grad_enabled(prev)
        return False


class no_grad(_GradMode):
    """with dltrain.no_grad(ctx): nothing is recorded inside (ctx None: the current one)."""
    _enabled = False


class enable_grad(_GradMode):
    """with dltrain.enable_grad(ctx): recording on inside."""
    _enabled = True


def tape_live_nodes(ctx=None):
    return resolve(ctx).tape_live_nodes()


def tape_clear(ctx=None):
    resolve(ctx).tape_clear()


def detach(t):
    return t.detach()
