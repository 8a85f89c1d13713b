"""The libdltrain layers (include/dltrain/nn.h) as nn.Module subclasses, the Sequential
container, and torchvision's ResNets.

Each constructor takes PyTorch's arguments plus `device=` / `ctx=` (where the layer lives;
default: the current context) and `dtype=` (float32 only: the library's parameters are
float32, autocast gives half-precision compute). The repr of each is PyTorch's, so
print(model) reads as it does in PyTorch (a ResNet prints torchvision's whole tree).
"""

import collections
import ctypes
import numbers
import operator

from . import dtypes as _dt
from . import errors
from ._handle import arg
from ._lib import lib, check, enc
from ._module import Module, _is_c, _repr_tree
from .context import device_context


def _ctx(ctx, device, dtype):
    if dtype is not None and _dt.dtype(dtype) != _dt.float32:
        raise errors.NotSupported(errors.ERR_NOT_SUPPORTED,
                                  "libdltrain layers keep float32 parameters (dtype=%r); use "
                                  "dltrain.autocast for half-precision compute" % (dtype,))
    return device_context(device, ctx)


def _int(v, name):
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError("%s must be an int, got %s" % (name, type(v).__name__)) from None


class _Native(Module):
    """A layer made by one C create function."""

    def _make(self, fn, ctx, *cargs):
        Module.__init__(self)
        out = ctypes.c_void_p()
        check(fn(ctx.handle, *cargs, ctypes.byref(out)))
        self._attach(out.value, ctx, (fn, cargs))


class Conv2d(_Native):
    """Conv2d(in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
    groups=1, bias=True): square kernels may be given as an int or a pair; stride, padding
    and dilation are the same in both directions."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, *, ctx=None, device=None, dtype=None):
        c = _ctx(ctx, device, dtype)
        if isinstance(kernel_size, numbers.Integral):
            kh = kw = _int(kernel_size, "kernel_size")
        else:
            kh, kw = (_int(k, "kernel_size") for k in kernel_size)
        self._make(lib.dlt_conv2d_create, c, _int(in_channels, "in_channels"),
                   _int(out_channels, "out_channels"), kh, kw, _int(stride, "stride"),
                   _int(padding, "padding"), _int(dilation, "dilation"), _int(groups, "groups"),
                   1 if bias else 0)

    def extra_repr(self):
        return _conv_repr(*self._ctor[1])


def _conv_repr(cin, cout, kh, kw, stride, padding, dilation, groups, bias):
    s = "%d, %d, kernel_size=(%d, %d), stride=(%d, %d)" % (cin, cout, kh, kw, stride, stride)
    if padding:
        s += ", padding=(%d, %d)" % (padding, padding)
    if dilation != 1:
        s += ", dilation=(%d, %d)" % (dilation, dilation)
    if groups != 1:
        s += ", groups=%d" % groups
    if not bias:
        s += ", bias=False"
    return s


class BatchNorm2d(_Native):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, *, ctx=None, device=None,
                 dtype=None):
        c = _ctx(ctx, device, dtype)
        self._make(lib.dlt_batchnorm2d_create, c, _int(num_features, "num_features"),
                   float(eps), float(momentum))

    def extra_repr(self):
        return _bn_repr(*self._ctor[1])


def _bn_repr(n, eps=1e-5, momentum=0.1):
    return "%d, eps=%s, momentum=%s, affine=True, track_running_stats=True" % (n, eps, momentum)


class Linear(_Native):
    def __init__(self, in_features, out_features, bias=True, *, ctx=None, device=None,
                 dtype=None):
        c = _ctx(ctx, device, dtype)
        self._make(lib.dlt_linear_create, c, _int(in_features, "in_features"),
                   _int(out_features, "out_features"), 1 if bias else 0)

    def extra_repr(self):
        i, o, b = self._ctor[1]
        return "in_features=%d, out_features=%d, bias=%s" % (i, o, bool(b))


class ReLU(_Native):
    def __init__(self, inplace=False, *, ctx=None, device=None, dtype=None):
        self._make(lib.dlt_relu_create, _ctx(ctx, device, dtype))


class MaxPool2d(_Native):
    def __init__(self, kernel_size, stride=None, padding=0, *, ctx=None, device=None,
                 dtype=None):
        k = _int(kernel_size, "kernel_size")
        self._make(lib.dlt_max_pool2d_create, _ctx(ctx, device, dtype), k,
                   k if stride is None else _int(stride, "stride"), _int(padding, "padding"))

    def extra_repr(self):
        k, s, p = self._ctor[1]
        return "kernel_size=%d, stride=%d, padding=%d, dilation=1, ceil_mode=False" % (k, s, p)


class GlobalAvgPool2d(_Native):
    """AdaptiveAvgPool2d((1, 1))."""

    def __init__(self, *, ctx=None, device=None, dtype=None):
        self._make(lib.dlt_global_avg_pool2d_create, _ctx(ctx, device, dtype))


class AdaptiveAvgPool2d(GlobalAvgPool2d):
    def __init__(self, output_size=(1, 1), *, ctx=None, device=None, dtype=None):
        if output_size not in (1, (1, 1), [1, 1]):
            raise NotImplementedError("libdltrain has AdaptiveAvgPool2d((1, 1)) only")
        GlobalAvgPool2d.__init__(self, ctx=ctx, device=device, dtype=dtype)
        self.__dict__["_output_size"] = output_size

    def extra_repr(self):
        return "output_size=%s" % (tuple(self._output_size) if not isinstance(
            self._output_size, int) else self._output_size,)


class Flatten(_Native):
    """Flatten(start_dim=1, end_dim=-1): the library's flatten module keeps the batch."""

    def __init__(self, start_dim=1, end_dim=-1, *, ctx=None, device=None, dtype=None):
        if (start_dim, end_dim) != (1, -1):
            raise NotImplementedError("libdltrain's Flatten module is Flatten(1, -1); use "
                                      "dltrain.functional.flatten for other dimensions")
        self._make(lib.dlt_flatten_create, _ctx(ctx, device, dtype))

    def extra_repr(self):
        return "start_dim=1, end_dim=-1"


class Sequential(Module):
    """Sequential(*modules) or Sequential(OrderedDict(name=module)): runs its children in
    order. When every child is a libdltrain module the container is the library's
    (dlt_sequential: it owns the children from then on, and C code such as
    evaluate_accuracy or module.save takes it); with any Python module among them it is a
    Python container. A libdltrain Sequential takes only libdltrain modules in append()."""

    def __init__(self, *modules, ctx=None, device=None):
        Module.__init__(self)
        if len(modules) == 1 and isinstance(modules[0], collections.OrderedDict):
            items = list(modules[0].items())
        else:
            items = [(None, m) for m in modules]
        for i, (_, m) in enumerate(items):
            if not isinstance(m, Module):
                raise TypeError("Sequential: argument %d is a %s, not a dltrain.nn.Module"
                                % (i, type(m).__name__))
        if all(_is_c(m) for _, m in items):
            if ctx is None and device is None and items:
                ctx = items[0][1].ctx
            c = device_context(device, ctx)
            out = ctypes.c_void_p()
            check(lib.dlt_sequential_create(c.handle, ctypes.byref(out)))
            self._attach(out.value, c, (lib.dlt_sequential_create, ()))
        for name, m in items:
            self.append(m, name)

    def append(self, module, name=None):
        """Appends module (named by its index unless name is given). A libdltrain
        Sequential owns the module from then on, also when this fails."""
        key = str(len(self._modules)) if name is None else name
        if not _is_c(self):
            if not isinstance(module, Module):
                raise TypeError("%s is not a dltrain.nn.Module" % type(module).__name__)
            self._check_name(key, "module")
            self._modules[key] = module
            return self
        if isinstance(module, Module) and not _is_c(module):
            raise TypeError("a libdltrain Sequential holds libdltrain modules only; make the "
                            "Sequential with the Python module in it (Sequential(...) is then "
                            "a Python container)")
        h = arg(module, Module, "module")
        try:
            check(lib.dlt_sequential_append(self.handle, enc(name), h))
        finally:
            if module is not None:
                self._h._adopt(module._h)
        self._modules[key] = module
        return self

    def add_module(self, name, module):
        return self.append(module, name)

    def forward(self, x):
        if _is_c(self):
            return Module.forward(self, x)
        for m in self._modules.values():
            x = m(x)
        return x

    def _c_clone(self, ctx, swaps):
        h = Module._c_clone(self, ctx, swaps)
        for key, m in self._modules.items():
            ch = m._c_clone(ctx, swaps)
            try:
                check(lib.dlt_sequential_append(h.handle, enc(key), ch.handle))
            finally:
                h._adopt(ch)
        return h

    def __getitem__(self, i):
        mods = list(self._modules.values())
        if isinstance(i, slice):
            if _is_c(self):
                raise TypeError("a libdltrain Sequential owns its children: slicing it would "
                                "share them; index single children instead")
            keys = list(self._modules)[i]
            return Sequential(collections.OrderedDict((k, self._modules[k]) for k in keys))
        return mods[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(list(self._modules.values()))


# ---- residual blocks and ResNets (torchvision's structure, built by the library) ------------
_LAYERS = {18: ("basic", (2, 2, 2, 2)), 34: ("basic", (3, 4, 6, 3)),
           50: ("bottleneck", (3, 4, 6, 3)), 101: ("bottleneck", (3, 4, 23, 3)),
           152: ("bottleneck", (3, 8, 36, 3))}
_RELU = "ReLU(inplace=True)"


def _bn(n):
    return "BatchNorm2d(%s)" % _bn_repr(n)


def _conv(cin, cout, k, stride):
    return "Conv2d(%s)" % _conv_repr(cin, cout, k, k, stride, 1 if k == 3 else 0, 1, 1, False)


def _block_children(kind, inplanes, planes, stride):
    exp = 4 if kind == "bottleneck" else 1
    if kind == "bottleneck":
        ch = [("conv1", _conv(inplanes, planes, 1, 1)), ("bn1", _bn(planes)),
              ("conv2", _conv(planes, planes, 3, stride)), ("bn2", _bn(planes)),
              ("conv3", _conv(planes, planes * 4, 1, 1)), ("bn3", _bn(planes * 4)),
              ("relu", _RELU)]
    else:
        ch = [("conv1", _conv(inplanes, planes, 3, stride)), ("bn1", _bn(planes)),
              ("relu", _RELU), ("conv2", _conv(planes, planes, 3, 1)), ("bn2", _bn(planes))]
    if stride != 1 or inplanes != planes * exp:
        ch.append(("downsample", _repr_tree("Sequential", "", [
            ("0", _conv(inplanes, planes * exp, 1, stride)), ("1", _bn(planes * exp))])))
    return ch


def _block_repr(kind, inplanes, planes, stride):
    return _repr_tree("Bottleneck" if kind == "bottleneck" else "BasicBlock", "",
                      _block_children(kind, inplanes, planes, stride))


class _Described(_Native):
    """A libdltrain composite whose children are not separate objects: its repr is
    torchvision's tree, described from the constructor's arguments."""

    def _repr_children(self):
        return []

    def __repr__(self):
        if self.closed:
            return "<dltrain.nn.%s closed>" % type(self).__name__
        return _repr_tree(self._get_name(), "", self._described_children())


class BasicBlock(_Described):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, *, ctx=None, device=None, dtype=None):
        self._make(lib.dlt_basic_block_create, _ctx(ctx, device, dtype),
                   _int(inplanes, "inplanes"), _int(planes, "planes"), _int(stride, "stride"))

    def _described_children(self):
        return _block_children("basic", *self._ctor[1])


class Bottleneck(_Described):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, *, ctx=None, device=None, dtype=None):
        self._make(lib.dlt_bottleneck_create, _ctx(ctx, device, dtype),
                   _int(inplanes, "inplanes"), _int(planes, "planes"), _int(stride, "stride"))

    def _described_children(self):
        return _block_children("bottleneck", *self._ctor[1])


class ResNet(_Described):
    """torchvision resnet{18,34,50,101,152}(num_classes)."""

    def __init__(self, depth=50, num_classes=1000, *, ctx=None, device=None, dtype=None):
        c = _ctx(ctx, device, dtype)
        depth = _int(depth, "depth")
        num_classes = _int(num_classes, "num_classes")
        if num_classes > 2 ** 63 - 1 or num_classes < -2 ** 63:
            raise OverflowError("num_classes = %d does not fit in int64_t" % num_classes)
        if depth == 50:
            self._make(lib.dlt_resnet50_create, c, num_classes)
        else:
            self._make(lib.dlt_resnet_create, c, depth, num_classes)
        self.__dict__["depth"] = depth
        self.__dict__["num_classes"] = num_classes

    def _described_children(self):
        return _resnet_children(self.depth, self.num_classes)


def _resnet_children(depth, num_classes):
    kind, counts = _LAYERS.get(depth, ("bottleneck", ()))
    exp = 4 if kind == "bottleneck" else 1
    ch = [("conv1", "Conv2d(3, 64, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), "
                    "bias=False)"),
          ("bn1", _bn(64)), ("relu", _RELU),
          ("maxpool", "MaxPool2d(kernel_size=3, stride=2, padding=1, dilation=1, "
                      "ceil_mode=False)")]
    inplanes = 64
    for li, (planes, n) in enumerate(zip((64, 128, 256, 512), counts)):
        blocks = []
        for b in range(n):
            stride = 2 if (b == 0 and li > 0) else 1
            blocks.append((str(b), _block_repr(kind, inplanes, planes, stride)))
            inplanes = planes * exp
        ch.append(("layer%d" % (li + 1), _repr_tree("Sequential", "", blocks)))
    ch.append(("avgpool", "AdaptiveAvgPool2d(output_size=(1, 1))"))
    ch.append(("fc", "Linear(in_features=%d, out_features=%d, bias=True)"
               % (512 * exp, num_classes)))
    return ch


def resnet_repr(depth, num_classes):
    """repr(torchvision.models.resnet<depth>(num_classes=...)), which a ResNet prints."""
    return _repr_tree("ResNet", "", _resnet_children(depth, num_classes))


def resnet18(num_classes=1000, *, ctx=None, device=None):
    return ResNet(18, num_classes, ctx=ctx, device=device)


def resnet34(num_classes=1000, *, ctx=None, device=None):
    return ResNet(34, num_classes, ctx=ctx, device=device)


def resnet50(num_classes=1000, *, ctx=None, device=None):
    """torchvision.models.resnet50(num_classes=...) on ctx (default: the current context)."""
    return ResNet(50, num_classes, ctx=ctx, device=device)


def resnet101(num_classes=1000, *, ctx=None, device=None):
    return ResNet(101, num_classes, ctx=ctx, device=device)


def resnet152(num_classes=1000, *, ctx=None, device=None):
    return ResNet(152, num_classes, ctx=ctx, device=device)
