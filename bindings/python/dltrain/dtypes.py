"""dtypes and memory formats (include/dltrain/tensor.h).

A dtype is a DType: an int (the C value, passed as int32) that prints as its name. Every
function that takes a dtype also accepts the C value, a name ("f32", "float32", "half",
"bfloat16", ...) or a numpy dtype.
"""

import struct


class DType(int):
    """A libdltrain dtype: the int32 value of the C API, with a name."""

    _names = {}

    def __new__(cls, value, name, itemsize, struct_code, numpy_name, long_name):
        self = int.__new__(cls, value)
        self.name = name  # the library's name (dlt_dtype_name)
        self.long_name = long_name  # PyTorch's name: float32, bfloat16, ...
        self.itemsize = itemsize
        self.struct_code = struct_code  # struct module code for one element, None for bf16
        self.numpy_name = numpy_name  # numpy dtype name, None when numpy has none (bf16)
        return self

    @property
    def is_floating_point(self):
        return int(self) in (0, 1, 2)

    @property
    def is_signed(self):
        return int(self) != 5

    def __repr__(self):
        return "dltrain." + self.long_name

    __str__ = __repr__

    def __reduce__(self):
        return (dtype, (int(self),))


float32 = f32 = DType(0, "f32", 4, "f", "float32", "float32")
float16 = f16 = half = DType(1, "f16", 2, "e", "float16", "float16")
bfloat16 = bf16 = DType(2, "bf16", 2, None, None, "bfloat16")
int32 = i32 = DType(3, "i32", 4, "i", "int32", "int32")
int64 = i64 = DType(4, "i64", 8, "q", "int64", "int64")
uint8 = u8 = DType(5, "u8", 1, "B", "uint8", "uint8")

ALL = (float32, float16, bfloat16, int32, int64, uint8)
_BY_VALUE = {int(d): d for d in ALL}
_BY_NAME = {}
for _d, _aliases in ((float32, ("f32", "float32", "float")), (float16, ("f16", "float16", "half")),
                     (bfloat16, ("bf16", "bfloat16")), (int32, ("i32", "int32", "int")),
                     (int64, ("i64", "int64", "long")), (uint8, ("u8", "uint8"))):
    for _a in _aliases:
        _BY_NAME[_a] = _d


def is_dtype_like(x):
    """True for a DType, a dtype name or a numpy dtype (not for a plain int)."""
    if isinstance(x, DType):
        return True
    if isinstance(x, str):
        return x.lower().replace("torch.", "").replace("dltrain.", "") in _BY_NAME
    if isinstance(x, (int, float)) or x is None:
        return False
    try:
        dtype(x)
        return True
    except (TypeError, ValueError):
        return False


def dtype(x):
    """The DType for x (a DType, its int value, a name or a numpy dtype).

    An int outside the known values is passed through as a plain int, so the library
    itself reports an unknown dtype (DLT_ERR_DTYPE) with its message.
    """
    if isinstance(x, DType):
        return x
    if isinstance(x, bool):
        raise TypeError("a dtype cannot be a bool")
    if isinstance(x, int):
        return _BY_VALUE.get(x, x)
    if isinstance(x, str):
        s = x.lower().replace("torch.", "").replace("dltrain.", "")
        if s in _BY_NAME:
            return _BY_NAME[s]
        raise ValueError("unknown dtype name %r (known: %s)" % (x, ", ".join(sorted(_BY_NAME))))
    name = getattr(x, "name", None)  # numpy dtype, or a numpy scalar type via its dtype
    if name is None and hasattr(x, "dtype"):
        name = getattr(x.dtype, "name", None)
    if name is None:
        try:
            import numpy
            name = numpy.dtype(x).name
        except Exception:
            name = None
    if isinstance(name, str) and name in _BY_NAME:
        return _BY_NAME[name]
    raise TypeError("cannot interpret %r as a libdltrain dtype" % (x,))


# ---- memory formats ----------------------------------------------------------------------
class MemoryFormat(int):
    """A memory format: the int32 value of the C API (0 contiguous, 1 channels-last), with a
    name. preserve_format (-1) exists for .to() only: it means "keep the tensor's"."""

    def __new__(cls, value, name):
        self = int.__new__(cls, value)
        self.name = name
        return self

    def __repr__(self):
        return "dltrain." + self.name

    __str__ = __repr__

    def __reduce__(self):
        return (memory_format, (int(self),))


CONTIGUOUS = contiguous_format = MemoryFormat(0, "contiguous_format")
CHANNELS_LAST = channels_last = MemoryFormat(1, "channels_last")
preserve_format = MemoryFormat(-1, "preserve_format")
_FORMATS = {"contiguous": CONTIGUOUS, "contiguous_format": CONTIGUOUS, "nchw": CONTIGUOUS,
            "channels_last": CHANNELS_LAST, "nhwc": CHANNELS_LAST,
            "preserve_format": preserve_format}


def memory_format(x):
    """A MemoryFormat from a MemoryFormat, an int or a name ("channels_last", ...). An unknown
    int is passed through so that the library reports it."""
    if isinstance(x, MemoryFormat):
        return x
    if isinstance(x, bool):
        raise TypeError("a memory format cannot be a bool")
    if isinstance(x, int):
        return {0: CONTIGUOUS, 1: CHANNELS_LAST, -1: preserve_format}.get(x, x)
    if isinstance(x, str) and x.lower().replace("torch.", "").replace("dltrain.", "") in _FORMATS:
        return _FORMATS[x.lower().replace("torch.", "").replace("dltrain.", "")]
    raise ValueError("unknown memory format %r (use 'contiguous_format' or 'channels_last')"
                     % (x,))


def is_memory_format_like(x):
    return isinstance(x, MemoryFormat) or (
        isinstance(x, str) and x.lower().replace("torch.", "").replace("dltrain.", "") in _FORMATS)


# ---- element conversion for Python sequences (no numpy needed) ---------------------------
def _f32_bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


def pack(dt, values):
    """Packs a flat sequence of Python numbers as little-endian elements of dt."""
    dt = dtype(dt)
    if dt.struct_code is not None:
        return struct.pack("<%d%s" % (len(values), dt.struct_code), *values)
    # bf16: round the fp32 bits to nearest even (NaN stays a quiet NaN)
    out = []
    for v in values:
        b = _f32_bits(float(v))
        if (b & 0x7FFFFFFF) > 0x7F800000:
            h = (b >> 16) | 0x40
        else:
            h = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
        out.append(h & 0xFFFF)
    return struct.pack("<%dH" % len(out), *out)


def unpack(dt, data):
    """Unpacks little-endian elements of dt into a list of Python numbers."""
    dt = dtype(dt)
    n = len(data) // dt.itemsize
    if dt.struct_code is not None:
        return list(struct.unpack("<%d%s" % (n, dt.struct_code), bytes(data[:n * dt.itemsize])))
    hs = struct.unpack("<%dH" % n, bytes(data[:n * 2]))
    return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in hs]
