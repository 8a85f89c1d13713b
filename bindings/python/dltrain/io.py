"""Checkpoints in the safetensors format (include/dltrain/io.h).

Names are PyTorch's state_dict names: safetensors.torch.load_file + load_state_dict reads
what we write, and files PyTorch wrote load here. Saves are atomic (temporary file, fsync,
rename); loads validate the whole file first and change nothing on failure.
"""

import collections
import ctypes

from ._guard import tag_array
from ._handle import Handle, arg
from ._lib import lib, check, enc
from ._tensor import Tensor


def _module_cls():
    from .nn import Module
    return Module


def save(module, path):
    """Saves every state entry (parameters and buffers) of module (a libdltrain module
    through dlt_module_save, a Python module through its state_dict)."""
    if isinstance(module, _module_cls()) and not module.is_native:
        module.save(path)
        return
    check(lib.dlt_module_save(arg(module, _module_cls(), "module"), enc(path)))


#: What a load left out, as PyTorch's load_state_dict reports it (missing_keys: module
#: names the file lacks; unexpected_keys: file names the module lacks), plus
#: mismatched_keys: names in both with another dtype or shape. Empty after a strict load.
LoadResult = collections.namedtuple("LoadResult", ["missing_keys", "unexpected_keys",
                                                   "mismatched_keys"])


class _LoadOptions(ctypes.Structure):  # dlt_module_load_options (io.h)
    _fields_ = [("size", ctypes.c_uint32), ("strict", ctypes.c_int32),
                ("file_prefix", ctypes.c_char_p), ("module_prefix", ctypes.c_char_p)]


def load(module, path, strict=True, *, file_prefix=None, module_prefix=None):
    """Loads module's state from a safetensors file (a path or an open SafeTensors), all or
    nothing, and returns a LoadResult.

    strict=True (default): every name, dtype and shape must match, as PyTorch's
    load_state_dict(strict=True). strict=False: what matches loads; missing, unexpected and
    mismatched names are skipped and reported (unlike PyTorch, a shape mismatch is skipped
    too: that is how a 1000-class backbone initialises a 10-class model).
    file_prefix / module_prefix: the file's entry file_prefix + X loads into the module's
    entry module_prefix + X; only names under the prefixes take part."""
    if isinstance(module, _module_cls()) and not module.is_native:
        # a Python module: its own state_dict machinery (strict only)
        if not strict or file_prefix is not None or module_prefix is not None:
            raise NotImplementedError("non-strict and prefixed loads take libdltrain modules")
        module.load(path)
        return LoadResult([], [], [])
    m = arg(module, _module_cls(), "module")
    if isinstance(path, SafeTensors):
        source = path.handle
    elif strict and file_prefix is None and module_prefix is None and \
            not lib.has("dlt_module_load_ex"):
        check(lib.dlt_module_load(m, enc(path)))  # an older library
        return LoadResult([], [], [])
    else:
        source = None
    o = _LoadOptions()
    lib.dlt_module_load_options_init(ctypes.byref(o), ctypes.sizeof(o))
    o.strict = 1 if strict else 0
    keep = (enc(file_prefix), enc(module_prefix))
    o.file_prefix, o.module_prefix = keep
    report = ctypes.c_void_p()
    if source is not None:
        check(lib.dlt_module_load_safetensors(m, source, ctypes.byref(o), ctypes.byref(report)))
    else:
        check(lib.dlt_module_load_ex(m, enc(path), ctypes.byref(o), ctypes.byref(report)))
    try:
        lists = []
        for kind in range(3):  # DLT_LOAD_MISSING, _UNEXPECTED, _MISMATCHED
            n = lib.dlt_load_report_count(report, kind)
            lists.append([lib.dlt_load_report_name(report, kind, i).decode() for i in range(n)])
        return LoadResult(*lists)
    finally:
        lib.dlt_load_report_destroy(report)


class SafeTensors(Handle):
    """An open safetensors file (safetensors.safe_open): the header read and validated once,
    names, dtypes and shapes listed, tensors read on demand. A context manager.

        with dltrain.io.SafeTensors("model.safetensors") as f:
            for name in f.keys():
                t = f.get_tensor(name)
    """

    __slots__ = ("path",)
    _destroy = staticmethod(lib.dlt_safetensors_close)
    _what = "safetensors file"

    def __init__(self, path):
        out = ctypes.c_void_p()
        check(lib.dlt_safetensors_open(enc(path), ctypes.byref(out)))
        Handle.__init__(self, out.value)
        self.path = path

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def keys(self):
        """Tensor names in the header's order."""
        h = self.handle
        return [lib.dlt_safetensors_name(h, i).decode()
                for i in range(lib.dlt_safetensors_num_tensors(h))]

    def __len__(self):
        return lib.dlt_safetensors_num_tensors(self.handle)

    def __iter__(self):
        return iter(self.keys())

    def __contains__(self, name):
        return lib.dlt_safetensors_dtype_name(self.handle, enc(name)) is not None

    def dtype(self, name):
        """The file's dtype of tensor `name` as safetensors spells it ("F32", "BF16", "F64")."""
        d = lib.dlt_safetensors_dtype_name(self.handle, enc(name))
        if d is None:
            raise KeyError(name)
        return d.decode()

    def shape(self, name):
        """The shape of tensor `name` (a tuple), without reading it."""
        dims = (ctypes.c_int64 * 8)()
        nd = ctypes.c_int32()
        check(lib.dlt_safetensors_info(self.handle, enc(name), None, dims, 8, ctypes.byref(nd)))
        return tuple(dims[i] for i in range(nd.value))

    def metadata(self, key):
        """The value of key in the file's "__metadata__", or None."""
        v = lib.dlt_safetensors_metadata(self.handle, enc(key))
        return None if v is None else v.decode()

    def get_tensor(self, name, *, ctx=None):
        """Tensor `name` as a new contiguous tensor on ctx (only its bytes are read)."""
        from .context import resolve
        ctx = resolve(ctx)
        out = ctypes.c_void_p()
        check(lib.dlt_safetensors_get(self.handle, ctx.handle, enc(name), ctypes.byref(out)))
        return Tensor._wrap(out.value, ctx)


def safe_open(path):
    """SafeTensors(path), named as in the safetensors package."""
    return SafeTensors(path)


def checkpoint_save(path, model, optimizer=None, scaler=None, epoch=0, step=0, extra=None):
    """A training checkpoint: model state, optimizer momentum buffers/lr/step count, the
    scaler's state and the position (epoch, step). extra: the program's own entries, a dict
    {"train.<name>": Tensor} (dlt_checkpoint_save_ex: nanoGPT's iter_num, best_val_loss, ...);
    loads ignore them, SafeTensors(path).get_tensor reads them back."""
    from .amp import GradScaler
    from .optim import Optimizer
    m = arg(model, _module_cls(), "model")
    o = arg(optimizer, Optimizer, "optimizer", optional=True)
    s = arg(scaler, GradScaler, "scaler", optional=True)
    if not extra:
        check(lib.dlt_checkpoint_save(enc(path), m, o, s, int(epoch), int(step)))
        return
    items = list(extra.items())
    n = len(items)
    names = (ctypes.c_char_p * n)(*[enc(k) for k, _ in items])
    handles = (ctypes.c_void_p * n)(*[arg(t, Tensor, "extra[%r]" % (k,)) for k, t in items])
    tag_array(handles, [t for _, t in items])
    check(lib.dlt_checkpoint_save_ex(enc(path), m, o, s, int(epoch), int(step), names, handles, n))


def checkpoint_load(path, model, optimizer=None, scaler=None):
    """Loads a training checkpoint into the given objects; returns (epoch, step)."""
    from .amp import GradScaler
    from .optim import Optimizer
    e, s = ctypes.c_int64(), ctypes.c_int64()
    check(lib.dlt_checkpoint_load(enc(path), arg(model, _module_cls(), "model"),
                                  arg(optimizer, Optimizer, "optimizer", optional=True),
                                  arg(scaler, GradScaler, "scaler", optional=True),
                                  ctypes.byref(e), ctypes.byref(s)))
    return e.value, s.value


def safetensors_save(path, tensors):
    """Writes named tensors (a dict, or (name, tensor) pairs) as one safetensors file."""
    items = list(tensors.items()) if hasattr(tensors, "items") else list(tensors)
    n = len(items)
    names = (ctypes.c_char_p * max(n, 1))()
    handles = (ctypes.c_void_p * max(n, 1))()
    keep = []
    for i, (name, t) in enumerate(items):
        b = enc(name)
        keep.append(b)
        names[i] = b
        handles[i] = arg(t, Tensor, "tensors[%r]" % (name,))
    tag_array(handles, [t for _, t in items])
    check(lib.dlt_safetensors_save(enc(path), names, handles, n))
    del keep


def load_tensor(path, name, *, ctx=None):
    """The tensor `name` of a safetensors file, as a new contiguous tensor on ctx (the
    file's dtype and shape; the whole file is validated first)."""
    from .context import resolve
    ctx = resolve(ctx)
    out = ctypes.c_void_p()
    check(lib.dlt_safetensors_load_tensor(ctx.handle, enc(path), enc(name), ctypes.byref(out)))
    return Tensor._wrap(out.value, ctx)
