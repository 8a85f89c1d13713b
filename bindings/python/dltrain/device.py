"""Hardware reports (include/dltrain/device.h): device info, micro-benchmarks, and the
NVML GPU monitor.

Keys are enumerated from the library (dlt_*_key_name / _key_type until NULL), so keys a
newer library appends show up here without a change to the binding:

    info = dltrain.device.DeviceInfo(0)
    info.as_dict()         # {"name": "NVIDIA H200", "sm_count": 132, ...}
    with dltrain.device.GpuMonitor(0, interval_ms=100) as mon:
        train()
    print(mon.as_dict())   # utilisation, temperature, clocks, power, throttling

Values the library cannot give (NOT_SUPPORTED: unknown for this device, no sample yet)
read as None in as_dict().
"""

import ctypes

from . import errors
from ._handle import Handle
from ._lib import lib, check
from .context import Context, resolve

VALUE_INT = 0
VALUE_DOUBLE = 1
VALUE_STRING = 2

GEMM_FP32 = 0
GEMM_TF32 = 1
GEMM_FP16 = 2
GEMM_BF16 = 3
_GEMM_KINDS = {"fp32": 0, "f32": 0, "tf32": 1, "fp16": 2, "f16": 2, "bf16": 3}


def arch_cores(cc_major, cc_minor):
    """(CUDA cores per SM, tensor cores per SM) of a compute capability."""
    c, t = ctypes.c_int32(), ctypes.c_int32()
    check(lib.dlt_device_arch_cores(int(cc_major), int(cc_minor), ctypes.byref(c),
                                    ctypes.byref(t)))
    return c.value, t.value


def _keys(name_fn, type_fn):
    keys = []
    k = 0
    while True:
        n = name_fn(k)
        if n is None:
            return keys
        keys.append((k, n.decode(), int(type_fn(k))))
        k += 1


class _KeyedHandle(Handle):
    """Common reading code of DeviceInfo and GpuMonitor (key-based getters)."""

    __slots__ = ("__dict__",)
    _fn_int = _fn_double = _fn_string = _fn_key_name = _fn_key_type = None

    @classmethod
    def keys(cls):
        """[(key, name, value type)] known to the loaded library."""
        return _keys(cls._fn_key_name, cls._fn_key_type)

    def _key(self, key):
        if isinstance(key, str):
            for k, n, _ in self.keys():
                if n == key:
                    return k
            raise KeyError(key)
        return int(key)

    def get_int(self, key):
        v = ctypes.c_int64()
        check(self._fn_int(self.handle, self._key(key), ctypes.byref(v)))
        return v.value

    def get_double(self, key):
        v = ctypes.c_double()
        check(self._fn_double(self.handle, self._key(key), ctypes.byref(v)))
        return v.value

    def get_string(self, key):
        key = self._key(key)
        n = ctypes.c_size_t()
        check(self._fn_string(self.handle, key, None, 0, ctypes.byref(n)))
        buf = ctypes.create_string_buffer(n.value + 1)
        check(self._fn_string(self.handle, key, buf, len(buf), ctypes.byref(n)))
        return buf.value.decode("utf-8", "replace")

    def get(self, key):
        """The value of key (a name or an int) by its type."""
        k = self._key(key)
        t = self._fn_key_type(k)
        if t == VALUE_STRING:
            return self.get_string(k)
        if t == VALUE_DOUBLE:
            return self.get_double(k)
        return self.get_int(k)

    def __getitem__(self, key):
        return self.get(key)

    def as_dict(self):
        """Every key by name; None where the library reports the value as unknown."""
        d = {}
        for k, name, _ in self.keys():
            try:
                d[name] = self.get(k)
            except errors.NotSupported:
                d[name] = None
        return d


class DeviceInfo(_KeyedHandle):
    """Properties of CUDA device `index` and the CUDA library versions in use."""

    _destroy = staticmethod(lib.dlt_device_info_destroy)
    _what = "device info"
    _fn_int = staticmethod(lib.dlt_device_info_int)
    _fn_double = staticmethod(lib.dlt_device_info_double)
    _fn_string = staticmethod(lib.dlt_device_info_string)
    _fn_key_name = staticmethod(lib.dlt_device_info_key_name)
    _fn_key_type = staticmethod(lib.dlt_device_info_key_type)

    def __init__(self, index=0):
        out = ctypes.c_void_p()
        check(lib.dlt_device_info_get(int(index), ctypes.byref(out)))
        Handle.__init__(self, out.value)


def device_info(index=0):
    """DeviceInfo(index).as_dict()."""
    info = DeviceInfo(index)
    try:
        return info.as_dict()
    finally:
        info.close()


def bench_copy_bandwidth(nbytes, *, ctx=None):
    """Device-to-device copy bandwidth in GB/s (2 x nbytes moved per copy). Synchronises."""
    ctx = resolve(ctx)
    v = ctypes.c_double()
    check(lib.dlt_bench_copy_bandwidth(ctx.handle, int(nbytes), ctypes.byref(v)))
    return v.value


def bench_gemm(kind, m, n, k, *, ctx=None):
    """cuBLAS GEMM throughput in TFLOP/s; kind GEMM_FP32/TF32/FP16/BF16 or "fp16", ...
    Synchronises."""
    ctx = resolve(ctx)
    if isinstance(kind, str):
        kind = _GEMM_KINDS[kind.lower()]
    v = ctypes.c_double()
    check(lib.dlt_bench_gemm(ctx.handle, int(kind), int(m), int(n), int(k), ctypes.byref(v)))
    return v.value


class GpuMonitor(_KeyedHandle):
    """A background NVML sampler of GPU `index`. Always starts; `available` is False (with
    `unavailable_reason`) without NVML, driver or device. Use as a context manager to stop
    it at the end of a block."""

    _destroy = staticmethod(lib.dlt_gpu_monitor_destroy)
    _what = "GPU monitor"
    _fn_int = staticmethod(lib.dlt_gpu_monitor_int)
    _fn_double = staticmethod(lib.dlt_gpu_monitor_double)
    _fn_string = staticmethod(lib.dlt_gpu_monitor_string)
    _fn_key_name = staticmethod(lib.dlt_gpu_monitor_key_name)
    _fn_key_type = staticmethod(lib.dlt_gpu_monitor_key_type)

    def __init__(self, index=0, interval_ms=100):
        if isinstance(index, Context):
            index = index.device_index
        out = ctypes.c_void_p()
        check(lib.dlt_gpu_monitor_start(int(index), int(interval_ms), ctypes.byref(out)))
        Handle.__init__(self, out.value)

    def stop(self):
        """Stops sampling; the summaries stay readable."""
        check(lib.dlt_gpu_monitor_stop(self.handle))

    @property
    def available(self):
        return bool(self.get_int(0))

    @property
    def unavailable_reason(self):
        return self.get_string(18)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False
