"""Tensor factories with PyTorch's signatures.

    dltrain.zeros(2, 3)                       # sizes as arguments ...
    dltrain.zeros((2, 3), dtype=dltrain.float16, device="cuda", requires_grad=False,
                  memory_format=dltrain.channels_last)      # ... or one sequence
    dltrain.full((2, 2), 7)                   # int64, as PyTorch infers from the value
    dltrain.tensor([[1, 2], [3, 4]])          # int64; floats give float32
    dltrain.tensor(np_array)                  # keeps the array's dtype (float64 -> float32)

Sizes are ints (OverflowError beyond int64; a dtype given where a size belongs is a
TypeError saying that dtype is a keyword). dtype defaults to float32. `device` is "cpu",
"cuda", "cuda:N" or an int, resolved to a context as context.device_context says; `ctx=`
names the context directly. `format=` is the older spelling of `memory_format=`.
"""

import numbers

from . import dtypes as _dt
from ._lib import lib
from .context import device_context
from ._tensor import Tensor, _HostView, _new, _np, _shape_arg, _shape_tuple

__all__ = ["empty", "zeros", "ones", "full", "rand", "randn", "tensor", "from_buffer",
           "from_numpy", "empty_like", "zeros_like", "ones_like", "full_like", "rand_like",
           "randn_like"]


def _sizes(size, fname):
    """The shape from *size: ints, or a single sequence of ints."""
    if len(size) == 1 and not isinstance(size[0], numbers.Integral) and \
            not hasattr(size[0], "__index__"):
        return _shape_tuple(size[0], "%s(): size" % fname)
    if len(size) > 1 and not isinstance(size[0], numbers.Integral):
        raise TypeError("%s(): size must be ints or one sequence of ints; dtype and memory "
                        "format are keyword arguments (e.g. %s((2, 3), dtype=dltrain.float16))"
                        % (fname, fname))
    return _shape_tuple(size, "%s(): size" % fname)


def _format_kw(memory_format, format):
    if memory_format is not None and format is not None and \
            _dt.memory_format(memory_format) != _dt.memory_format(format):
        raise ValueError("memory_format=%r and format=%r disagree" % (memory_format, format))
    f = memory_format if memory_format is not None else format
    f = _dt.CONTIGUOUS if f is None else _dt.memory_format(f)
    return _dt.CONTIGUOUS if f == _dt.preserve_format else f


def _make(fn, shape, dtype, device, ctx, fmt, requires_grad):
    ctx = device_context(device, ctx)
    arr, nd, _ = _shape_arg(shape)
    t = _new(fn, ctx, ctx.handle, _dt.dtype(_dt.float32 if dtype is None else dtype), arr, nd,
             fmt)
    if requires_grad:
        t.requires_grad_()
    return t


def empty(*size, dtype=None, device=None, requires_grad=False, memory_format=None, ctx=None,
          format=None):
    """A tensor with uninitialised contents."""
    return _make(lib.dlt_tensor_empty, _sizes(size, "empty"), dtype, device, ctx,
                 _format_kw(memory_format, format), requires_grad)


def zeros(*size, dtype=None, device=None, requires_grad=False, memory_format=None, ctx=None,
          format=None):
    return _make(lib.dlt_tensor_zeros, _sizes(size, "zeros"), dtype, device, ctx,
                 _format_kw(memory_format, format), requires_grad)


def _filled(shape, value, dtype, device, ctx, fmt, requires_grad):
    t = _make(lib.dlt_tensor_empty, shape, dtype, device, ctx, fmt, False).fill_(value)
    if requires_grad:
        t.requires_grad_()
    return t


def ones(*size, dtype=None, device=None, requires_grad=False, memory_format=None, ctx=None,
         format=None):
    return _filled(_sizes(size, "ones"), 1.0, dtype, device, ctx,
                   _format_kw(memory_format, format), requires_grad)


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False, memory_format=None,
         ctx=None, format=None):
    """A tensor filled with fill_value; dtype defaults as PyTorch's: int64 for an int (or
    bool) value, float32 for a float."""
    if dtype is None:
        dtype = _dt.int64 if isinstance(fill_value, numbers.Integral) else _dt.float32
    return _filled(_shape_tuple(size, "full(): size"), fill_value, dtype, device, ctx,
                   _format_kw(memory_format, format), requires_grad)


def rand(*size, dtype=None, device=None, requires_grad=False, memory_format=None, ctx=None,
         format=None, low=0.0, high=1.0):
    """Uniform [low, high) from the context's Philox generator (low/high: dltrain extras)."""
    t = _make(lib.dlt_tensor_empty, _sizes(size, "rand"), dtype, device, ctx,
              _format_kw(memory_format, format), False).uniform_(low, high)
    return t.requires_grad_() if requires_grad else t


def randn(*size, dtype=None, device=None, requires_grad=False, memory_format=None, ctx=None,
          format=None, mean=0.0, std=1.0):
    """Normal N(mean, std^2) from the context's Philox generator (mean/std: dltrain extras)."""
    t = _make(lib.dlt_tensor_empty, _sizes(size, "randn"), dtype, device, ctx,
              _format_kw(memory_format, format), False).normal_(mean, std)
    return t.requires_grad_() if requires_grad else t


def _like(t, dtype, device, memory_format, ctx):
    if not isinstance(t, Tensor):
        raise TypeError("expected a dltrain.Tensor, got %s" % type(t).__name__)
    if ctx is None and device is None:
        ctx = t.ctx
    fmt = t.format if memory_format in (None, _dt.preserve_format) else memory_format
    return t.shape, (t.dtype if dtype is None else dtype), device, ctx, _dt.memory_format(fmt)


def empty_like(t, *, dtype=None, device=None, requires_grad=False, memory_format=None,
               ctx=None):
    shape, dt, dev, c, fmt = _like(t, dtype, device, memory_format, ctx)
    return empty(shape, dtype=dt, device=dev, ctx=c, memory_format=fmt,
                 requires_grad=requires_grad)


def zeros_like(t, *, dtype=None, device=None, requires_grad=False, memory_format=None,
               ctx=None):
    shape, dt, dev, c, fmt = _like(t, dtype, device, memory_format, ctx)
    return zeros(shape, dtype=dt, device=dev, ctx=c, memory_format=fmt,
                 requires_grad=requires_grad)


def ones_like(t, *, dtype=None, device=None, requires_grad=False, memory_format=None,
              ctx=None):
    shape, dt, dev, c, fmt = _like(t, dtype, device, memory_format, ctx)
    return ones(shape, dtype=dt, device=dev, ctx=c, memory_format=fmt,
                requires_grad=requires_grad)


def full_like(t, fill_value, *, dtype=None, device=None, requires_grad=False,
              memory_format=None, ctx=None):
    shape, dt, dev, c, fmt = _like(t, dtype, device, memory_format, ctx)
    return full(shape, fill_value, dtype=dt, device=dev, ctx=c, memory_format=fmt,
                requires_grad=requires_grad)


def rand_like(t, *, dtype=None, device=None, requires_grad=False, memory_format=None,
              ctx=None):
    shape, dt, dev, c, fmt = _like(t, dtype, device, memory_format, ctx)
    return rand(shape, dtype=dt, device=dev, ctx=c, memory_format=fmt,
                requires_grad=requires_grad)


def randn_like(t, *, dtype=None, device=None, requires_grad=False, memory_format=None,
               ctx=None):
    shape, dt, dev, c, fmt = _like(t, dtype, device, memory_format, ctx)
    return randn(shape, dtype=dt, device=dev, ctx=c, memory_format=fmt,
                 requires_grad=requires_grad)


def from_buffer(buffer, shape, dtype="f32", format=0, *, ctx=None, device=None):
    """A tensor holding a copy of a host buffer (memory order, exactly the tensor's size).
    The buffer's own memory is handed to the library (no intermediate copy) when it is
    writable and C-contiguous, or bytes."""
    ctx = device_context(device, ctx)
    arr, nd, _ = _shape_arg(shape)
    with _HostView(buffer) as (ptr, n):
        return _new(lib.dlt_tensor_from_host, ctx, ctx.handle, _dt.dtype(dtype), arr, nd,
                    _dt.memory_format(format), ptr, n)


def from_numpy(array, format=0, *, ctx=None, device=None):
    """A tensor with a copy of a numpy array (float32, float16, int32, int64, uint8), made
    by one copy from the array's own buffer (unlike torch.from_numpy it does not share the
    array's memory: the tensor may live on a device). With format="channels_last" the array
    is the logical NCHW array (no copy when it is already NHWC in memory, e.g. a transposed
    view)."""
    if _np is None:
        raise ImportError("numpy is not installed")
    ctx = device_context(device, ctx)
    a = _np.asarray(array)
    try:
        dt = _dt.dtype(a.dtype)
    except TypeError:
        raise TypeError("numpy dtype %s has no libdltrain equivalent (use float32, float16, "
                        "int32, int64 or uint8; dltrain.tensor() converts float64)"
                        % a.dtype) from None
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
    if isinstance(data, Tensor):
        if data.ndim == 0:
            return [data.item()], ()
        return _flatten_nested(data.tolist())
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
    if _np is not None and isinstance(data, _np.ndarray):
        return _flatten_nested(data.tolist())
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


# numpy dtypes tensor() converts (PyTorch would keep them; libdltrain has no such dtype)
_NUMPY_WIDEN = {"float64": "float32", "bool": "uint8", "int8": "int32", "int16": "int32",
                "uint16": "int32", "uint32": "int64"}


def tensor(data, dtype=None, *, device=None, requires_grad=False, shape=None, format=None,
           memory_format=None, ctx=None):
    """A tensor from data: nested sequences of numbers, a Python scalar (0-d), a numpy
    array, a buffer (needs shape=), or another Tensor (copied). dtype defaults to int64 for
    integers and float32 for floats; numpy arrays keep theirs (float64 becomes float32,
    bool uint8)."""
    ctx = device_context(device, ctx)
    fmt = _format_kw(memory_format, format)
    if isinstance(data, Tensor):
        t = data.to_ctx(ctx) if data.ctx is not ctx else data.astype(data.dtype)
        if dtype is not None and _dt.dtype(dtype) != t.dtype:
            t = t.astype(dtype)
        if fmt != t.format:
            t = t.to_format(fmt)
        return t.requires_grad_() if requires_grad else t
    if _np is not None and isinstance(data, (_np.ndarray, _np.generic)):
        a = _np.asarray(data)
        if dtype is not None:
            a = a.astype(_np.dtype(_dt.dtype(dtype).numpy_name or "float32"))
        elif a.dtype.name in _NUMPY_WIDEN:
            a = a.astype(_NUMPY_WIDEN[a.dtype.name])
        t = from_numpy(a, fmt, ctx=ctx)
        if dtype is not None and _dt.dtype(dtype) == _dt.bfloat16:
            t = t.astype(_dt.bfloat16)
        return t.requires_grad_() if requires_grad else t
    if not isinstance(data, (list, tuple, numbers.Number)):
        try:
            memoryview(data)
        except TypeError:
            raise TypeError("cannot make a tensor from %s" % type(data).__name__) from None
        if shape is None:
            raise TypeError("a tensor from a buffer needs shape=")
        t = from_buffer(data, shape, _buffer_dtype(data) if dtype is None else dtype, fmt,
                        ctx=ctx)
        return t.requires_grad_() if requires_grad else t
    flat, shp = _flatten_nested(data)
    if dtype is None:
        dtype = _dt.int64 if all(isinstance(v, numbers.Integral) for v in flat) and flat \
            else _dt.float32
    dtype = _dt.dtype(dtype)
    if shape is not None:
        shp = _shape_tuple(shape)
    if isinstance(dtype, _dt.DType):
        conv = float if dtype.is_floating_point else int
        vals = [conv(v) for v in flat]
        if not dtype.is_floating_point:
            lo, hi = ((0, 255) if dtype == _dt.uint8 else
                      (-2 ** (8 * dtype.itemsize - 1), 2 ** (8 * dtype.itemsize - 1) - 1))
            for v in vals:
                if not lo <= v <= hi:
                    raise OverflowError("value %d does not fit in %s" % (v, dtype.long_name))
        raw = _dt.pack(dtype, vals)
    else:  # an unknown dtype value: let the library report it
        raw = b""
    if fmt == _dt.CHANNELS_LAST:
        t = from_buffer(raw, shp, dtype, 0, ctx=ctx).to_format(_dt.CHANNELS_LAST)
    else:
        t = from_buffer(raw, shp, dtype, fmt, ctx=ctx)
    return t.requires_grad_() if requires_grad else t
