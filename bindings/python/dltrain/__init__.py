"""dltrain: Python binding of libdltrain (ctypes; no compiler needed).

    import dltrain
    import dltrain.functional as F
    from dltrain.nn import resnet50

    ctx = dltrain.Context("cuda" if dltrain.cuda_is_available() else "cpu")
    with ctx:                                    # current context for the factories
        model = resnet50(10)
        opt = dltrain.optim.SGD(model.parameters(), lr=0.01)
        scaler = dltrain.amp.GradScaler()
        x = dltrain.rand((8, 3, 32, 32)); y = dltrain.tensor([0, 1, 2, 3, 4, 5, 6, 7])
        opt.zero_grad()
        with dltrain.autocast(dtype="f16"):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt); scaler.update()
        print(loss.item())

The library is found through DLTRAIN_LIBRARY, then libdltrain.so.1 on the loader's path,
then ctypes.util.find_library("dltrain"); its ABI generation must be ABI_VERSION (1).
Failing calls raise dltrain.DltError subclasses carrying the library's code and message.
Submodules: context, tensor, ops (= functional), autograd, nn, optim, amp, data, io, graph,
errors, dtypes. docs/python.md describes the binding and the ABI rules.
"""

from . import errors
from ._lib import ABI_VERSION, lib as _lib_handle
from .errors import (DltError, InvalidArgument, NotSupported, NoDevice, OutOfMemory,
                     DeviceError, IOFormatError, DistError, InternalError)
from .dtypes import (DType, float32, float16, half, bfloat16, int32, int64, uint8, f32, f16, bf16,
                     i32, i64, u8, CONTIGUOUS, CHANNELS_LAST, contiguous_format, channels_last,
                     preserve_format, MemoryFormat, dtype)
from .context import (Context, Event, version, version_string, abi_version, built_with_cuda,
                      set_num_threads, get_num_threads,
                      cuda_device_count, cuda_is_available, library_path, last_error,
                      clear_error, set_log_callback, set_default_context, current_context,
                      default_context,
                      DEVICE_CPU, DEVICE_CUDA, MEM_ALLOCATED, MEM_PEAK_ALLOCATED, MEM_RESERVED,
                      MEM_ALLOC_COUNT, LOG_ERROR, LOG_WARNING, LOG_INFO)
from ._tensor import Tensor, have_numpy
from ._factories import (empty, zeros, ones, full, rand, randn, tensor, from_buffer, from_numpy,
                         empty_like, zeros_like, ones_like, full_like, rand_like, randn_like)
from ._format import set_printoptions, get_printoptions
from ._ops_ext import cat, matmul
from .errors import ConcurrentUseError
from . import ops
from . import functional
from .autograd import (backward, zero_grad, no_grad, enable_grad, set_grad_enabled,
                       is_grad_enabled)
from . import autograd
from . import nn
from . import optim
from . import amp
from .amp import autocast, GradScaler
from . import data
from . import io
from .io import save, load, checkpoint_save, checkpoint_load, safetensors_save, load_tensor
from . import graph
from .graph import Graph
from . import device

__version__ = "0.1.0"


def is_implemented(c_function_name):
    """True when the loaded library exports the C function (parts of the API may be
    missing from a development build; calling them raises NotImplementedError)."""
    return _lib_handle.has(c_function_name)


def missing_functions():
    """Public C functions the loaded library does not export."""
    return list(_lib_handle.missing)
