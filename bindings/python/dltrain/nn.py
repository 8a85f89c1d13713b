"""Modules (include/dltrain/nn.h): layers that own their parameters, Sequential, and
torchvision's ResNets.

    model = dltrain.nn.resnet50(num_classes=10)          # on the current context
    out = model(x)                                       # dlt_module_forward
    for name, p in model.named_parameters(): ...         # PyTorch's state_dict names

Parameters and buffers are borrowed from the module: the Tensor objects keep the module
alive and are never released by Python. A module appended to a Sequential belongs to the
container from then on (the Python object stays usable and keeps the container alive).
"""

import collections
import ctypes
import numbers

from . import dtypes as _dt
from ._handle import Handle, arg
from ._lib import lib, check, enc
from .context import resolve
from ._tensor import Tensor


def _create(fn, ctx, *args):
    out = ctypes.c_void_p()
    check(fn(ctx.handle, *args, ctypes.byref(out)))
    return out.value


class Module(Handle):
    """A libdltrain module (dlt_module). Subclasses are the layer constructors."""

    __slots__ = ("__dict__",)
    _destroy = staticmethod(lib.dlt_module_destroy)
    _what = "module"

    def __init__(self, ptr, ctx):
        Handle.__init__(self, ptr, (ctx,))
        self.ctx = ctx

    @classmethod
    def _from_handle(cls, ptr, ctx):
        m = Module.__new__(cls)
        Module.__init__(m, ptr, ctx)
        return m

    # ---- running ---------------------------------------------------------------------------
    def forward(self, x):
        out = ctypes.c_void_p()
        check(lib.dlt_module_forward(self.handle, arg(x, Tensor, "x"), ctypes.byref(out)))
        return Tensor._wrap(out.value, self.ctx)

    def __call__(self, x):
        return self.forward(x)

    def train(self, mode=True):
        """Training (True) or evaluation (False) mode, recursively. Returns self."""
        check(lib.dlt_module_set_training(self.handle, 1 if mode else 0))
        return self

    def eval(self):
        return self.train(False)

    @property
    def training(self):
        return bool(lib.dlt_module_is_training(self.handle))

    @property
    def kind(self):
        k = lib.dlt_module_kind(self.handle)
        return k.decode() if k else None

    def __repr__(self):
        if self.closed:
            return "<dltrain.nn.%s closed>" % type(self).__name__
        return "<dltrain.nn.%s kind=%s params=%d>" % (type(self).__name__, self.kind,
                                                      self.param_count())

    # ---- state -----------------------------------------------------------------------------
    def num_state(self):
        return int(lib.dlt_module_num_state(self.handle))

    def state_entry(self, i):
        """(name, tensor, is_param) of state entry i, in registration order."""
        name = ctypes.c_char_p()
        t = ctypes.c_void_p()
        isp = ctypes.c_int32()
        check(lib.dlt_module_state_entry(self.handle, int(i), ctypes.byref(name),
                                         ctypes.byref(t), ctypes.byref(isp)))
        return name.value.decode(), Tensor._borrow(t.value, self, self.ctx), bool(isp.value)

    def state_dict(self):
        """OrderedDict name -> Tensor (borrowed) of parameters and buffers, PyTorch's names."""
        d = collections.OrderedDict()
        for i in range(self.num_state()):
            name, t, _ = self.state_entry(i)
            d[name] = t
        return d

    def named_parameters(self):
        for i in range(self.num_state()):
            name, t, isp = self.state_entry(i)
            if isp:
                yield name, t

    def named_buffers(self):
        for i in range(self.num_state()):
            name, t, isp = self.state_entry(i)
            if not isp:
                yield name, t

    def num_params(self):
        return int(lib.dlt_module_num_params(self.handle))

    def parameters(self):
        """The parameter tensors (borrowed) in registration order."""
        n = self.num_params()
        arr = (ctypes.c_void_p * max(n, 1))()
        total = ctypes.c_int32()
        check(lib.dlt_module_params(self.handle, arr, n, ctypes.byref(total)))
        return [Tensor._borrow(arr[i], self, self.ctx) for i in range(min(n, total.value))]

    def buffers(self):
        return [t for _, t in self.named_buffers()]

    def param_count(self):
        """Total number of parameter elements."""
        return int(lib.dlt_module_param_count(self.handle))

    def find(self, name):
        """The state tensor called name (borrowed)."""
        out = ctypes.c_void_p()
        check(lib.dlt_module_find(self.handle, enc(name), ctypes.byref(out)))
        return Tensor._borrow(out.value, self, self.ctx)

    def __getattr__(self, name):
        # model.weight, model.bias, model.running_mean ... for single layers
        if name.startswith("_") or name in ("ctx",):
            raise AttributeError(name)
        try:
            return self.find(name)
        except Exception:
            raise AttributeError("%s has no attribute or state entry %r"
                                 % (type(self).__name__, name)) from None

    def set_format(self, format):
        """Converts the 4-D parameters to a memory format ("channels_last" for the CUDA
        tensor-core path). Fetch parameters again afterwards."""
        check(lib.dlt_module_set_format(self.handle, _dt.memory_format(format)))
        return self

    def to(self, memory_format=None):
        return self if memory_format is None else self.set_format(memory_format)

    def zero_grad(self, set_to_none=True):
        from .autograd import zero_grad
        zero_grad(self.parameters(), set_to_none)

    # ---- checkpoints -------------------------------------------------------------------------
    def save(self, path):
        """Saves every state entry as a safetensors file (atomic)."""
        check(lib.dlt_module_save(self.handle, enc(path)))

    def load(self, path):
        """Loads every state entry from a safetensors file (all or nothing)."""
        check(lib.dlt_module_load(self.handle, enc(path)))
        return self

    load_state = load
    save_state = save


def _ctx(ctx):
    return resolve(ctx)


class Conv2d(Module):
    """Conv2d(in, out, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, *, ctx=None):
        ctx = _ctx(ctx)
        if isinstance(kernel_size, numbers.Integral):
            kh = kw = int(kernel_size)
        else:
            kh, kw = (int(k) for k in kernel_size)
        Module.__init__(self, _create(lib.dlt_conv2d_create, ctx, int(in_channels),
                                      int(out_channels), kh, kw, int(stride), int(padding),
                                      int(dilation), int(groups), 1 if bias else 0), ctx)


class BatchNorm2d(Module):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, *, ctx=None):
        ctx = _ctx(ctx)
        Module.__init__(self, _create(lib.dlt_batchnorm2d_create, ctx, int(num_features),
                                      float(eps), float(momentum)), ctx)


class Linear(Module):
    def __init__(self, in_features, out_features, bias=True, *, ctx=None):
        ctx = _ctx(ctx)
        Module.__init__(self, _create(lib.dlt_linear_create, ctx, int(in_features),
                                      int(out_features), 1 if bias else 0), ctx)


class ReLU(Module):
    def __init__(self, *, ctx=None):
        ctx = _ctx(ctx)
        Module.__init__(self, _create(lib.dlt_relu_create, ctx), ctx)


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, *, ctx=None):
        ctx = _ctx(ctx)
        Module.__init__(self, _create(lib.dlt_max_pool2d_create, ctx, int(kernel_size),
                                      int(kernel_size if stride is None else stride),
                                      int(padding)), ctx)


class GlobalAvgPool2d(Module):
    """AdaptiveAvgPool2d((1, 1))."""

    def __init__(self, *, ctx=None):
        ctx = _ctx(ctx)
        Module.__init__(self, _create(lib.dlt_global_avg_pool2d_create, ctx), ctx)


class AdaptiveAvgPool2d(GlobalAvgPool2d):
    def __init__(self, output_size=(1, 1), *, ctx=None):
        if output_size not in (1, (1, 1), [1, 1]):
            raise NotImplementedError("libdltrain has AdaptiveAvgPool2d((1, 1)) only")
        GlobalAvgPool2d.__init__(self, ctx=ctx)


class Flatten(Module):
    """Flatten(start_dim=1)."""

    def __init__(self, *, ctx=None):
        ctx = _ctx(ctx)
        Module.__init__(self, _create(lib.dlt_flatten_create, ctx), ctx)


class Sequential(Module):
    """Sequential(*modules): runs its children in order; children are named by index unless
    added with a name (append(module, name))."""

    def __init__(self, *modules, ctx=None):
        if ctx is None and modules and isinstance(modules[0], Module):
            ctx = modules[0].ctx
        ctx = _ctx(ctx)
        Module.__init__(self, _create(lib.dlt_sequential_create, ctx), ctx)
        self._children_py = []
        for m in modules:
            self.append(m)

    def append(self, module, name=None):
        """Appends module (which the container owns from now on, also when this fails)."""
        h = arg(module, Module, "module")
        try:
            check(lib.dlt_sequential_append(self.handle, enc(name), h))
        finally:
            if module is not None:
                module._disown(self)
        self._children_py.append(module)
        return self

    def add_module(self, name, module):
        return self.append(module, name)

    def __getitem__(self, i):
        return self._children_py[i]

    def __len__(self):
        return len(self._children_py)

    def __iter__(self):
        return iter(self._children_py)


class BasicBlock(Module):
    def __init__(self, inplanes, planes, stride=1, *, ctx=None):
        ctx = _ctx(ctx)
        Module.__init__(self, _create(lib.dlt_basic_block_create, ctx, int(inplanes),
                                      int(planes), int(stride)), ctx)


class Bottleneck(Module):
    def __init__(self, inplanes, planes, stride=1, *, ctx=None):
        ctx = _ctx(ctx)
        Module.__init__(self, _create(lib.dlt_bottleneck_create, ctx, int(inplanes),
                                      int(planes), int(stride)), ctx)


class ResNet(Module):
    """torchvision resnet{18,34,50,101,152}(num_classes)."""

    def __init__(self, depth=50, num_classes=1000, *, ctx=None):
        ctx = _ctx(ctx)
        Module.__init__(self, _create(lib.dlt_resnet_create, ctx, int(depth), int(num_classes)),
                        ctx)
        self.depth = depth


def resnet18(num_classes=1000, *, ctx=None):
    return ResNet(18, num_classes, ctx=ctx)


def resnet34(num_classes=1000, *, ctx=None):
    return ResNet(34, num_classes, ctx=ctx)


def resnet50(num_classes=1000, *, ctx=None):
    """torchvision.models.resnet50(num_classes=...) on ctx (default: the current context)."""
    ctx = _ctx(ctx)
    m = ResNet.__new__(ResNet)
    Module.__init__(m, _create(lib.dlt_resnet50_create, ctx, int(num_classes)), ctx)
    m.depth = 50
    return m


def resnet101(num_classes=1000, *, ctx=None):
    return ResNet(101, num_classes, ctx=ctx)


def resnet152(num_classes=1000, *, ctx=None):
    return ResNet(152, num_classes, ctx=ctx)
