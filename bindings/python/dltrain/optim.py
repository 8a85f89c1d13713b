"""Optimizers, learning-rate schedules and gradient clipping (include/dltrain/optim.h).

    opt = dltrain.optim.SGD(model.parameters(), lr=0.01)
    opt = dltrain.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                               {"params": no_decay, "weight_decay": 0.0}],
                              lr=1e-3, betas=(0.9, 0.99))
    opt.zero_grad(); loss.backward()
    dltrain.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()

or, the clipping folded into the step (the same numbers; the gradients stay unclipped):
    opt.set_clip_grad_norm(1.0)      # once; opt.grad_norm() is the last step's total

The optimizer retains its parameters. Its learning rates and step counts live on the device:
step() and zero_grad() only enqueue work; reading lr or step_count synchronises.
Parameter groups are PyTorch's list of dicts (own "lr" and "weight_decay" per group; betas
and eps are the optimizer's); opt.param_groups[g]["lr"] = x writes through, as nanoGPT's
loop does. A tensor listed twice (a tied weight) is one parameter.
Schedules are evaluated on the device after every applied step (each group from its own
base lr):
    opt.schedule_step(step_size, gamma)         StepLR
    opt.schedule_multistep(milestones, gamma)   MultiStepLR
    opt.schedule_cosine(t_max, eta_min)         CosineAnnealingLR
    opt.schedule_warmup(steps, start_factor)    LinearLR warm-up (combines with the above)
    opt.schedule_warmup_cosine(warmup_iters, lr_decay_iters, min_lr)   nanoGPT's get_lr
    opt.schedule_constant(factor, total_iters)  ConstantLR
"""

import collections.abc
import ctypes
import math
import sys
import types

from ._guard import tag_array
from ._handle import Handle
from ._lib import lib, check
from ._tensor import Tensor


class _SgdOptions(ctypes.Structure):
    """dlt_sgd_options (optim.h); filled by dlt_sgd_options_init."""
    _fields_ = [("size", ctypes.c_uint32), ("lr", ctypes.c_double),
                ("momentum", ctypes.c_double), ("dampening", ctypes.c_double),
                ("weight_decay", ctypes.c_double), ("nesterov", ctypes.c_int32),
                ("maximize", ctypes.c_int32)]


class _AdamWOptions(ctypes.Structure):
    """dlt_adamw_options (optim.h); filled by dlt_adamw_options_init."""
    _fields_ = [("size", ctypes.c_uint32), ("decoupled_weight_decay", ctypes.c_int32),
                ("lr", ctypes.c_double), ("beta1", ctypes.c_double),
                ("beta2", ctypes.c_double), ("eps", ctypes.c_double),
                ("weight_decay", ctypes.c_double), ("amsgrad", ctypes.c_int32),
                ("maximize", ctypes.c_int32)]


def _tensor_array(params, what="params"):
    """(ctypes array of handles, count, context, tensors) of a Module, a Tensor or an
    iterable of tensors (None entries stay NULL)."""
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
            raise TypeError("%s[%d] must be a Tensor, got %s" % (what, i, type(p).__name__))
        arr[i] = p.handle
        ctx = ctx or p.ctx
    tag_array(arr, params)  # the thread guard finds the context through the array
    return arr, len(params), ctx, params


def _params(params):
    arr, n, ctx, _ = _tensor_array(params)
    return arr, n, ctx


def _split_groups(params, defaults):
    """PyTorch's params argument: tensors (one group) or a list of dicts. Returns a list of
    (tensors, {"lr": .., "weight_decay": ..}) with the defaults filled in."""
    from .nn import Module
    if isinstance(params, (Module, Tensor)):
        params = [params] if isinstance(params, Tensor) else params.parameters()
    params = list(params)
    if not params or not isinstance(params[0], dict):  # (the library refuses an empty list)
        return [(params, dict(defaults))]
    groups = []
    for i, g in enumerate(params):
        if not isinstance(g, dict) or "params" not in g:
            raise TypeError("param group %d must be a dict with a 'params' entry" % i)
        opts = dict(defaults)
        for k, v in g.items():
            if k == "params":
                continue
            if k not in defaults:
                raise ValueError("param group %d: unknown option %r" % (i, k))
            if k not in ("lr", "weight_decay") and v != defaults[k]:
                raise ValueError("param group %d: a per-group %r is not supported (libdltrain "
                                 "groups carry their own lr and weight_decay)" % (i, k))
            opts[k] = v
        p = g["params"]
        groups.append(([p] if isinstance(p, Tensor) else list(p), opts))
    return groups


class ParamGroup(collections.abc.MutableMapping):
    """One entry of Optimizer.param_groups, a mapping as PyTorch's dict: "params", "lr",
    "weight_decay" and the optimizer's other hyper-parameters. Reading "lr" synchronises;
    setting "lr" or "weight_decay" writes through to the optimizer (enqueued)."""

    def __init__(self, opt, index, params, extra):
        self._opt = opt
        self._index = index
        self._items = dict(extra)
        self._items["params"] = params

    def __getitem__(self, key):
        if key == "lr":
            v = ctypes.c_double()
            check(lib.dlt_optimizer_get_group_lr(self._opt.handle, self._index, ctypes.byref(v)))
            return v.value
        if key == "weight_decay":
            v = ctypes.c_double()
            check(lib.dlt_optimizer_get_group_weight_decay(self._opt.handle, self._index,
                                                           ctypes.byref(v)))
            return v.value
        return self._items[key]

    def __setitem__(self, key, value):
        if key == "lr":
            check(lib.dlt_optimizer_set_group_lr(self._opt.handle, self._index, float(value)))
        elif key == "weight_decay":
            check(lib.dlt_optimizer_set_group_weight_decay(self._opt.handle, self._index,
                                                           float(value)))
        elif key not in self._items or self._items[key] != value:
            raise ValueError("param_groups[%d][%r] cannot be changed (only 'lr' and "
                             "'weight_decay')" % (self._index, key))

    def __delitem__(self, key):
        raise TypeError("param group entries cannot be deleted")

    def __iter__(self):
        return iter(["params", "lr", "weight_decay"] + [k for k in self._items if k != "params"])

    def __len__(self):
        return len(self._items) + 2

    def __repr__(self):
        return "ParamGroup(%d: %d params, lr=%g, weight_decay=%g)" % (
            self._index, len(self._items["params"]), self["lr"], self["weight_decay"])


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
    def kind(self):
        """"SGD", "Adam" or "AdamW"."""
        return lib.dlt_optimizer_kind(self.handle).decode()

    @property
    def lr(self):
        """Current learning rate of group 0 (synchronises). Setting it sets every group's."""
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

    # ---- parameter groups ----------------------------------------------------------------
    def _group_extra(self):
        return {}

    @property
    def param_groups(self):
        """PyTorch's param_groups: one ParamGroup per group (see ParamGroup)."""
        n = len(self)
        members = [[] for _ in range(int(lib.dlt_optimizer_num_param_groups(self.handle)))]
        for i in range(n):
            members[int(lib.dlt_optimizer_param_group_of(self.handle, i))].append(self.param(i))
        return [ParamGroup(self, g, ps, self._group_extra()) for g, ps in enumerate(members)]

    def add_param_group(self, param_group):
        """torch.optim.Optimizer.add_param_group({"params": ..., "lr": ..., "weight_decay":
        ...}); missing entries take the optimizer's defaults. Adam/AdamW only."""
        groups = _split_groups([param_group], self.defaults)
        tensors, opts = groups[0]
        arr, n, _, _ = _tensor_array(tensors)
        check(lib.dlt_optimizer_add_param_group(self.handle, arr, n, float(opts["lr"]),
                                                float(opts["weight_decay"])))

    def _add_groups(self, groups):
        for tensors, opts in groups:
            arr, n, _, _ = _tensor_array(tensors)
            check(lib.dlt_optimizer_add_param_group(self.handle, arr, n, float(opts["lr"]),
                                                    float(opts["weight_decay"])))

    # ---- clipping fused into the step ------------------------------------------------------
    def set_clip_grad_norm(self, max_norm, norm_type=2.0):
        """Clips inside every following step (Keras' global_clipnorm): the step takes the
        total norm of the optimizer's gradients (norm_type 2, 1 or inf) and updates with
        grad * min(max_norm / (total + 1e-6), 1), the bits of clip_grad_norm_ then step(),
        without rewriting the gradients (they keep their unclipped values). Through a
        GradScaler the norm is of the unscaled gradients. Set it before capturing a graph."""
        check(lib.dlt_optimizer_set_clip_grad_norm(self.handle, float(max_norm), float(norm_type)))

    def clear_clip_grad_norm(self):
        """Turns the fused clipping off."""
        check(lib.dlt_optimizer_clear_clip_grad_norm(self.handle))

    def grad_norm(self):
        """The total norm the last step took (a 0-D tensor the optimizer's steps overwrite,
        graph replays too; .item() synchronises). Raises InvalidArgument (code
        ERR_INVALID_STATE) unless set_clip_grad_norm is in effect."""
        out = ctypes.c_void_p()
        check(lib.dlt_optimizer_grad_norm(self.handle, ctypes.byref(out)))
        return Tensor._wrap(out.value, self.ctx)

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

    def schedule_warmup_cosine(self, warmup_iters, lr_decay_iters, min_lr):
        """nanoGPT's get_lr: linear warm-up to each group's lr over warmup_iters, cosine
        decay to min_lr at lr_decay_iters, min_lr after."""
        check(lib.dlt_lr_schedule_warmup_cosine(self.handle, int(warmup_iters),
                                                int(lr_decay_iters), float(min_lr)))

    def schedule_constant(self, factor=1.0 / 3.0, total_iters=5):
        """ConstantLR: lr * factor for the first total_iters steps."""
        check(lib.dlt_lr_schedule_constant(self.handle, float(factor), int(total_iters)))

    def schedule_clear(self):
        check(lib.dlt_lr_schedule_clear(self.handle))


class SGD(Optimizer):
    """torch.optim.SGD(params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False,
    maximize=False). params: tensors (fp32 leaves of one context), a Module, or one param
    group dict (SGD keeps a single group)."""

    def __init__(self, params, lr=0.001, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, maximize=False):
        self.defaults = {"lr": lr, "momentum": momentum, "dampening": dampening,
                         "weight_decay": weight_decay, "nesterov": nesterov,
                         "maximize": maximize}
        groups = _split_groups(params, self.defaults)
        tensors, opts = groups[0]
        arr, n, ctx, _ = _tensor_array(tensors)
        o = _SgdOptions()
        lib.dlt_sgd_options_init(ctypes.byref(o), ctypes.sizeof(o))
        o.lr = float(opts["lr"])
        o.momentum = float(momentum)
        o.dampening = float(dampening)
        o.weight_decay = float(opts["weight_decay"])
        o.nesterov = 1 if nesterov else 0
        o.maximize = 1 if maximize else 0
        out = ctypes.c_void_p()
        check(lib.dlt_sgd_create_ex(arr, n, ctypes.byref(o), ctypes.byref(out)))
        Optimizer.__init__(self, out.value, ctx)
        self._add_groups(groups[1:])  # refused by the library: SGD has one group

    def _group_extra(self):
        d = dict(self.defaults)
        d.pop("lr")
        d.pop("weight_decay")
        return d

    def options(self):
        """Hyper-parameters as given at creation."""
        m, d, wd = ctypes.c_double(), ctypes.c_double(), ctypes.c_double()
        nest, maxi = ctypes.c_int32(), ctypes.c_int32()
        check(lib.dlt_sgd_get_options(self.handle, ctypes.byref(m), ctypes.byref(d),
                                      ctypes.byref(wd), ctypes.byref(nest), ctypes.byref(maxi)))
        return {"momentum": m.value, "dampening": d.value, "weight_decay": wd.value,
                "nesterov": bool(nest.value), "maximize": bool(maxi.value)}


class AdamW(Optimizer):
    """torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
    amsgrad=False, *, maximize=False). params: tensors, a Module or a list of param group
    dicts (each with its own "lr" and "weight_decay"). One multi-tensor kernel per step;
    PyTorch's foreach/fused/capturable choices are accepted and have no effect (the step is
    always one fused, capturable launch). amsgrad=True is not supported."""

    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None, decoupled_weight_decay=None):
        if differentiable:
            raise NotImplementedError("differentiable=True is not supported")
        decoupled = self._decoupled if decoupled_weight_decay is None else decoupled_weight_decay
        betas = tuple(float(b) for b in betas)
        if len(betas) != 2:
            raise ValueError("betas must be a pair, got %r" % (betas,))
        self.defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                         "amsgrad": amsgrad, "maximize": maximize}
        groups = _split_groups(params, self.defaults)
        tensors, opts = groups[0]
        arr, n, ctx, _ = _tensor_array(tensors)
        o = _AdamWOptions()
        lib.dlt_adamw_options_init(ctypes.byref(o), ctypes.sizeof(o))
        o.decoupled_weight_decay = 1 if decoupled else 0
        o.lr = float(opts["lr"])
        o.beta1, o.beta2 = betas
        o.eps = float(eps)
        o.weight_decay = float(opts["weight_decay"])
        o.amsgrad = 1 if amsgrad else 0
        o.maximize = 1 if maximize else 0
        out = ctypes.c_void_p()
        check(lib.dlt_adamw_create_ex(arr, n, ctypes.byref(o), ctypes.byref(out)))
        Optimizer.__init__(self, out.value, ctx)
        self._add_groups(groups[1:])

    def _group_extra(self):
        d = dict(self.defaults)
        d.pop("lr")
        d.pop("weight_decay")
        return d

    def exp_avg(self, i):
        """First moment of parameter i (borrowed), None before its first step."""
        return Tensor._borrow(lib.dlt_optimizer_exp_avg(self.handle, int(i)), self, self.ctx)

    def exp_avg_sq(self, i):
        """Second moment of parameter i (borrowed), None before its first step."""
        return Tensor._borrow(lib.dlt_optimizer_exp_avg_sq(self.handle, int(i)), self, self.ctx)

    def param_step(self, i):
        """Parameter i's step count, PyTorch's state["step"] (synchronises)."""
        v = ctypes.c_int64()
        check(lib.dlt_optimizer_param_step(self.handle, int(i), ctypes.byref(v)))
        return v.value


class Adam(AdamW):
    """torch.optim.Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
    amsgrad=False, *, maximize=False, decoupled_weight_decay=False): weight decay is L2
    added to the gradient (decoupled_weight_decay=True makes it AdamW)."""

    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, **kwargs):
        AdamW.__init__(self, params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                       amsgrad=amsgrad, **kwargs)


def nanogpt_param_groups(parameters, weight_decay):
    """nanoGPT's grouping (model.py configure_optimizers): weight decay on tensors with 2
    or more dims (matmul weights, embeddings), none on the rest (biases, LayerNorm).
    parameters: a Module, or (name, tensor) pairs, or tensors; a tensor listed twice
    (tied) counts once. Returns the list of two dicts an optimizer takes."""
    from .nn import Module
    if isinstance(parameters, Module):
        parameters = parameters.parameters()
    seen, decay, no_decay = set(), [], []
    for p in parameters:
        t = p[1] if isinstance(p, tuple) else p
        if t.handle in seen:
            continue
        seen.add(t.handle)
        (decay if t.ndim >= 2 else no_decay).append(t)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


# ---- clipping (torch.nn.utils.clip_grad_norm_; also dltrain.nn.utils) ----------------------

def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None):
    """torch.nn.utils.clip_grad_norm_: scales the gradients of parameters so that their
    total norm (norm_type 2, 1 or inf) is at most max_norm, with PyTorch's coefficient
    min(max_norm / (total + 1e-6), 1), on the device (no synchronisation). Returns the total
    norm as a 0-D tensor. error_if_nonfinite=True reads the total first (a synchronisation)
    and raises RuntimeError when it is inf or NaN, leaving the gradients as they were."""
    arr, n, ctx, _ = _tensor_array(parameters, "parameters")
    norm_type = float(norm_type)
    out = ctypes.c_void_p()
    if ctx is None:  # no tensor at all: PyTorch returns tensor(0.)
        raise ValueError("clip_grad_norm_ needs at least one tensor (to know the device)")
    if error_if_nonfinite:
        check(lib.dlt_grad_norm(arr, n, norm_type, ctypes.byref(out)))
        total = Tensor._wrap(out.value, ctx)
        if not math.isfinite(total.item()):
            raise RuntimeError(
                "The total norm of order %s for gradients from `parameters` is non-finite, so "
                "it cannot be clipped. To disable this error and scale the gradients by the "
                "non-finite norm anyway, set `error_if_nonfinite=False`" % norm_type)
        out = ctypes.c_void_p()
    check(lib.dlt_clip_grad_norm(arr, n, float(max_norm), norm_type, ctypes.byref(out)))
    return Tensor._wrap(out.value, ctx)


def clip_grad_norm(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                   foreach=None):
    """Deprecated spelling of clip_grad_norm_ (as in PyTorch)."""
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def _install_nn_utils():
    """dltrain.nn.utils (torch.nn.utils' spelling): clip_grad_norm_ lives here because
    dltrain.nn is a module, not a package; registered so that `import dltrain.nn.utils`
    and `from dltrain.nn.utils import clip_grad_norm_` work."""
    from . import nn
    name = nn.__name__ + ".utils"
    utils = sys.modules.get(name)
    if utils is None:
        utils = types.ModuleType(name, "torch.nn.utils' gradient clipping (dltrain.optim).")
        sys.modules[name] = utils
    utils.clip_grad_norm_ = clip_grad_norm_
    utils.clip_grad_norm = clip_grad_norm
    if not hasattr(nn, "utils"):
        nn.utils = utils


_install_nn_utils()
