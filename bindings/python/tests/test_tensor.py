"""Tensors through the binding: bytes, buffers and numpy round trips, conversions, fills."""

import array
import math
import os
import struct

import dltrain

from util import cpu, numpy_or_skip


def test_bytes_round_trip_every_dtype():
    ctx = cpu()
    cases = [("f32", "f", [1.5, -2.25, 3.0e-3, 1e30, -0.0, 7.0]),
             ("f16", "e", [1.5, -2.25, 0.099975586, 65504.0, -0.0, 6.1035156e-05]),
             ("i32", "i", [1, -2, 2 ** 31 - 1, -(2 ** 31), 0, 42]),
             ("i64", "q", [1, -2, 2 ** 62, -(2 ** 63), 0, 42]),
             ("u8", "B", [0, 1, 127, 128, 254, 255])]
    for name, code, vals in cases:
        raw = struct.pack("<6" + code, *vals)
        t = dltrain.from_buffer(raw, (2, 3), name, ctx=ctx)
        assert t.shape == (2, 3) and t.dtype == dltrain.dtype(name) and t.numel == 6
        assert t.nbytes == len(raw), (name, t.nbytes)
        assert t.tobytes() == raw, name
        back = struct.unpack("<6" + code, t.tobytes())
        assert list(back) == [struct.unpack("<" + code, struct.pack("<" + code, v))[0]
                              for v in vals], name
        # element reads go through dlt_tensor_get in logical order
        assert t.get(4) == back[4] and t.get(1) == back[1], name


def test_bf16_packing_rounds_to_nearest_even():
    ctx = cpu()
    # 1 + 2^-8 lies halfway between bf16 1.0 and 1.0078125: even wins (1.0);
    # 1 + 3*2^-8 is halfway between 1.0078125 and 1.015625: even wins (1.015625)
    t = dltrain.tensor([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -3.0, 0.1], dtype="bf16", ctx=ctx)
    assert t.dtype == dltrain.bfloat16 and t.nbytes == 8
    assert t.tolist() == [1.0, 1.015625, -3.0, 0.10009765625], t.tolist()
    # the library's own reading of the same bytes agrees
    assert [t.get(i) for i in range(4)] == t.tolist()
    # and its cast from f32 rounds the same way
    f = dltrain.tensor([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -3.0, 0.1], dtype="f32", ctx=ctx)
    assert f.astype("bf16").tobytes() == t.tobytes()


def test_writable_buffers_are_used_in_place():
    ctx = cpu()
    src = array.array("f", [float(i) / 4 for i in range(12)])
    t = dltrain.from_buffer(src, (3, 4), ctx=ctx)
    assert t.tolist() == [[i / 4 for i in range(r * 4, r * 4 + 4)] for r in range(3)]
    # tensor() infers the dtype of an array.array of int64
    ti = dltrain.tensor(array.array("q", [5, -6, 7]), shape=(3,), ctx=ctx)
    assert ti.dtype == dltrain.int64 and ti.tolist() == [5, -6, 7]
    # copy_to writes straight into a caller's buffer
    out = bytearray(48)
    t.copy_to(out)
    assert bytes(out) == src.tobytes()
    dst = array.array("f", [0.0] * 12)
    t.copy_to(dst)
    assert dst == src
    # copy_from takes bytes, bytearray, memoryview slices
    t.copy_from(memoryview(bytearray(struct.pack("<12f", *range(12)))))
    assert t.get(11) == 11.0
    t.copy_from(struct.pack("<12f", *[2.0] * 12))
    assert t.tolist()[2][3] == 2.0


def test_empty_and_zero_d_tensors():
    ctx = cpu()
    e = dltrain.zeros((0, 5), ctx=ctx)
    assert e.shape == (0, 5) and e.numel == 0 and e.nbytes == 0 and e.tobytes() == b""
    s = dltrain.tensor(3.5, ctx=ctx)
    assert s.shape == () and s.ndim == 0 and s.item() == 3.5 and s.tolist() == 3.5
    assert float(s) == 3.5


def test_fills_random_and_seed_reproducibility():
    ctx = cpu()
    z = dltrain.zeros((2, 3), ctx=ctx)
    assert z.tolist() == [[0.0] * 3] * 2
    assert dltrain.full((4,), 2.5, ctx=ctx).tolist() == [2.5] * 4
    assert dltrain.ones((2,), dtype="i32", ctx=ctx).tolist() == [1, 1]
    ctx.set_seed(1234)
    a = dltrain.rand((1000,), low=-1.0, high=2.0, ctx=ctx).tolist()
    ctx.set_seed(1234)
    b = dltrain.rand((1000,), low=-1.0, high=2.0, ctx=ctx).tolist()
    assert a == b
    assert all(-1.0 <= v < 2.0 for v in a)
    assert abs(sum(a) / len(a) - 0.5) < 0.1
    seed, offset = ctx.get_seed()
    assert seed == 1234 and offset > 0
    n = dltrain.randn((4000,), mean=3.0, std=2.0, ctx=ctx).tolist()
    m = sum(n) / len(n)
    sd = math.sqrt(sum((v - m) ** 2 for v in n) / len(n))
    assert abs(m - 3.0) < 0.15 and abs(sd - 2.0) < 0.15, (m, sd)


def test_conversions_formats_and_contexts():
    ctx = cpu()
    other = cpu()
    vals = [[[[float(n * 100 + c * 10 + h * 2 + w) for w in range(2)] for h in range(2)]
              for c in range(3)] for n in range(2)]
    t = dltrain.tensor(vals, ctx=ctx)
    cl = t.to_format("channels_last")
    assert cl.is_channels_last and cl.shape == (2, 3, 2, 2)
    assert cl.tolist() == vals  # logical order is preserved
    # memory order of a channels-last tensor is NHWC
    nhwc = [vals[n][c][h][w] for n in range(2) for h in range(2) for w in range(2)
            for c in range(3)]
    assert list(struct.unpack("<24f", cl.tobytes())) == nhwc
    moved = cl.to_ctx(other)
    assert moved.ctx is other and moved.tolist() == vals and moved.is_channels_last
    h = t.astype("f16")
    assert h.dtype == dltrain.float16 and h.tolist() == vals
    i = t.astype(dltrain.int32)
    assert i.tolist() == [[[[int(v) for v in r] for r in c] for c in n] for n in vals]
    dst = dltrain.zeros((2, 3, 2, 2), ctx=other)
    dst.copy_(t)
    assert dst.tolist() == vals
    r = t.reshape(6, -1)
    assert r.shape == (6, 4) and r.tolist()[5] == vals[1][2][0] + vals[1][2][1]
    assert t.flatten(1).shape == (2, 12)


def test_numpy_round_trip():
    np = numpy_or_skip()
    ctx = cpu()
    for dt in (np.float32, np.float16, np.int32, np.int64, np.uint8):
        a = (np.arange(24).reshape(2, 3, 4) * 3 - 7).astype(dt)
        t = dltrain.from_numpy(a, ctx=ctx)
        assert t.shape == (2, 3, 4) and t.dtype.numpy_name == np.dtype(dt).name
        b = t.numpy()
        assert b.dtype == a.dtype and b.shape == a.shape and np.array_equal(a, b), dt
        assert b.ctypes.data != a.ctypes.data  # a new array, not a view of the input
    # non-contiguous and byte-swapped inputs are made contiguous/native first
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert np.array_equal(dltrain.from_numpy(a.T, ctx=ctx).numpy(), a.T)
    assert np.array_equal(dltrain.from_numpy(a.astype(">f4"), ctx=ctx).numpy(), a)
    # numpy's own protocol
    assert np.array_equal(np.asarray(dltrain.from_numpy(a, ctx=ctx)), a)
    # tensor(ndarray) converts to a requested dtype
    t = dltrain.tensor(np.arange(4, dtype=np.float64), dtype="f32", ctx=ctx)
    assert t.dtype == dltrain.float32 and t.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_numpy_channels_last_and_bf16():
    np = numpy_or_skip()
    ctx = cpu()
    a = np.random.RandomState(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    t = dltrain.from_numpy(a, "channels_last", ctx=ctx)
    assert t.is_channels_last and t.shape == (2, 3, 4, 5)
    assert t.tobytes() == np.ascontiguousarray(a.transpose(0, 2, 3, 1)).tobytes()
    back = t.numpy()
    assert back.shape == a.shape and np.array_equal(back, a)
    # an NHWC-strided view goes in without a copy on the Python side
    nhwc = np.ascontiguousarray(a.transpose(0, 2, 3, 1))
    t2 = dltrain.from_numpy(nhwc.transpose(0, 3, 1, 2), "channels_last", ctx=ctx)
    assert t2.tobytes() == nhwc.tobytes()
    b = t.astype("bf16").numpy()
    assert b.dtype == np.float32 and np.allclose(b, a, rtol=1e-2, atol=1e-2)


def test_from_numpy_rejects_unsupported_dtypes():
    np = numpy_or_skip()
    try:
        dltrain.from_numpy(np.zeros(3, dtype=np.float64), ctx=cpu())
    except TypeError as e:
        assert "float64" in str(e)
    else:
        raise AssertionError("float64 accepted")


def test_dtype_names_and_values():
    assert dltrain.dtype("float32") is dltrain.f32 and dltrain.dtype(1) is dltrain.f16
    assert dltrain.dtype("half") is dltrain.float16 and dltrain.dtype("bf16") == 2
    assert repr(dltrain.bfloat16) == "dltrain.bfloat16" and dltrain.bfloat16.name == "bf16"
    lib = dltrain._lib_handle
    for d in (dltrain.f32, dltrain.f16, dltrain.bf16, dltrain.i32, dltrain.i64, dltrain.u8):
        assert lib.dlt_dtype_size(d) == d.itemsize
        assert lib.dlt_dtype_name(d).decode() == d.name
    try:
        dltrain.dtype("float128")
    except ValueError:
        pass
    else:
        raise AssertionError("unknown dtype name accepted")


def test_context_properties_and_memory_stats():
    ctx = cpu()
    assert ctx.device == "cpu" and ctx.device_type == dltrain.DEVICE_CPU
    assert ctx.device_name == "cpu" and ctx.device_index == 0
    base = ctx.memory_stat("count")
    t = dltrain.empty((256, 256), ctx=ctx)
    assert ctx.memory_allocated() >= 256 * 256 * 4
    assert ctx.memory_stat(dltrain.MEM_ALLOC_COUNT) == base + 1
    del t
    assert ctx.memory_stat(dltrain.MEM_ALLOC_COUNT) == base
    assert ctx.max_memory_allocated() >= 256 * 256 * 4
    ctx.reset_peak_memory_stats()
    assert ctx.max_memory_allocated() == ctx.memory_allocated()
    ctx.empty_cache()
    ctx.synchronize()
    ctx.wait_plans()  # a no-op on the CPU: nothing is built in the background
    ctx.check()
    ctx.set_deterministic(True)
    ctx.set_allow_tf32(False)
    # flash: torch.backends.cuda.enable_flash_sdp's counterpart, on by default as in PyTorch
    assert ctx.flash_sdp_enabled() is True
    ctx.enable_flash_sdp(False)
    assert ctx.flash_sdp_enabled() is False
    ctx.enable_flash_sdp(True)
    assert ctx.flash_sdp_enabled() is True
    # cudnn: torch.backends.cuda.enable_cudnn_sdp's counterpart, on by default
    assert ctx.cudnn_sdp_enabled() is True
    ctx.enable_cudnn_sdp(False)
    assert ctx.cudnn_sdp_enabled() is False
    ctx.enable_cudnn_sdp(True)
    assert ctx.cudnn_sdp_enabled() is True
    # torch.backends.cudnn.benchmark's counterpart, off by default (unless DLT_CUDNN_AUTOTUNE=1)
    if os.environ.get("DLT_CUDNN_AUTOTUNE") is None:
        assert ctx.cudnn_benchmark_enabled() is False
    ctx.set_cudnn_benchmark(True)
    assert ctx.cudnn_benchmark_enabled() is True
    ctx.set_cudnn_benchmark(False)
    assert ctx.cudnn_benchmark_enabled() is False


def test_current_context_and_factories():
    a = cpu()
    with a:
        assert dltrain.current_context() is a
        t = dltrain.zeros(3)
        assert t.ctx is a
        b = cpu()
        with b:
            assert dltrain.zeros(1).ctx is b
        assert dltrain.current_context() is a
    assert dltrain.current_context() is not a
    assert a.tensor([1, 2]).ctx is a and a.zeros(2).ctx is a


def test_operators_are_the_ops():
    ctx = cpu()
    a = dltrain.tensor([1.0, -2.0, 3.0], ctx=ctx)
    b = dltrain.tensor([0.5, 0.5, 0.5], ctx=ctx)
    assert (a + b).tolist() == [1.5, -1.5, 3.5]
    assert (a - b).tolist() == [0.5, -2.5, 2.5]
    assert (a * 2).tolist() == [2.0, -4.0, 6.0] and (2 * a).tolist() == [2.0, -4.0, 6.0]
    assert (a / 4).tolist() == [0.25, -0.5, 0.75] and (-a).tolist() == [-1.0, 2.0, -3.0]
    assert a.relu().tolist() == [1.0, 0.0, 3.0]
    assert a.sum().item() == 2.0 and abs(a.mean().item() - 2.0 / 3.0) < 1e-7
    s = dltrain.tensor([3.0], ctx=ctx)
    assert (a * s).tolist() == [3.0, -6.0, 9.0]
    if dltrain.is_implemented("dlt_cast"):
        assert a.half().dtype == dltrain.f16 and a.half().float().tolist() == a.tolist()


def test_repr_len_and_closed_tensors():
    ctx = cpu()
    t = dltrain.zeros((4, 2), ctx=ctx)
    assert len(t) == 4 and repr(t) == ("tensor([[0., 0.],\n        [0., 0.],\n"
                                       "        [0., 0.],\n        [0., 0.]])")
    t.close()
    assert t.closed and "released" in repr(t)
    try:
        t.numel
    except ValueError as e:
        assert "closed" in str(e)
    else:
        raise AssertionError("closed tensor usable")
    t.close()  # twice is fine


class _Spy:
    """Wraps a C function of the loaded library and records the arguments of each call."""

    def __init__(self, name):
        self.name = name
        self.lib = dltrain._lib_handle
        self.real = getattr(self.lib, name)
        self.calls = []

    def __enter__(self):
        def spy(*args):
            self.calls.append(args)
            return self.real(*args)
        setattr(self.lib, self.name, spy)
        return self

    def __exit__(self, *exc):
        setattr(self.lib, self.name, self.real)


def _address(buf):
    import ctypes
    return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))


def test_host_buffers_reach_the_library_without_copies():
    ctx = cpu()
    ba = bytearray(struct.pack("<6f", *range(6)))
    with _Spy("dlt_tensor_from_host") as spy:
        dltrain.from_buffer(ba, (6,), ctx=ctx)
    assert spy.calls[0][5] == _address(ba), "from_buffer copied a writable buffer"
    out = bytearray(24)
    t = dltrain.from_buffer(ba, (6,), ctx=ctx)
    with _Spy("dlt_tensor_copy_to_host") as spy:
        t.copy_to(out)
    assert spy.calls[0][1] == _address(out), "copy_to staged through another buffer"


def test_numpy_arrays_reach_the_library_without_copies():
    np = numpy_or_skip()
    ctx = cpu()
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    with _Spy("dlt_tensor_from_host") as spy:
        t = dltrain.from_numpy(a, ctx=ctx)
    assert spy.calls[0][5] == a.ctypes.data, "from_numpy did not pass the array's buffer"
    with _Spy("dlt_tensor_copy_to_host") as spy:
        b = t.numpy()
    assert spy.calls[0][1] == b.ctypes.data, "numpy() did not copy into the array's buffer"
    assert np.array_equal(a, b)
