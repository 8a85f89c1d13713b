"""dtypes and memory formats (include/dltrain/tensor.h).

A dtype is a DType: an int (the C value, passed as int32) that prints as its name. Every
function that takes a dtype also accepts the C value, a name ("f32", "float32", "half",
"bfloat16", ...) or a numpy dtype.
"""

import struct


class DType(int):
    """A libdltrain dtype: the int32 value of the C API, with a name."""

    _names = {}

    def __new__(cls, value, name, itemsize, struct_code, numpy_name):
        self = int.__new__(cls, value)
        self.name = name
        self.itemsize = itemsize
        self.struct_code = struct_code  # struct module code for one element, None for bf16
        self.numpy_name = numpy_name  # numpy dtype name, None when numpy has none (bf16)
        return self

    @property
    def is_floating_point(self):
        return int(self) in (0, 1, 2)

    def __repr__(self):
        return "dltrain." + self.name

    __str__ = __repr__

    def __reduce__(self):
        return (dtype, (int(self),))


float32 = f32 = DType(0, "f32", 4, "f", "float32")
float16 = f16 = half = DType(1, "f16", 2, "e", "float16")
bfloat16 = bf16 = DType(2, "bf16", 2, None, None)
int32 = i32 = DType(3, "i32", 4, "i", "int32")
int64 = i64 = DType(4, "i64", 8, "q", "int64")
uint8 = u8 = DType(5, "u8", 1, "B", "uint8")

ALL = (float32, float16, bfloat16, int32, int64, uint8)
_BY_VALUE = {int(d): d for d in ALL}
_BY_NAME = {}
for _d, _aliases in ((float32, ("f32", "float32", "float")), (float16, ("f16", "float16", "half")),
                     (bfloat16, ("bf16", "bfloat16")), (int32, ("i32", "int32", "int")),
                     (int64, ("i64", "int64", "long")), (uint8, ("u8", "uint8"))):
    for _a in _aliases:
        _BY_NAME[_a] = _d


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
CONTIGUOUS = contiguous_format = 0
CHANNELS_LAST = channels_last = 1
_FORMATS = {"contiguous": 0, "contiguous_format": 0, "nchw": 0,
            "channels_last": 1, "nhwc": 1}


def memory_format(x):
    """0 (contiguous NCHW) or 1 (channels-last), from an int or a name."""
    if isinstance(x, bool):
        raise TypeError("a memory format cannot be a bool")
    if isinstance(x, int):
        return x
    if isinstance(x, str) and x.lower().replace("torch.", "") in _FORMATS:
        return _FORMATS[x.lower().replace("torch.", "")]
    raise ValueError("unknown memory format %r (use 'contiguous' or 'channels_last')" % (x,))


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
