"""repr(tensor) as PyTorch prints it (torch/_tensor_str.py, default print options).

    tensor([[1.0000, 2.5000],
            [3.0000, 4.0000]], dtype=dltrain.float16, device='cuda:0', requires_grad=True)

Floats are printed as integers with a trailing point when they all are ("1."), with 4
decimals otherwise, in scientific notation when the magnitudes differ by more than 1000x
(or exceed 1e8, or go below 1e-4); all numbers share one width. A tensor of more than
`threshold` (1000) elements is summarised: in every dimension longer than 2 * edgeitems
only the first and last 3 entries are shown, around "...". One host copy serves tensors up
to 64 MiB (only the values shown are unpacked); beyond, the values shown are read one by
one.

When the loaded library exports dlt_tensor_snprint and the print options are the defaults,
its text is used instead (one formatting for C and Python; the Python tests compare both with
PyTorch's strings).
"""

import ctypes
import itertools
import math
import struct

from . import dtypes as _dt
from ._lib import lib, check, _SIGNATURES

_OPTS = {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80}
_WHOLE_COPY_LIMIT = 64 << 20  # bytes: above this only the shown elements are read


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None):
    """torch.set_printoptions for dltrain tensors (only these four options)."""
    for k, v in (("precision", precision), ("threshold", threshold), ("edgeitems", edgeitems),
                 ("linewidth", linewidth)):
        if v is not None:
            _OPTS[k] = int(v)


def get_printoptions():
    return dict(_OPTS)


class _Formatter:
    """torch's _Formatter: one width (and mode) for every value printed."""

    def __init__(self, values, floating):
        self.floating = floating
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        p = _OPTS["precision"]
        if not floating:
            for v in values:
                self.max_width = max(self.max_width, len(str(v)))
            return
        nz = [v for v in values if math.isfinite(v) and v != 0]
        if not nz:
            return
        absv = [abs(v) for v in nz]
        lo, hi = min(absv), max(absv)
        for v in nz:
            if v != math.ceil(v):
                self.int_mode = False
                break
        if self.int_mode:
            if hi / lo > 1000.0 or hi > 1.0e8:
                self.sci_mode = True
                for v in nz:
                    self.max_width = max(self.max_width, len(("{:.%de}" % p).format(v)))
            else:
                for v in nz:
                    self.max_width = max(self.max_width, len("%.0f" % v) + 1)
        elif hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4:
            self.sci_mode = True
            for v in nz:
                self.max_width = max(self.max_width, len(("{:.%de}" % p).format(v)))
        else:
            for v in nz:
                self.max_width = max(self.max_width, len(("{:.%df}" % p).format(v)))

    def width(self):
        return self.max_width

    def format(self, v):
        p = _OPTS["precision"]
        if self.floating:
            if self.sci_mode:
                s = ("{:%d.%de}" % (self.max_width, p)).format(v)
            elif self.int_mode:
                s = "%.0f" % v
                if not (math.isinf(v) or math.isnan(v)):
                    s += "."
            else:
                s = ("{:.%df}" % p).format(v)
        else:
            s = str(v)
        return (self.max_width - len(s)) * " " + s


def _shown_indices(shape, summarize):
    e = _OPTS["edgeitems"]
    out = []
    for n in shape:
        if summarize and n > 2 * e:
            out.append(list(range(e)) + [None] + list(range(n - e, n)))
        else:
            out.append(list(range(n)))
    return out


def _read_values(t, shape, idx):
    """{flat logical index: value} of the elements shown: one host copy (read in place with
    struct) unless the tensor is large and few elements are shown, then element reads."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    wanted = [sum(i * s for i, s in zip(combo, strides))
              for combo in itertools.product(*[[i for i in l if i is not None] for l in idx])]
    if t.nbytes > _WHOLE_COPY_LIMIT and len(wanted) <= 4096:
        return {k: t.get(k) for k in wanted}
    c = t if t.format == _dt.CONTIGUOUS else t.to_format(_dt.CONTIGUOUS)
    raw = c.tobytes()
    dt = t.dtype
    n = dt.itemsize
    if dt.struct_code is None:  # bf16: the high half of an f32
        return {k: struct.unpack("<f", struct.pack("<I", struct.unpack_from("<H", raw, k * n)[0]
                                                   << 16))[0] for k in wanted}
    fmt = "<" + dt.struct_code
    return {k: struct.unpack_from(fmt, raw, k * n)[0] for k in wanted}


def _vector(vals, indent, fmt):
    elem = fmt.width() + 2
    per_line = max(1, int(math.floor((_OPTS["linewidth"] - indent) / elem)))
    data = [" ..." if v is None else fmt.format(v) for v in vals]
    lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"


def _body(idx, strides, values, base, dim, indent, fmt):
    ndim = len(idx)
    if ndim - dim == 1:
        vals = [None if i is None else values[base + i] for i in idx[dim]]
        return _vector(vals, indent, fmt)
    parts = ["..." if i is None else
             _body(idx, strides, values, base + i * strides[dim], dim + 1, indent + 1, fmt)
             for i in idx[dim]]
    return "[" + ("," + "\n" * (ndim - dim - 1) + " " * (indent + 1)).join(parts) + "]"


def _add_suffixes(text, suffixes, indent):
    parts = [text]
    last = len(text) - text.rfind("\n") + 1
    for s in suffixes:
        if last + len(s) + 2 > _OPTS["linewidth"]:
            parts.append(",\n" + " " * indent + s)
            last = indent + len(s)
        else:
            parts.append(", " + s)
            last += len(s) + 2
    parts.append(")")
    return "".join(parts)


def _c_snprint(t):
    """The library's text (dlt_tensor_snprint), or None when it has none of a known form."""
    sig = _SIGNATURES.get("dlt_tensor_snprint")
    if sig is None or not lib.has("dlt_tensor_snprint"):
        return None
    P = ctypes.POINTER
    args = list(sig[1])
    if args == [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, P(ctypes.c_size_t)]:
        need = ctypes.c_size_t()
        check(lib.dlt_tensor_snprint(t.handle, None, 0, ctypes.byref(need)))
        buf = ctypes.create_string_buffer(need.value + 1)
        check(lib.dlt_tensor_snprint(t.handle, buf, need.value + 1, ctypes.byref(need)))
        return buf.value.decode("utf-8", "replace")
    if args == [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t] and \
            sig[0] is ctypes.c_size_t:  # snprintf-like: returns the length needed
        n = lib.dlt_tensor_snprint(t.handle, None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        lib.dlt_tensor_snprint(t.handle, buf, n + 1)
        return buf.value.decode("utf-8", "replace")
    return None


_DEFAULT_OPTS = dict(_OPTS)


def tensor_repr(t):
    # the library's text is PyTorch's default print options; other options format here
    c = _c_snprint(t) if _OPTS == _DEFAULT_OPTS else None
    if c is not None:
        return c
    prefix = "tensor("
    indent = len(prefix)
    shape = t.shape
    numel = int(t.numel)
    dt = t.dtype
    suffixes = ["device='%s'" % t.device] if t.is_cuda else []
    if numel == 0:
        body = "[]"
        if len(shape) != 1:
            suffixes.append("size=%s" % (tuple(shape),))
        if dt != _dt.float32:  # nothing shows that an empty tensor is int64
            suffixes.append("dtype=" + repr(dt))
    else:
        if dt not in (_dt.float32, _dt.int64):
            suffixes.append("dtype=" + repr(dt))
        summarize = numel > _OPTS["threshold"]
        idx = _shown_indices(shape, summarize)
        values = _read_values(t, shape, idx)
        fmt = _Formatter(list(values.values()), dt.is_floating_point)
        if not shape:
            body = fmt.format(values[0])
        else:
            strides = [1] * len(shape)
            for d in range(len(shape) - 2, -1, -1):
                strides[d] = strides[d + 1] * shape[d + 1]
            body = _body(idx, strides, values, 0, 0, indent, fmt)
    if t.requires_grad:
        suffixes.append("requires_grad=True")
    return _add_suffixes(prefix + body, suffixes, indent)
