"""Checkpoints in the safetensors format (include/dltrain/io.h).

Names are PyTorch's state_dict names: safetensors.torch.load_file + load_state_dict reads
what we write, and files PyTorch wrote load here. Saves are atomic (temporary file, fsync,
rename); loads validate the whole file first and change nothing on failure.
"""

import ctypes

from ._guard import tag_array
from ._handle import arg
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


def load(module, path):
    """Loads every state entry of module from path (all or nothing)."""
    if isinstance(module, _module_cls()) and not module.is_native:
        module.load(path)
        return
    check(lib.dlt_module_load(arg(module, _module_cls(), "module"), enc(path)))


def checkpoint_save(path, model, optimizer=None, scaler=None, epoch=0, step=0):
    """A training checkpoint: model state, optimizer momentum buffers/lr/step count, the
    scaler's state and the position (epoch, step)."""
    from .amp import GradScaler
    from .optim import Optimizer
    check(lib.dlt_checkpoint_save(enc(path), arg(model, _module_cls(), "model"),
                                  arg(optimizer, Optimizer, "optimizer", optional=True),
                                  arg(scaler, GradScaler, "scaler", optional=True),
                                  int(epoch), int(step)))


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
