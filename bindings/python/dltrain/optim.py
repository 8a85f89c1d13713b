"""Optimizers and learning-rate schedules (include/dltrain/optim.h).

    opt = dltrain.optim.SGD(model.parameters(), lr=0.01)
    opt.zero_grad(); loss.backward(); opt.step()

The optimizer retains its parameters. Its learning rate and step count live on the device:
step() and zero_grad() only enqueue work; reading lr or step_count synchronises.
Schedules are evaluated on the device after every applied step:
    opt.schedule_step(step_size, gamma)         StepLR
    opt.schedule_multistep(milestones, gamma)   MultiStepLR
    opt.schedule_cosine(t_max, eta_min)         CosineAnnealingLR
    opt.schedule_warmup(steps, start_factor)    LinearLR warm-up (combines with the above)
"""

import ctypes

from ._guard import tag_array
from ._handle import Handle
from ._lib import lib, check
from ._tensor import Tensor


class Optimizer(Handle):
    __slots__ = ("__dict__",)
    _destroy = staticmethod(lib.dlt_optimizer_destroy)
    _what = "optimizer"

    def __init__(self, ptr, ctx):
        Handle.__init__(self, ptr, (ctx,))
        self.ctx = ctx

    def step(self):
        """One update of every parameter that has a gradient (enqueued)."""
        check(lib.dlt_optimizer_step(self.handle))

    def zero_grad(self, set_to_none=True):
        check(lib.dlt_optimizer_zero_grad(self.handle, 1 if set_to_none else 0))

    @property
    def lr(self):
        """Current learning rate (synchronises)."""
        v = ctypes.c_double()
        check(lib.dlt_optimizer_get_lr(self.handle, ctypes.byref(v)))
        return v.value

    @lr.setter
    def lr(self, value):
        check(lib.dlt_optimizer_set_lr(self.handle, float(value)))

    def set_lr(self, value):
        self.lr = value

    def get_lr(self):
        return self.lr

    @property
    def step_count(self):
        """Applied steps (skipped GradScaler steps do not count). Synchronises."""
        v = ctypes.c_int64()
        check(lib.dlt_optimizer_step_count(self.handle, ctypes.byref(v)))
        return v.value

    @property
    def last_step_applied(self):
        """False when the GradScaler skipped the last step. Synchronises."""
        v = ctypes.c_int32()
        check(lib.dlt_optimizer_last_step_applied(self.handle, ctypes.byref(v)))
        return bool(v.value)

    def __len__(self):
        return int(lib.dlt_optimizer_num_params(self.handle))

    @property
    def num_params(self):
        return len(self)

    def param(self, i):
        """Parameter i (a reference of its own: valid after the optimizer is closed), None
        when out of range."""
        return Tensor._retain(lib.dlt_optimizer_param(self.handle, int(i)), self.ctx)

    @property
    def params(self):
        return [self.param(i) for i in range(len(self))]

    def momentum_buffer(self, i):
        """Momentum buffer of parameter i (a reference of its own), None before its first
        update."""
        return Tensor._retain(lib.dlt_optimizer_momentum_buffer(self.handle, int(i)), self.ctx)

    # ---- schedules -----------------------------------------------------------------------
    def schedule_step(self, step_size, gamma=0.1):
        check(lib.dlt_lr_schedule_step(self.handle, int(step_size), float(gamma)))

    def schedule_multistep(self, milestones, gamma=0.1):
        ms = [int(m) for m in milestones]
        arr = (ctypes.c_int64 * max(len(ms), 1))(*ms)
        check(lib.dlt_lr_schedule_multistep(self.handle, arr, len(ms), float(gamma)))

    def schedule_cosine(self, t_max, eta_min=0.0):
        check(lib.dlt_lr_schedule_cosine(self.handle, int(t_max), float(eta_min)))

    def schedule_warmup(self, steps, start_factor=1.0 / 3.0):
        check(lib.dlt_lr_schedule_warmup(self.handle, int(steps), float(start_factor)))

    def schedule_clear(self):
        check(lib.dlt_lr_schedule_clear(self.handle))


def _params(params):
    from .nn import Module
    if isinstance(params, Module):
        params = params.parameters()
    elif isinstance(params, Tensor):
        params = [params]
    params = list(params)
    arr = (ctypes.c_void_p * max(len(params), 1))()
    ctx = None
    for i, p in enumerate(params):
        if p is None:
            arr[i] = None
            continue
        if not isinstance(p, Tensor):
            raise TypeError("params[%d] must be a Tensor, got %s" % (i, type(p).__name__))
        arr[i] = p.handle
        ctx = ctx or p.ctx
    tag_array(arr, params)
    return arr, len(params), ctx


class SGD(Optimizer):
    """torch.optim.SGD(params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False,
    maximize=False). params: tensors (fp32 leaves of one context) or a Module."""

    def __init__(self, params, lr=0.001, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, maximize=False):
        arr, n, ctx = _params(params)
        out = ctypes.c_void_p()
        check(lib.dlt_sgd_create(arr, n, float(lr), float(momentum), float(dampening),
                                 float(weight_decay), 1 if nesterov else 0, 1 if maximize else 0,
                                 ctypes.byref(out)))
        Optimizer.__init__(self, out.value, ctx)

    def options(self):
        """Hyper-parameters as given at creation."""
        m, d, wd = ctypes.c_double(), ctypes.c_double(), ctypes.c_double()
        nest, maxi = ctypes.c_int32(), ctypes.c_int32()
        check(lib.dlt_sgd_get_options(self.handle, ctypes.byref(m), ctypes.byref(d),
                                      ctypes.byref(wd), ctypes.byref(nest), ctypes.byref(maxi)))
        return {"momentum": m.value, "dampening": d.value, "weight_decay": wd.value,
                "nesterov": bool(nest.value), "maximize": bool(maxi.value)}
