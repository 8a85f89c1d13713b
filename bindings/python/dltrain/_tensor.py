"""Tensors (dlt_tensor): the Tensor class. The factories are in _factories.py, indexing in
_index.py, printing in _format.py.

Host data goes in and out in the tensor's memory order (NCHW, or NHWC for channels-last),
through any Python buffer (bytes, bytearray, array.array, memoryview) or a numpy array when
numpy is installed. Copies are avoided where the buffer allows it: from_numpy and
from_buffer hand the buffer's own address to dlt_tensor_from_host (the library copies once,
into the tensor), numpy() and copy_to() let the library write straight into the array or
buffer.

Ownership: every Tensor owns one reference to its dlt_tensor (released when the object is
collected or closed). Tensors that belong to a library object (a module's parameters and
buffers, a leaf's gradient, an optimizer's parameters and momentum buffers, a scaler's
scale) are taken with dlt_tensor_retain, so they stay valid after their owner is closed or
replaces them. Loader batches are the exception (the loader reuses their memory): they
are borrowed and invalidated at the next batch.
"""

import ctypes
import numbers
import operator

from . import dtypes as _dt
from ._guard import INT64_MAX, INT64_MIN, guard_of, handle_int
from ._handle import Handle, arg
from ._lib import lib, check
from .context import Context, resolve, device_context, DEVICE_CUDA, _parse_device

MAX_DIMS = 8

try:  # numpy is optional
    import numpy as _np
except ImportError:  # pragma: no cover - depends on the interpreter
    _np = None


def have_numpy():
    return _np is not None


def _dim_value(s, i, what="shape"):
    if isinstance(s, _dt.DType):
        raise TypeError("%s[%d] is the dtype %r: dtype and memory format are keyword "
                        "arguments (e.g. zeros((2, 3), dtype=dltrain.float16))" % (what, i, s))
    try:
        v = operator.index(s)
    except TypeError:
        raise TypeError("%s must be ints, got %s at position %d"
                        % (what, type(s).__name__, i)) from None
    if not INT64_MIN <= v <= INT64_MAX:
        raise OverflowError("%s[%d] = %d does not fit in int64_t" % (what, i, v))
    return v


def _shape_tuple(shape, what="shape"):
    """A tuple of int64-range ints from an int or a sequence of ints (TypeError for floats,
    strings and dtypes; OverflowError beyond int64)."""
    if shape is None:
        raise TypeError("%s must be an int or a sequence of ints, not None" % what)
    if isinstance(shape, (str, bytes)):
        raise TypeError("%s must be an int or a sequence of ints, not %s"
                        % (what, type(shape).__name__))
    if isinstance(shape, numbers.Integral) or (hasattr(shape, "__index__") and
                                               not hasattr(shape, "__len__")):
        return (_dim_value(shape, 0, what),)
    try:
        items = tuple(shape)
    except TypeError:
        raise TypeError("%s must be an int or a sequence of ints, not %s"
                        % (what, type(shape).__name__)) from None
    return tuple(_dim_value(s, i, what) for i, s in enumerate(items))


def _shape_arg(shape, what="shape"):
    shape = _shape_tuple(shape, what)
    arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    return arr, len(shape), shape


def _new(fn, ctx, *args):
    out = ctypes.c_void_p()
    check(fn(*args, ctypes.byref(out)))
    return Tensor._wrap(out.value, ctx)


class _Count(int):
    """numel: an int that can also be called (t.numel as before, t.numel() as PyTorch)."""

    def __call__(self):
        return int(self)


def _is_scalar(v):
    return isinstance(v, numbers.Number) and not isinstance(v, (complex, Tensor))


class Tensor(Handle):
    """An n-dimensional tensor on a context's device."""

    __slots__ = ("_ctx",)
    _destroy = staticmethod(lib.dlt_tensor_release)
    _what = "tensor"
    __array_priority__ = 10  # numpy: let our operators win

    def __init__(self, *args, **kwargs):
        raise TypeError("make tensors with dltrain.tensor/zeros/empty/from_numpy/... "
                        "(Tensor() is not a constructor)")

    @classmethod
    def _wrap(cls, ptr, ctx):
        """An owned tensor (a new reference the caller got from the library)."""
        t = object.__new__(cls)
        Handle.__init__(t, ptr, (ctx,), owned=True)
        t._ctx = ctx
        return t

    @classmethod
    def _retain(cls, ptr, ctx):
        """A tensor that belongs to a library object (a parameter, a gradient, a buffer):
        takes a reference of its own (dlt_tensor_retain), so it outlives its owner."""
        if not ptr:
            return None
        lib.dlt_tensor_retain(handle_int(ptr, guard_of(ctx)))
        return cls._wrap(ptr, ctx)

    @classmethod
    def _borrow(cls, ptr, owner, ctx):
        """A borrowed tensor: owner keeps it valid; Python never releases it. Only for
        memory the owner reuses (loader batches), which the owner invalidates itself."""
        if not ptr:
            return None
        t = object.__new__(cls)
        Handle.__init__(t, ptr, (owner, ctx), owned=False)
        t._ctx = ctx
        return t

    # ---- properties ----------------------------------------------------------------------
    @property
    def ctx(self):
        """The Context the tensor belongs to."""
        return self._ctx

    @property
    def ndim(self):
        return int(lib.dlt_tensor_ndim(self.handle))

    def dim(self):
        return self.ndim

    ndimension = dim

    @property
    def shape(self):
        buf = (ctypes.c_int64 * MAX_DIMS)()
        n = lib.dlt_tensor_shape(self.handle, buf, MAX_DIMS)
        return tuple(int(buf[i]) for i in range(n))

    def size(self, dim=None):
        s = self.shape
        if dim is None:
            return s
        d = operator.index(dim)
        if not -len(s) <= d < len(s):
            raise IndexError("dimension out of range (expected to be in range of [%d, %d], "
                             "but got %d)" % (-len(s), len(s) - 1, d))
        return s[d]

    @property
    def numel(self):
        """Number of elements (t.numel, or t.numel() as in PyTorch)."""
        return _Count(lib.dlt_tensor_numel(self.handle))

    def nelement(self):
        return int(self.numel)

    @property
    def nbytes(self):
        return int(lib.dlt_tensor_nbytes(self.handle))

    def element_size(self):
        return self.dtype.itemsize

    @property
    def dtype(self):
        return _dt.dtype(int(lib.dlt_tensor_dtype(self.handle)))

    def is_floating_point(self):
        return self.dtype.is_floating_point

    @property
    def format(self):
        """The memory format: dltrain.contiguous_format (0) or dltrain.channels_last (1)."""
        return _dt.memory_format(int(lib.dlt_tensor_format(self.handle)))

    memory_format = format

    def is_contiguous(self, memory_format=_dt.CONTIGUOUS):
        return self.format == _dt.memory_format(memory_format)

    @property
    def is_channels_last(self):
        return self.format == _dt.CHANNELS_LAST

    @property
    def device_type(self):
        return int(lib.dlt_tensor_device_type(self.handle))

    @property
    def is_cuda(self):
        return self.device_type == DEVICE_CUDA

    @property
    def is_cpu(self):
        return not self.is_cuda

    @property
    def device(self):
        """"cpu" or "cuda:N"."""
        return self._ctx.device

    def __len__(self):
        s = self.shape
        if not s:
            raise TypeError("len() of a 0-d tensor")
        return s[0]

    def __iter__(self):
        n = self.shape
        if not n:
            raise TypeError("iteration over a 0-d tensor")
        for i in range(n[0]):
            yield self[i]

    def __repr__(self):
        if self._ptr is None or self._closing:
            return "<dltrain.Tensor released>"
        from ._format import tensor_repr
        return tensor_repr(self)

    def __format__(self, spec):
        if spec and self._ptr is not None and self.numel == 1:
            return format(self.item(), spec)
        return format(repr(self), spec)

    def __bool__(self):
        if self.numel != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.item())

    # ---- host transfers ------------------------------------------------------------------
    def tobytes(self):
        """The tensor's bytes in memory order (synchronises)."""
        n = self.nbytes
        if n == 0:
            check(lib.dlt_tensor_copy_to_host(self.handle, None, 0))
            return b""
        buf = ctypes.create_string_buffer(n)
        check(lib.dlt_tensor_copy_to_host(self.handle, buf, n))
        return buf.raw

    def copy_to(self, buffer):
        """Copies the tensor (memory order) into a writable buffer of exactly nbytes, without
        an intermediate copy. Synchronises. Returns buffer."""
        mv = memoryview(buffer)
        if mv.readonly:
            raise TypeError("copy_to needs a writable buffer")
        if not mv.c_contiguous:
            raise ValueError("copy_to needs a C-contiguous buffer")
        n = mv.nbytes
        arr = (ctypes.c_char * n).from_buffer(mv.cast("B")) if n else None
        check(lib.dlt_tensor_copy_to_host(self.handle, ctypes.addressof(arr) if n else None, n))
        del arr
        return buffer

    def copy_from(self, buffer):
        """Copies exactly nbytes (memory order) from a buffer into the tensor."""
        with _HostView(buffer) as (ptr, n):
            check(lib.dlt_tensor_copy_from_host(self.handle, ptr, n))
        return self

    def numpy(self):
        """A new numpy array with the tensor's values in logical (NCHW) order (a copy: the
        tensor's memory may be on a device).

        The library copies straight into the array's buffer. Channels-last tensors give a
        transposed view of an NHWC array; bf16 (which numpy lacks) is widened to float32.
        """
        if _np is None:
            raise ImportError("numpy is not installed")
        dt = self.dtype
        shape = self.shape
        cl = self.format == _dt.CHANNELS_LAST
        mem_shape = (shape[0], shape[2], shape[3], shape[1]) if cl else shape
        npdt = _np.uint16 if dt == _dt.bfloat16 else _np.dtype(dt.numpy_name)
        a = _np.empty(mem_shape, dtype=npdt)
        n = self.nbytes
        check(lib.dlt_tensor_copy_to_host(self.handle, a.ctypes.data if n else None, n))
        if dt == _dt.bfloat16:
            a = (a.astype(_np.uint32) << 16).view(_np.float32)
        if cl:
            a = a.transpose(0, 3, 1, 2)
        return a

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype, copy=False)

    def tolist(self):
        """Nested lists of Python numbers in logical order (a Python number for a 0-d
        tensor). Synchronises."""
        t = self.to_format(_dt.CONTIGUOUS) if self.format != _dt.CONTIGUOUS else self
        flat = _dt.unpack(t.dtype, t.tobytes())
        shape = self.shape
        if not shape:
            return flat[0]

        def nest(off, d):
            if d == len(shape) - 1:
                return flat[off:off + shape[d]]
            step = 1
            for s in shape[d + 1:]:
                step *= s
            return [nest(off + i * step, d + 1) for i in range(shape[d])]
        return nest(0, 0)

    def item(self):
        """The single element as a Python number (float or int; exact for int64).
        Synchronises."""
        if not self.dtype.is_floating_point and self.numel == 1:
            return _dt.unpack(self.dtype, self.tobytes())[0]
        v = ctypes.c_double()
        check(lib.dlt_tensor_item(self.handle, ctypes.byref(v)))
        return v.value if self.dtype.is_floating_point else int(v.value)

    def get(self, index):
        """Element `index` of the logical row-major order (synchronises)."""
        v = ctypes.c_double()
        check(lib.dlt_tensor_get(self.handle, operator.index(index), ctypes.byref(v)))
        return v.value if self.dtype.is_floating_point else int(v.value)

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self.dtype.is_floating_point or self.numel != 1:
            raise TypeError("only integer tensors of a single element can be converted to an "
                            "index")
        return int(self.item())

    # ---- in-place fills and copies ----------------------------------------------------
    def fill_(self, value):
        check(lib.dlt_tensor_fill(self.handle, float(value)))
        return self

    def zero_(self):
        return self.fill_(0.0)

    def uniform_(self, low=0.0, high=1.0):
        check(lib.dlt_tensor_rand_uniform(self.handle, float(low), float(high)))
        return self

    def normal_(self, mean=0.0, std=1.0):
        check(lib.dlt_tensor_rand_normal(self.handle, float(mean), float(std)))
        return self

    def copy_(self, src):
        """Copies src (same shape; any format or context; another dtype is converted
        first) into this tensor. Not recorded for autograd."""
        if isinstance(src, Tensor) and src.dtype != self.dtype:
            src = src.astype(self.dtype)
        check(lib.dlt_tensor_copy(self.handle, arg(src, Tensor, "src")))
        return self

    # ---- conversions ---------------------------------------------------------------------
    def to_ctx(self, ctx):
        """A copy on another context (possibly another device)."""
        ctx = resolve(ctx)
        return _new(lib.dlt_tensor_to_ctx, ctx, self.handle, ctx.handle)

    def astype(self, dtype):
        """A converted copy that is NOT recorded on the tape (dlt_tensor_cast)."""
        return _new(lib.dlt_tensor_cast, self._ctx, self.handle, _dt.dtype(dtype))

    def to_format(self, format):
        """A copy in another memory format (contiguous_format or channels_last)."""
        return _new(lib.dlt_tensor_to_format, self._ctx, self.handle, _dt.memory_format(format))

    def contiguous(self, memory_format=_dt.CONTIGUOUS):
        fmt = _dt.memory_format(memory_format)
        return self if self.format == fmt else self.to_format(fmt)

    def to(self, *args, **kwargs):
        """PyTorch's Tensor.to:
            to(dtype, non_blocking=False, copy=False, memory_format=preserve_format)
            to(device=None, dtype=None, non_blocking=False, copy=False, memory_format=...)
            to(other, non_blocking=False, copy=False)   # other's device and dtype
        device: "cpu", "cuda", "cuda:N", an int (a CUDA index) or a Context. The same device
        keeps the tensor's context; another device means the current context when it is on
        that device, else that device's default context. Returns self when nothing changes
        (unless copy=True). The dtype conversion is differentiable (dlt_cast); the device
        copy and the memory-format conversion are not recorded."""
        device, dtype, fmt, copy = parse_to_args(args, kwargs, allow_copy=True)
        t = self
        if device is not None:
            target = _target_context(self._ctx, device)
            if target is not self._ctx:
                t = t.to_ctx(target)
        if dtype is not None and _dt.dtype(dtype) != t.dtype:
            from .ops import cast
            t = cast(t, dtype)
        if fmt is not None and fmt != _dt.preserve_format and fmt != t.format:
            t = t.to_format(fmt)
        if copy and t is self:
            t = self.astype(self.dtype)
        return t

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to("cuda" if device is None else
                       (device if isinstance(device, (str, Context)) else "cuda:%d" % device))

    def type_as(self, other):
        return self.to(other.dtype)

    def float(self):
        return self.to(_dt.float32)

    def half(self):
        return self.to(_dt.float16)

    def bfloat16(self):
        return self.to(_dt.bfloat16)

    def int(self):
        return self.to(_dt.int32)

    def long(self):
        return self.to(_dt.int64)

    # ---- autograd ----------------------------------------------------------------------
    @property
    def requires_grad(self):
        return bool(lib.dlt_tensor_requires_grad(self.handle))

    @requires_grad.setter
    def requires_grad(self, on):
        check(lib.dlt_tensor_set_requires_grad(self.handle, 1 if on else 0))

    def requires_grad_(self, on=True):
        self.requires_grad = on
        return self

    @property
    def grad(self):
        """The accumulated gradient of a leaf, or None. The returned Tensor holds its own
        reference: it stays valid when the leaf is gone. zero_grad(set_to_none=True) lets the
        leaf's buffer go (PyTorch's grad = None): a Tensor kept from before keeps its values
        and the next backward writes a new gradient (kept while a captured graph exists)."""
        return Tensor._retain(lib.dlt_tensor_grad(self.handle), self._ctx)

    def backward(self, gradient=None):
        from .autograd import backward
        backward(self, gradient)

    def detach(self):
        """A tensor sharing this one's memory, without history."""
        return _new(lib.dlt_tensor_detach, self._ctx, self.handle)

    # ---- ops as methods --------------------------------------------------------------------
    def relu(self):
        from .ops import relu
        return relu(self)

    def sum(self):
        from .ops import sum
        return sum(self)

    def mean(self):
        from .ops import mean
        return mean(self)

    def reshape(self, *shape):
        from .ops import reshape
        if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
            shape = shape[0]
        return reshape(self, shape)

    view = reshape

    def flatten(self, start_dim=0, end_dim=-1):
        from .ops import flatten
        return flatten(self, start_dim, end_dim)

    def unsqueeze(self, dim):
        s = list(self.shape)
        d = operator.index(dim)
        if not -len(s) - 1 <= d <= len(s):
            raise IndexError("dimension out of range (expected to be in range of [%d, %d], "
                             "but got %d)" % (-len(s) - 1, len(s), d))
        s.insert(d if d >= 0 else d + len(s) + 1, 1)
        return self.reshape(s)

    def squeeze(self, dim=None):
        s = self.shape
        if dim is None:
            new = [n for n in s if n != 1]
        else:
            d = operator.index(dim)
            if not -max(len(s), 1) <= d < max(len(s), 1):
                raise IndexError("dimension out of range")
            d %= max(len(s), 1)
            new = [n for i, n in enumerate(s) if i != d or n != 1]
        return self if list(new) == list(s) else self.reshape(new)

    def matmul(self, other):
        from ._ops_ext import matmul
        return matmul(self, other)

    def add(self, other, alpha=1):
        return self + (other * alpha if alpha != 1 else other)

    def sub(self, other, alpha=1):
        return self - (other * alpha if alpha != 1 else other)

    def mul(self, other):
        return self * other

    def div(self, other):
        return self / other

    def neg(self):
        return -self

    def narrow(self, dim, start, length):
        from ._ops_ext import narrow
        return narrow(self, dim, start, length)

    def transpose(self, dim0, dim1):
        from ._ops_ext import transpose
        return transpose(self, dim0, dim1)

    def permute(self, *dims):
        from ._ops_ext import permute
        if len(dims) == 1 and not isinstance(dims[0], numbers.Integral):
            dims = dims[0]
        return permute(self, dims)

    def t(self):
        if self.ndim > 2:
            raise ValueError("t() expects a tensor with <= 2 dimensions, but self is %dD"
                             % self.ndim)
        return self if self.ndim < 2 else self.transpose(0, 1)

    @property
    def T(self):
        n = self.ndim
        if n < 2:
            return self
        return self.transpose(0, 1) if n == 2 else self.permute(list(range(n - 1, -1, -1)))

    # ---- operators ---------------------------------------------------------------------------
    # PyTorch's rules: tensor (+ - * /) tensor broadcast (dlt_add/sub/mul/div); a Python
    # scalar keeps the tensor's dtype, except that a float scalar with an integer tensor
    # gives float32, and true division of integers gives float32.
    def _scalar_operand(self, s, division=False):
        if isinstance(s, bool):
            s = int(s)
        t = self
        if not t.dtype.is_floating_point and (division or isinstance(s, numbers.Real) and
                                              not isinstance(s, numbers.Integral)):
            t = t.to(_dt.float32)
        return t, s

    def __add__(self, other):
        from . import _ops_ext as ops
        if isinstance(other, Tensor):
            return ops.add(self, other)
        if _is_scalar(other):
            t, s = self._scalar_operand(other)
            return ops.add_scalar(t, s)
        return NotImplemented

    def __radd__(self, other):
        return self.__add__(other)

    def __sub__(self, other):
        from . import _ops_ext as ops
        if isinstance(other, Tensor):
            return ops.sub(self, other)
        if _is_scalar(other):
            t, s = self._scalar_operand(other)
            return ops.add_scalar(t, -s)
        return NotImplemented

    def __rsub__(self, other):
        from . import _ops_ext as ops
        if _is_scalar(other):
            t, s = self._scalar_operand(other)
            return ops.add_scalar(ops.neg(t), s)
        return NotImplemented

    def __mul__(self, other):
        from . import _ops_ext as ops
        if isinstance(other, Tensor):
            return ops.mul(self, other)
        if _is_scalar(other):
            t, s = self._scalar_operand(other)
            return ops.mul_scalar(t, None, s)
        return NotImplemented

    def __rmul__(self, other):
        if _is_scalar(other):
            return self.__mul__(other)
        return NotImplemented

    def __truediv__(self, other):
        from . import _ops_ext as ops
        if isinstance(other, Tensor):
            a = self if self.dtype.is_floating_point or other.dtype.is_floating_point \
                else self.to(_dt.float32)
            return ops.div(a, other)
        if _is_scalar(other):
            t, s = self._scalar_operand(other, division=True)
            return ops.mul_scalar(t, None, 1.0 / s)
        return NotImplemented

    def __rtruediv__(self, other):
        from . import _ops_ext as ops
        if _is_scalar(other):
            t, s = self._scalar_operand(other, division=True)
            return ops.div(ops.scalar_tensor(s, t), t)
        return NotImplemented

    def __matmul__(self, other):
        from . import _ops_ext as ops
        if isinstance(other, Tensor):
            return ops.matmul(self, other)
        return NotImplemented

    def __rmatmul__(self, other):
        return NotImplemented

    def __neg__(self):
        from . import _ops_ext as ops
        return ops.neg(self)

    def __pos__(self):
        return self

    # ---- indexing ------------------------------------------------------------------------
    def __getitem__(self, key):
        """Integers, slices with step 1, None and Ellipsis (as PyTorch). The result is what
        dlt_narrow and dlt_reshape give: a new tensor, recorded for autograd; see
        docs/python.md for when it shares memory."""
        from ._index import getitem
        return getitem(self, key)

    def __setitem__(self, key, value):
        from ._index import setitem
        setitem(self, key, value)


def _target_context(current, device):
    """The context a tensor (or module) on `current` goes to for .to(device)."""
    if isinstance(device, Context):
        return device
    if isinstance(device, int) and not isinstance(device, bool):
        device = "cuda:%d" % device
    key = _parse_device(device, None)
    if (current.device_type, current.device_index) == key:
        return current  # the same device: stay on this context
    return device_context(device)


def parse_to_args(args, kwargs, allow_copy=False):
    """(device, dtype, memory_format, copy) from PyTorch's .to() arguments."""
    kw = dict(kwargs)
    device = kw.pop("device", None)
    dtype = kw.pop("dtype", None)
    fmt = kw.pop("memory_format", None)
    copy = bool(kw.pop("copy", False)) if allow_copy else False
    kw.pop("non_blocking", None)
    if kw:
        raise TypeError("to() got an unexpected keyword argument %r" % next(iter(kw)))
    if len(args) > 2:
        raise TypeError("to() takes at most 2 positional arguments (%d given)" % len(args))
    if args:
        first = args[0]
        rest = args[1:]
        if isinstance(first, Tensor):
            if rest:
                raise TypeError("to(other) takes no second positional argument")
            device, dtype = first.ctx, first.dtype
        elif _dt.is_dtype_like(first):
            if rest:
                raise TypeError("to(dtype) takes no second positional argument")
            dtype = first
        elif _dt.is_memory_format_like(first):
            if rest:
                raise TypeError("to(memory_format) takes no second positional argument")
            fmt = first
        else:
            device = first
            if rest:
                if not _dt.is_dtype_like(rest[0]):
                    raise TypeError("to(device, dtype): %r is not a dtype" % (rest[0],))
                dtype = rest[0]
    if device is not None and not isinstance(device, Context):
        if isinstance(device, bool) or not isinstance(device, (str, int)):
            raise TypeError("to(): expected a device ('cpu', 'cuda', 'cuda:N'), a dtype, a "
                            "memory format, a Context or a Tensor, got %s"
                            % type(device).__name__)
        if isinstance(device, str):
            try:
                _parse_device(device, None)
            except ValueError:
                raise ValueError("to(): %r is neither a device ('cpu', 'cuda', 'cuda:N') nor "
                                 "a dtype nor a memory format" % (device,)) from None
    if dtype is not None:
        dtype = _dt.dtype(dtype)
    if fmt is not None:
        fmt = _dt.memory_format(fmt)
    return device, dtype, fmt, copy


class _HostView:
    """(pointer, nbytes) of a read-only or writable buffer, avoiding copies where it can:
    writable C-contiguous buffers are used in place, bytes are passed as they are, numpy
    arrays by their data pointer; anything else is copied once into bytes."""

    def __init__(self, buffer):
        self._buffer = buffer

    def __enter__(self):
        b = self._buffer
        if _np is not None and isinstance(b, _np.ndarray):
            if not b.flags.c_contiguous:
                b = _np.ascontiguousarray(b)
            self._keep = b
            return (b.ctypes.data if b.nbytes else None), b.nbytes
        if isinstance(b, bytes):
            self._keep = b
            return (ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value if b else None), len(b)
        mv = memoryview(b)
        n = mv.nbytes
        if n == 0:
            self._keep = mv
            return None, 0
        if not mv.readonly and mv.c_contiguous:
            arr = (ctypes.c_char * n).from_buffer(mv.cast("B"))
            self._keep = (mv, arr)
            return ctypes.addressof(arr), n
        data = mv.tobytes()
        self._keep = data
        return ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value, n

    def __exit__(self, *exc):
        self._keep = None
        return False


from ._factories import (empty, zeros, ones, full, rand, randn, tensor, from_buffer,  # noqa: E402
                         from_numpy, empty_like, zeros_like, ones_like, full_like, rand_like,
                         randn_like)
