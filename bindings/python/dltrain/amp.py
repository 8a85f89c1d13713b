"""Mixed precision (include/dltrain/amp.h): autocast regions and the GradScaler.

    scaler = dltrain.amp.GradScaler()
    with dltrain.autocast(dtype="f16"):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()

The scale, the inf/NaN check and the skip decision live on the device; only get_scale(),
found_inf() and state_dict() synchronise.
"""

import ctypes

from . import dtypes as _dt
from ._handle import Handle, arg
from ._lib import lib, check
from .context import resolve
from ._tensor import Tensor


class autocast:
    """Context manager: conv2d and linear inside run in dtype (f16 default, or bf16; f32
    switches autocast off inside an outer region). Regions nest up to 16 deep.

    autocast("cuda", dtype=...) is accepted as PyTorch spells it (the device type is not
    used: the region applies to the context, ctx=None meaning the current one)."""

    def __init__(self, device_type=None, dtype=None, enabled=True, *, ctx=None):
        if device_type is not None and not (isinstance(device_type, str)
                                            and device_type.lower() in ("cuda", "cpu")):
            if dtype is not None:
                raise TypeError("autocast(device_type, dtype): device_type must be 'cuda' or "
                                "'cpu'")
            dtype, device_type = device_type, None  # autocast(dtype) positional
        self.dtype = _dt.float16 if dtype is None else _dt.dtype(dtype)
        self.enabled = enabled
        self._ctx = ctx
        self._open = []

    def __enter__(self):
        ctx = resolve(self._ctx)
        if self.enabled:
            check(lib.dlt_autocast_begin(ctx.handle, self.dtype))
            self._open.append(ctx)
        else:
            self._open.append(None)
        return self

    def __exit__(self, *exc):
        ctx = self._open.pop()
        if ctx is not None:
            check(lib.dlt_autocast_end(ctx.handle))
        return False


def autocast_dtype(ctx=None):
    """dtype in force, or None outside autocast."""
    return resolve(ctx).autocast_dtype


def autocast_begin(dtype, ctx=None):
    check(lib.dlt_autocast_begin(resolve(ctx).handle, _dt.dtype(dtype)))


def autocast_end(ctx=None):
    check(lib.dlt_autocast_end(resolve(ctx).handle))


class GradScaler(Handle):
    """torch.amp.GradScaler with PyTorch's defaults."""

    __slots__ = ("__dict__",)
    _destroy = staticmethod(lib.dlt_grad_scaler_destroy)
    _what = "grad scaler"

    def __init__(self, init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True, *, ctx=None):
        ctx = resolve(ctx)
        out = ctypes.c_void_p()
        check(lib.dlt_grad_scaler_create(ctx.handle, float(init_scale), float(growth_factor),
                                         float(backoff_factor), int(growth_interval),
                                         1 if enabled else 0, ctypes.byref(out)))
        Handle.__init__(self, out.value, (ctx,))
        self.ctx = ctx

    def is_enabled(self):
        return bool(lib.dlt_grad_scaler_is_enabled(self.handle))

    def scale(self, loss):
        """loss * scale (a new tensor; differentiable w.r.t. loss)."""
        out = ctypes.c_void_p()
        check(lib.dlt_grad_scaler_scale(self.handle, arg(loss, Tensor, "loss"),
                                        ctypes.byref(out)))
        return Tensor._wrap(out.value, loss.ctx if isinstance(loss, Tensor) else self.ctx)

    def unscale_(self, optimizer):
        from .optim import Optimizer
        check(lib.dlt_grad_scaler_unscale(self.handle, arg(optimizer, Optimizer, "optimizer")))

    def step(self, optimizer):
        """Unscales (if not done), then steps unless an inf/NaN was found (on the device)."""
        from .optim import Optimizer
        check(lib.dlt_grad_scaler_step(self.handle, arg(optimizer, Optimizer, "optimizer")))

    def update(self, new_scale=None):
        if new_scale is None:
            check(lib.dlt_grad_scaler_update(self.handle))
        else:
            check(lib.dlt_grad_scaler_update_to(self.handle, float(new_scale)))

    def get_scale(self):
        """Current scale (1.0 when disabled). Synchronises."""
        v = ctypes.c_double()
        check(lib.dlt_grad_scaler_get_scale(self.handle, ctypes.byref(v)))
        return v.value

    @property
    def scale_tensor(self):
        """The scale as a one-element f32 device tensor (the scaler's own, updated in place;
        the Tensor holds a reference of its own), None when disabled."""
        return Tensor._retain(lib.dlt_grad_scaler_scale_tensor(self.handle), self.ctx)

    def found_inf(self, optimizer):
        """True if the last unscale found inf/NaN in optimizer's gradients. Synchronises."""
        from .optim import Optimizer
        v = ctypes.c_int32()
        check(lib.dlt_grad_scaler_found_inf(self.handle, arg(optimizer, Optimizer, "optimizer"),
                                            ctypes.byref(v)))
        return bool(v.value)

    def state_dict(self):
        """PyTorch's GradScaler.state_dict() fields ({} when disabled, as PyTorch).
        Synchronises."""
        if not self.is_enabled():
            return {}
        s, g, b = ctypes.c_double(), ctypes.c_double(), ctypes.c_double()
        gi, gt = ctypes.c_int32(), ctypes.c_int32()
        check(lib.dlt_grad_scaler_get_state(self.handle, ctypes.byref(s), ctypes.byref(g),
                                            ctypes.byref(b), ctypes.byref(gi), ctypes.byref(gt)))
        return {"scale": s.value, "growth_factor": g.value, "backoff_factor": b.value,
                "growth_interval": gi.value, "_growth_tracker": gt.value}

    def load_state_dict(self, state):
        """Sets the five fields of state_dict(). A disabled scaler ignores an empty dict."""
        if not state and not self.is_enabled():
            return
        check(lib.dlt_grad_scaler_set_state(self.handle, float(state["scale"]),
                                            float(state["growth_factor"]),
                                            float(state["backoff_factor"]),
                                            int(state["growth_interval"]),
                                            int(state["_growth_tracker"])))
