"""Tensors (dlt_tensor) and their factories.

Host data goes in and out in the tensor's memory order (NCHW, or NHWC for channels-last),
through any Python buffer (bytes, bytearray, array.array, memoryview) or a numpy array when
numpy is installed. Copies are avoided where the buffer allows it: from_numpy and
from_buffer hand the buffer's own address to dlt_tensor_from_host (the library copies once,
into the tensor), numpy() and copy_to() let the library write straight into the array or
buffer.

Ownership: a Tensor made here or returned by an op owns one reference (released when the
object is collected or closed). A borrowed Tensor (a module parameter, a gradient, a loader
batch, a scaler's scale) is owned by the library object it came from: Python keeps that
owner alive and never releases the handle.
"""

import ctypes
import numbers

from . import dtypes as _dt
from ._handle import Handle, arg
from ._lib import lib, check
from .context import Context, resolve, DEVICE_CUDA

MAX_DIMS = 8

try:  # numpy is optional
    import numpy as _np
except ImportError:  # pragma: no cover - depends on the interpreter
    _np = None


def have_numpy():
    return _np is not None


def _shape_arg(shape):
    if shape is None:
        raise TypeError("shape must be an int or a sequence of ints, not None")
    if isinstance(shape, numbers.Integral):
        shape = (int(shape),)
    shape = tuple(int(s) for s in shape)
    arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    return arr, len(shape), shape


def _new(fn, ctx, *args):
    out = ctypes.c_void_p()
    check(fn(*args, ctypes.byref(out)))
    return Tensor._wrap(out.value, ctx)


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
        t = cls.__new__(cls)
        Handle.__init__(t, ptr, (ctx,), owned=True)
        t._ctx = ctx
        return t

    @classmethod
    def _borrow(cls, ptr, owner, ctx):
        """A borrowed tensor: owner keeps it valid; Python never releases it."""
        if not ptr:
            return None
        t = cls.__new__(cls)
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

    @property
    def shape(self):
        buf = (ctypes.c_int64 * MAX_DIMS)()
        n = lib.dlt_tensor_shape(self.handle, buf, MAX_DIMS)
        return tuple(int(buf[i]) for i in range(n))

    def size(self, i=None):
        return self.shape if i is None else int(lib.dlt_tensor_dim(self.handle, i))

    @property
    def numel(self):
        return int(lib.dlt_tensor_numel(self.handle))

    @property
    def nbytes(self):
        return int(lib.dlt_tensor_nbytes(self.handle))

    @property
    def dtype(self):
        return _dt.dtype(int(lib.dlt_tensor_dtype(self.handle)))

    @property
    def format(self):
        """0 (contiguous NCHW) or 1 (channels-last)."""
        return int(lib.dlt_tensor_format(self.handle))

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
    def device(self):
        return self._ctx.device

    def __len__(self):
        s = self.shape
        if not s:
            raise TypeError("len() of a 0-d tensor")
        return s[0]

    def __repr__(self):
        if self._ptr is None:
            return "<dltrain.Tensor released>"
        extra = ", requires_grad=True" if self.requires_grad else ""
        fmt = ", channels_last" if self.format == 1 else ""
        return "dltrain.Tensor(shape=%s, dtype=%s, device=%s%s%s)" % (
            list(self.shape), self.dtype.name, self.device, fmt, extra)

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
        """A new numpy array with the tensor's values in logical (NCHW) order.

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
        """Nested lists of Python numbers in logical order (synchronises)."""
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
        """The single element as a Python number (synchronises)."""
        v = ctypes.c_double()
        check(lib.dlt_tensor_item(self.handle, ctypes.byref(v)))
        return v.value if self.dtype.is_floating_point else int(v.value)

    def get(self, index):
        """Element `index` of the logical row-major order (synchronises)."""
        v = ctypes.c_double()
        check(lib.dlt_tensor_get(self.handle, int(index), ctypes.byref(v)))
        return v.value if self.dtype.is_floating_point else int(v.value)

    def __float__(self):
        return float(self.item())

    def __int__(self):
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
        """Copies src (same shape and dtype; any format or context) into this tensor."""
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
        """A copy in another memory format (0 contiguous, 1 channels-last)."""
        return _new(lib.dlt_tensor_to_format, self._ctx, self.handle, _dt.memory_format(format))

    def contiguous(self):
        return self if self.format == _dt.CONTIGUOUS else self.to_format(_dt.CONTIGUOUS)

    def to(self, target=None, dtype=None, memory_format=None):
        """to(ctx) moves to another context; to(dtype) is the differentiable cast (dlt_cast);
        to(memory_format="channels_last") converts the format."""
        t = self
        if isinstance(target, Context):
            t = t.to_ctx(target)
        elif target is not None:
            dtype = target
        if dtype is not None and _dt.dtype(dtype) != t.dtype:
            from .ops import cast
            t = cast(t, dtype)
        if memory_format is not None and _dt.memory_format(memory_format) != t.format:
            t = t.to_format(memory_format)
        return t

    def float(self):
        return self.to(_dt.float32)

    def half(self):
        return self.to(_dt.float16)

    def bfloat16(self):
        return self.to(_dt.bfloat16)

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
        """The accumulated gradient of a leaf (borrowed from this tensor), or None."""
        return Tensor._borrow(lib.dlt_tensor_grad(self.handle), self, self._ctx)

    def backward(self, grad=None):
        from .autograd import backward
        backward(self, grad)

    def detach(self):
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

    def __add__(self, other):
        from .ops import add
        if isinstance(other, Tensor):
            return add(self, other)
        return NotImplemented

    def __sub__(self, other):
        from .ops import add, mul_scalar
        if isinstance(other, Tensor):
            return add(self, mul_scalar(other, None, -1.0))
        return NotImplemented

    def __mul__(self, other):
        from .ops import mul_scalar
        if isinstance(other, numbers.Real):
            return mul_scalar(self, None, float(other))
        if isinstance(other, Tensor) and other.numel == 1:
            return mul_scalar(self, other, 1.0)
        return NotImplemented

    def __rmul__(self, other):
        from .ops import mul_scalar
        if isinstance(other, numbers.Real):
            return mul_scalar(self, None, float(other))
        return NotImplemented

    def __truediv__(self, other):
        from .ops import mul_scalar
        if isinstance(other, numbers.Real):
            return mul_scalar(self, None, 1.0 / float(other))
        return NotImplemented

    def __neg__(self):
        from .ops import mul_scalar
        return mul_scalar(self, None, -1.0)


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


# ---- factories --------------------------------------------------------------------------
def empty(shape, dtype="f32", format=0, *, ctx=None):
    """A tensor with uninitialised contents."""
    ctx = resolve(ctx)
    arr, nd, _ = _shape_arg(shape)
    return _new(lib.dlt_tensor_empty, ctx, ctx.handle, _dt.dtype(dtype), arr, nd,
                _dt.memory_format(format))


def zeros(shape, dtype="f32", format=0, *, ctx=None):
    ctx = resolve(ctx)
    arr, nd, _ = _shape_arg(shape)
    return _new(lib.dlt_tensor_zeros, ctx, ctx.handle, _dt.dtype(dtype), arr, nd,
                _dt.memory_format(format))


def full(shape, value, dtype="f32", format=0, *, ctx=None):
    return empty(shape, dtype, format, ctx=ctx).fill_(value)


def ones(shape, dtype="f32", format=0, *, ctx=None):
    return full(shape, 1.0, dtype, format, ctx=ctx)


def rand(shape, dtype="f32", low=0.0, high=1.0, format=0, *, ctx=None):
    """Uniform [low, high) from the context's Philox generator."""
    return empty(shape, dtype, format, ctx=ctx).uniform_(low, high)


def randn(shape, dtype="f32", mean=0.0, std=1.0, format=0, *, ctx=None):
    """Normal N(mean, std^2) from the context's Philox generator."""
    return empty(shape, dtype, format, ctx=ctx).normal_(mean, std)


def from_buffer(buffer, shape, dtype="f32", format=0, *, ctx=None):
    """A tensor holding a copy of a host buffer (memory order, exactly the tensor's size).
    The buffer's own memory is handed to the library (no intermediate copy) when it is
    writable and C-contiguous, or bytes."""
    ctx = resolve(ctx)
    arr, nd, _ = _shape_arg(shape)
    with _HostView(buffer) as (ptr, n):
        return _new(lib.dlt_tensor_from_host, ctx, ctx.handle, _dt.dtype(dtype), arr, nd,
                    _dt.memory_format(format), ptr, n)


def from_numpy(array, format=0, *, ctx=None):
    """A tensor with a copy of a numpy array (float32, float16, int32, int64, uint8), made
    by one copy from the array's own buffer. With format="channels_last" the array is the
    logical NCHW array (no copy when it is already NHWC in memory, e.g. a transposed view)."""
    if _np is None:
        raise ImportError("numpy is not installed")
    ctx = resolve(ctx)
    a = _np.asarray(array)
    try:
        dt = _dt.dtype(a.dtype)
    except TypeError:
        raise TypeError("numpy dtype %s has no libdltrain equivalent (use float32, float16, "
                        "int32, int64 or uint8)" % a.dtype) from None
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    fmt = _dt.memory_format(format)
    shape = a.shape
    if fmt == _dt.CHANNELS_LAST and a.ndim == 4:
        a = _np.ascontiguousarray(a.transpose(0, 2, 3, 1))
    else:
        a = _np.ascontiguousarray(a)
    arr, nd, _ = _shape_arg(shape)
    return _new(lib.dlt_tensor_from_host, ctx, ctx.handle, dt, arr, nd, fmt,
                a.ctypes.data if a.nbytes else None, a.nbytes)


def _flatten_nested(data):
    if isinstance(data, (list, tuple)):
        if not data:
            return [], (0,)
        parts = [_flatten_nested(d) for d in data]
        inner = parts[0][1]
        for p in parts:
            if p[1] != inner:
                raise ValueError("ragged nested sequence: sub-shapes %s and %s" % (inner, p[1]))
        flat = [v for p in parts for v in p[0]]
        return flat, (len(data),) + inner
    if isinstance(data, numbers.Number) and not isinstance(data, complex):
        return [data], ()
    raise TypeError("cannot make a tensor element from %r" % (data,))


def _buffer_dtype(data):
    """The dtype a buffer's element format names (u8 for plain bytes)."""
    mv = memoryview(data)
    fmt = mv.format.lstrip("@=<")
    if fmt in ("B", "c"):
        return _dt.uint8
    if fmt == "f":
        return _dt.float32
    if fmt == "e":
        return _dt.float16
    if fmt in ("i", "l", "q") and mv.itemsize in (4, 8):
        return _dt.int32 if mv.itemsize == 4 else _dt.int64
    raise TypeError("buffer format %r has no libdltrain dtype: pass dtype=" % mv.format)


def tensor(data, dtype=None, format=0, *, shape=None, ctx=None):
    """A tensor from data: nested sequences of numbers, a Python scalar (0-d), a numpy
    array, a buffer (needs shape=), or another Tensor (copied to ctx). dtype defaults to
    f32 for floats and i64 for integers (numpy arrays keep theirs)."""
    ctx = resolve(ctx)
    if isinstance(data, Tensor):
        t = data.to_ctx(ctx) if data.ctx is not ctx else data.astype(data.dtype)
        return t if dtype is None else t.astype(dtype)
    if _np is not None and isinstance(data, _np.ndarray):
        a = data if dtype is None else data.astype(_np.dtype(_dt.dtype(dtype).numpy_name))
        return from_numpy(a, format, ctx=ctx)
    if not isinstance(data, (list, tuple, numbers.Number)):
        try:
            memoryview(data)
        except TypeError:
            raise TypeError("cannot make a tensor from %s" % type(data).__name__) from None
        if shape is None:
            raise TypeError("a tensor from a buffer needs shape=")
        return from_buffer(data, shape, _buffer_dtype(data) if dtype is None else dtype, format,
                           ctx=ctx)
    flat, shp = _flatten_nested(data)
    if dtype is None:
        dtype = _dt.int64 if all(isinstance(v, numbers.Integral) for v in flat) and flat \
            else _dt.float32
    dtype = _dt.dtype(dtype)
    if shape is not None:
        _, _, shp = _shape_arg(shape)
    if isinstance(dtype, _dt.DType):
        conv = float if dtype.is_floating_point else int
        raw = _dt.pack(dtype, [conv(v) for v in flat])
    else:  # an unknown dtype value: let the library report it
        raw = b""
    if format and _dt.memory_format(format) == _dt.CHANNELS_LAST:
        t = from_buffer(raw, shp, dtype, 0, ctx=ctx)
        return t.to_format(_dt.CHANNELS_LAST)
    return from_buffer(raw, shp, dtype, format, ctx=ctx)
