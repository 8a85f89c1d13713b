"""Contexts: a device with its stream, allocator, random generator, tape and modes.

    ctx = dltrain.Context("cuda")          # or "cpu", "cuda:1", Context("cuda", 1)
    with ctx:                              # the current context for factories inside
        model = dltrain.nn.resnet50(10)
        x = dltrain.zeros((8, 3, 32, 32))

Every object made from a context keeps it alive; closing a context (ctx.close(), or the
garbage collector) destroys it once the last object made from it is gone.

Functions that create objects take `ctx=None`; None means the current context: the
innermost `with ctx:` block, else the one given to set_default_context, else the default
CPU context. A device given instead of a context (`device="cuda"`, `t.to("cuda:1")`) means
the current context when it is on that device, else the default context of that device:
one per device, made on first use and shared by the whole process, so tensors and modules
made for the same device always meet on one context.

Threads: a context and what is made from it belongs to one thread at a time; a call from a
second thread while one is in progress raises errors.ConcurrentUseError (see _guard.py).
"""

import contextlib
import ctypes
import operator
import threading

from . import _lib
from ._guard import Guard
from ._handle import Handle
from ._lib import lib, check

DEVICE_CPU = 0
DEVICE_CUDA = 1

MEM_ALLOCATED = 0
MEM_PEAK_ALLOCATED = 1
MEM_RESERVED = 2
MEM_ALLOC_COUNT = 3


def version():
    """Packed release number of the loaded library (major*10000 + minor*100 + patch)."""
    return int(lib.dlt_version())


def version_string():
    return lib.dlt_version_string().decode()


def abi_version():
    return int(lib.dlt_abi_version())


def built_with_cuda():
    return bool(lib.dlt_built_with_cuda())


def set_num_threads(n):
    """Threads of the CPU backend's parallel loops, process-wide (torch.set_num_threads);
    0 restores the default (OMP_NUM_THREADS, else the cores). OpenBLAS gets the same."""
    check(lib.dlt_set_num_threads(int(n)))


def get_num_threads():
    """The most threads a CPU parallel loop uses now (torch.get_num_threads)."""
    return int(lib.dlt_get_num_threads())


def cuda_device_count():
    """Number of visible CUDA devices (0 without CUDA support, driver or device)."""
    n = ctypes.c_int32()
    check(lib.dlt_cuda_device_count(ctypes.byref(n)))
    return n.value


def cuda_is_available():
    return cuda_device_count() > 0


def library_path():
    """Path (or name) the library was loaded from."""
    return lib.path


def last_error():
    """(code, message) of the last failing call on this thread."""
    return int(lib.dlt_last_error_code()), lib.last_error_message()


def clear_error():
    lib.dlt_clear_error()


# ---- log callback ----------------------------------------------------------------------
_log_keepalive = None


def set_log_callback(fn):
    """Installs fn(level, message) as the library's process-wide log callback (levels
    LOG_ERROR=0, LOG_WARNING=1, LOG_INFO=2); None removes it. Exceptions raised by fn are
    swallowed (they cannot cross the C library)."""
    global _log_keepalive
    if fn is None:
        lib.dlt_set_log_callback(_lib.LOG_FN(), None)
        _log_keepalive = None
        return

    def trampoline(level, message, user):
        try:
            fn(int(level), message.decode("utf-8", "replace") if message else "")
        except Exception:
            pass

    cb = _lib.LOG_FN(trampoline)
    lib.dlt_set_log_callback(cb, None)
    _log_keepalive = cb  # the C library holds the pointer: keep the thunk alive


LOG_ERROR = 0
LOG_WARNING = 1
LOG_INFO = 2


def _index(v, what):
    """operator.index(v) with a message naming what (floats and strings are refused)."""
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError("%s must be an integer, got %s" % (what, type(v).__name__)) from None


def check_seed(seed):
    """seed as an int in [0, 2**64 - 1] (ValueError for a negative seed, OverflowError above;
    PyTorch's manual_seed maps a negative seed s to s + 2**64: pass that value for its effect)."""
    seed = _index(seed, "seed")
    if seed < 0:
        raise ValueError("seed must be in [0, 2**64 - 1], got %d (for PyTorch's mapping of a "
                         "negative seed pass seed + 2**64)" % seed)
    if seed > 2 ** 64 - 1:
        raise OverflowError("seed must be in [0, 2**64 - 1], got %d" % seed)
    return seed


def _parse_device(device, index):
    """(DEVICE_CPU or DEVICE_CUDA, index) from "cpu", "cuda", "cuda:N", "gpu", or a device
    type constant with index."""
    if isinstance(device, Context):
        raise TypeError("device must be 'cpu' or 'cuda', not a Context")
    if index is not None:
        index = _index(index, "device index")
    if isinstance(device, int) and not isinstance(device, bool):
        idx = 0 if index is None else index  # an unknown type: the library says so
    else:
        if not isinstance(device, str):
            raise TypeError("device must be 'cpu', 'cuda' or 'cuda:N', got %s"
                            % type(device).__name__)
        s = device.strip().lower()
        idx = index
        if ":" in s:
            s, _, tail = s.partition(":")
            try:
                idx = int(tail)
            except ValueError:
                raise ValueError("unknown device %r (use 'cpu', 'cuda' or 'cuda:N')"
                                 % (device,)) from None
            if index is not None and idx != index:
                raise ValueError("device %r and index %d disagree" % (device, index))
        if s == "cpu":
            if idx not in (None, 0):
                raise ValueError("unknown device %r: the CPU is 'cpu' (index 0)" % (device,))
            device = DEVICE_CPU
        elif s in ("cuda", "gpu"):
            device = DEVICE_CUDA
        else:
            raise ValueError("unknown device %r (use 'cpu', 'cuda' or 'cuda:N')" % (device,))
        idx = 0 if idx is None else idx
    if not 0 <= idx <= 2 ** 31 - 1:
        raise ValueError("device index must be in [0, 2**31 - 1], got %d" % idx)
    return device, idx


def device_string(device_type, index):
    return "cpu" if device_type == DEVICE_CPU else "cuda:%d" % index


class Context(Handle):
    """A libdltrain context (dlt_ctx). Context("cpu"), Context("cuda"), Context("cuda:1")."""

    __slots__ = ("__dict__",)
    _destroy = staticmethod(lib.dlt_ctx_destroy)
    _what = "context"

    def __init__(self, device="cpu", index=None, seed=None):
        dev, idx = _parse_device(device, index)
        if seed is not None:
            seed = check_seed(seed)
        out = ctypes.c_void_p()
        check(lib.dlt_ctx_create(dev, idx, _lib.ABI_VERSION, ctypes.byref(out)))
        Handle.__init__(self, out.value,
                        guard=Guard("%s context at 0x%x" % (device_string(dev, idx), out.value)))
        self._depth = 0
        if seed is not None:
            self.set_seed(seed)

    # ---- device --------------------------------------------------------------------------
    @property
    def device_type(self):
        return int(lib.dlt_ctx_device_type(self.handle))

    @property
    def device_index(self):
        return int(lib.dlt_ctx_device_index(self.handle))

    @property
    def is_cuda(self):
        return self.device_type == DEVICE_CUDA

    @property
    def device(self):
        """"cpu" or "cuda:N"."""
        return "cpu" if self.device_type == DEVICE_CPU else "cuda:%d" % self.device_index

    @property
    def device_name(self):
        buf = ctypes.create_string_buffer(256)
        check(lib.dlt_ctx_device_name(self.handle, buf, len(buf)))
        return buf.value.decode("utf-8", "replace")

    def __repr__(self):
        if self.closed:
            return "<dltrain.Context closed>"
        return "<dltrain.Context %s (%s)>" % (self.device, self.device_name)

    def synchronize(self):
        """Waits for the context's queued work; raises the fault that poisoned it, if any."""
        check(lib.dlt_ctx_synchronize(self.handle))

    def wait_plans(self):
        """Waits until no cuDNN plan is being built in the background (see dlt_ctx_wait_plans)."""
        check(lib.dlt_ctx_wait_plans(self.handle))

    def check(self):
        """Raises the status that poisoned the context, if any."""
        check(lib.dlt_ctx_check(self.handle))

    @contextlib.contextmanager
    def range(self, name):
        """A named profiler range (NVTX on CUDA) around the body: `with ctx.range("step"):`."""
        check(lib.dlt_range_push(self.handle, name.encode()))
        try:
            yield self
        finally:
            check(lib.dlt_range_pop(self.handle))

    # ---- random generator and numerics ------------------------------------------------
    def set_seed(self, seed):
        """Seeds the Philox generator and resets its offset (same values on every device).
        seed is an int in [0, 2**64 - 1]."""
        check(lib.dlt_ctx_set_seed(self.handle, check_seed(seed)))

    manual_seed = set_seed

    def get_seed(self):
        """(seed, offset): the seed and how many counters were consumed since."""
        s, o = ctypes.c_uint64(), ctypes.c_uint64()
        check(lib.dlt_ctx_get_seed(self.handle, ctypes.byref(s), ctypes.byref(o)))
        return s.value, o.value

    def get_rng_state(self):
        """(seed, offset): the generator's whole state, what a resumed run restores with
        set_rng_state (torch.cuda.get_rng_state's counterpart). Eager random ops and graph
        replays share its one counter."""
        s, o = ctypes.c_uint64(), ctypes.c_uint64()
        check(lib.dlt_ctx_get_rng_state(self.handle, ctypes.byref(s), ctypes.byref(o)))
        return s.value, o.value

    def set_rng_state(self, state):
        """Restores a (seed, offset) pair from get_rng_state: later random ops draw what
        they would have drawn after the read, in graph replays too."""
        seed, offset = state
        check(lib.dlt_ctx_set_rng_state(self.handle, check_seed(seed), check_seed(offset)))

    def set_deterministic(self, on=True):
        check(lib.dlt_ctx_set_deterministic(self.handle, 1 if on else 0))

    def set_allow_tf32(self, on=True):
        check(lib.dlt_ctx_set_allow_tf32(self.handle, 1 if on else 0))

    # PyTorch's torch.backends.cuda.enable_flash_sdp / flash_sdp_enabled
    def enable_flash_sdp(self, enabled=True):
        """Lets scaled_dot_product_attention use the FlashAttention-2 kernels on CUDA
        (f16/bf16, head dim a multiple of 16 up to 128, sm_80+; the reference kernels run
        for every other call). On by default, as in PyTorch; the CPU ignores it."""
        check(lib.dlt_ctx_set_flash_sdp(self.handle, 1 if enabled else 0))

    def flash_sdp_enabled(self):
        """True when enable_flash_sdp is on for this context."""
        v = ctypes.c_int32()
        check(lib.dlt_ctx_flash_sdp_enabled(self.handle, ctypes.byref(v)))
        return bool(v.value)

    # PyTorch's torch.backends.cuda.enable_cudnn_sdp / cudnn_sdp_enabled
    def enable_cudnn_sdp(self, enabled=True):
        """Lets scaled_dot_product_attention use cuDNN's fused flash attention on CUDA, tried
        before the flash kernels (f16/bf16 without dropout, query and key lengths multiples
        of 128, head dim a multiple of 8 up to 128; not in deterministic mode, whose attention
        runs on the flash kernels). On by default; the CPU ignores it."""
        check(lib.dlt_ctx_set_cudnn_sdp(self.handle, 1 if enabled else 0))

    def cudnn_sdp_enabled(self):
        """True when enable_cudnn_sdp is on for this context."""
        v = ctypes.c_int32()
        check(lib.dlt_ctx_cudnn_sdp_enabled(self.handle, ctypes.byref(v)))
        return bool(v.value)

    # PyTorch's torch.backends.cudnn.benchmark
    def set_cudnn_benchmark(self, on=True):
        """Times cuDNN's candidate engines for each convolution shape first met after the
        call (outside a capture) and keeps the fastest; off: the heuristics' first choice.
        Off by default, as in PyTorch (DLT_CUDNN_AUTOTUNE=1 turns the default on); the
        CPU ignores it."""
        check(lib.dlt_ctx_set_cudnn_benchmark(self.handle, 1 if on else 0))

    def cudnn_benchmark_enabled(self):
        """True when set_cudnn_benchmark is on for this context."""
        v = ctypes.c_int32()
        check(lib.dlt_ctx_cudnn_benchmark_enabled(self.handle, ctypes.byref(v)))
        return bool(v.value)

    # ---- memory --------------------------------------------------------------------------
    def memory_stat(self, which):
        """One DLT_MEM_* statistic: MEM_ALLOCATED, MEM_PEAK_ALLOCATED, MEM_RESERVED,
        MEM_ALLOC_COUNT (or their names: "allocated", "peak", "reserved", "count")."""
        if isinstance(which, str):
            which = {"allocated": 0, "peak": 1, "peak_allocated": 1, "reserved": 2,
                     "count": 3, "alloc_count": 3}[which]
        v = ctypes.c_uint64()
        check(lib.dlt_memory_stat(self.handle, which, ctypes.byref(v)))
        return v.value

    def memory_allocated(self):
        return self.memory_stat(MEM_ALLOCATED)

    def max_memory_allocated(self):
        return self.memory_stat(MEM_PEAK_ALLOCATED)

    def memory_reserved(self):
        return self.memory_stat(MEM_RESERVED)

    def memory_stats(self):
        return {"allocated": self.memory_stat(0), "peak_allocated": self.memory_stat(1),
                "reserved": self.memory_stat(2), "alloc_count": self.memory_stat(3)}

    def reset_peak_memory_stats(self):
        check(lib.dlt_memory_reset_peak(self.handle))

    def empty_cache(self):
        check(lib.dlt_empty_cache(self.handle))

    # ---- testing hooks ---------------------------------------------------------------------
    def testing_fail_alloc(self, n):
        """Makes the n-th allocation from now fail (n <= 0: off)."""
        check(lib.dlt_testing_fail_alloc(self.handle, _index(n, "n")))

    def testing_alloc_count(self):
        v = ctypes.c_int64()
        check(lib.dlt_testing_alloc_count(self.handle, ctypes.byref(v)))
        return v.value

    # ---- grad mode and tape ---------------------------------------------------------------
    @property
    def grad_enabled(self):
        return bool(lib.dlt_grad_is_enabled(self.handle))

    def set_grad_enabled(self, enabled):
        """Turns recording on or off; returns the previous setting."""
        prev = ctypes.c_int32()
        check(lib.dlt_grad_set_enabled(self.handle, 1 if enabled else 0, ctypes.byref(prev)))
        return bool(prev.value)

    def no_grad(self):
        """Context manager: nothing is recorded inside (torch.no_grad)."""
        from .autograd import no_grad
        return no_grad(self)

    def tape_live_nodes(self):
        v = ctypes.c_int64()
        check(lib.dlt_tape_live_nodes(self.handle, ctypes.byref(v)))
        return v.value

    def tape_clear(self):
        check(lib.dlt_tape_clear(self.handle))

    @property
    def autocast_dtype(self):
        """dtype in force inside an autocast region, or None."""
        from .dtypes import dtype
        d = int(lib.dlt_autocast_dtype(self.handle))
        return None if d < 0 else dtype(d)

    # ---- tensor factories (the module-level ones with ctx=self) ----------------------------
    def empty(self, *size, **kwargs):
        from ._factories import empty
        return empty(*size, ctx=self, **kwargs)

    def zeros(self, *size, **kwargs):
        from ._factories import zeros
        return zeros(*size, ctx=self, **kwargs)

    def ones(self, *size, **kwargs):
        from ._factories import ones
        return ones(*size, ctx=self, **kwargs)

    def full(self, size, fill_value, **kwargs):
        from ._factories import full
        return full(size, fill_value, ctx=self, **kwargs)

    def tensor(self, data, dtype=None, **kwargs):
        from ._factories import tensor
        return tensor(data, dtype, ctx=self, **kwargs)

    def from_buffer(self, buf, shape, dtype="f32", format=0):
        from ._factories import from_buffer
        return from_buffer(buf, shape, dtype, format, ctx=self)

    def from_numpy(self, array, format=0):
        from ._factories import from_numpy
        return from_numpy(array, format, ctx=self)

    def rand(self, *size, **kwargs):
        from ._factories import rand
        return rand(*size, ctx=self, **kwargs)

    def randn(self, *size, **kwargs):
        from ._factories import randn
        return randn(*size, ctx=self, **kwargs)

    # ---- current context ----------------------------------------------------------------
    def __enter__(self):
        _state.stack().append(self)
        return self

    def __exit__(self, *exc):
        st = _state.stack()
        if st and st[-1] is self:
            st.pop()
        return False


class Event(Handle):
    """A point in a context's queue of work (a CUDA event on the GPU, the host clock on the
    CPU), for timing without synchronising every step:

        start, end = dltrain.Event(ctx), dltrain.Event(ctx)
        start.record(); run_steps(); end.record()
        print(start.elapsed_ms(end))          # synchronises on end
    """

    __slots__ = ("__dict__",)
    _destroy = staticmethod(lib.dlt_event_destroy)
    _what = "event"

    def __init__(self, ctx=None):
        ctx = resolve(ctx)
        out = ctypes.c_void_p()
        check(lib.dlt_event_create(ctx.handle, ctypes.byref(out)))
        Handle.__init__(self, out.value, (ctx,))
        self.ctx = ctx

    def record(self):
        """Marks the current end of the context's queue (enqueued)."""
        check(lib.dlt_event_record(self.handle))
        return self

    def elapsed_ms(self, end):
        """Milliseconds from this event to `end` (both recorded). Synchronises."""
        if not isinstance(end, Event):
            raise TypeError("end must be an Event")
        v = ctypes.c_double()
        check(lib.dlt_event_elapsed_ms(self.handle, end.handle, ctypes.byref(v)))
        return v.value

    elapsed_time = elapsed_ms


class _State(threading.local):
    def __init__(self):
        self._stack = []

    def stack(self):
        return self._stack


_state = _State()
_default = None
_default_lock = threading.Lock()
_per_device = {}  # (device type, index) -> the default Context of that device


def set_default_context(ctx):
    """Makes ctx the current context where no `with ctx:` block is open (None: back to the
    default CPU context). It also serves `device=` requests for its device."""
    global _default
    if ctx is not None and not isinstance(ctx, Context):
        raise TypeError("set_default_context takes a Context or None")
    _default = ctx


def default_context(device="cpu"):
    """The process-wide default context of a device ("cpu", "cuda", "cuda:N"), made on
    first use. Every implicit use of a device goes to this one context."""
    key = _parse_device(device, None)
    ctx = _per_device.get(key)
    if ctx is None or ctx.closed:
        with _default_lock:
            ctx = _per_device.get(key)
            if ctx is None or ctx.closed:
                ctx = Context(*key)
                _per_device[key] = ctx
    return ctx


def current_context():
    """The innermost `with ctx:` context of this thread, else the one given to
    set_default_context, else the default CPU context."""
    st = _state.stack()
    if st:
        return st[-1]
    d = _default
    if d is not None:
        return d
    return default_context("cpu")


def resolve(ctx):
    if ctx is None:
        return current_context()
    if not isinstance(ctx, Context):
        raise TypeError("ctx must be a dltrain.Context, got %s" % type(ctx).__name__)
    return ctx


def _matches(ctx, key):
    return ctx is not None and not ctx.closed and \
        (ctx.device_type, ctx.device_index) == key


def device_context(device=None, ctx=None):
    """The context for a `device=`/`ctx=` pair of keywords: ctx when given (device must
    agree), else for device None the current context, else the current (or default)
    context when it is on that device, else that device's default context."""
    if isinstance(device, Context):
        device, ctx = None, (ctx if ctx is not None else device)
    if isinstance(device, int) and not isinstance(device, bool):
        device = "cuda:%d" % device  # PyTorch: an int device is a CUDA index
    if ctx is not None:
        ctx = resolve(ctx)
        if device is not None and _parse_device(device, None) != \
                (ctx.device_type, ctx.device_index):
            raise ValueError("device=%r disagrees with ctx (%s)" % (device, ctx.device))
        return ctx
    if device is None:
        return current_context()
    key = _parse_device(device, None)
    st = _state.stack()
    if st and _matches(st[-1], key):
        return st[-1]
    if _matches(_default, key):
        return _default
    return default_context(device_string(*key))
