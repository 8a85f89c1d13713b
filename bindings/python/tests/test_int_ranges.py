"""Issue 20 item 2: a Python int outside its C parameter's range raises (OverflowError, or
ValueError for a negative seed) before any C call. ctypes itself wraps silently: before the
fix zeros((2**64 + 3,)) gave shape (3,), resnet18(2**64 + 10) had 10 classes,
DataLoader(batch_size=2**64 + 4) used 4 and Context(seed=-1) got seed 2**64 - 1.
"""

import ctypes

import dltrain
from dltrain import _lib

from util import cpu, require

BIG = 2 ** 64


def _raises(exc, fn, *args, contains=None, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc as e:
        if contains is not None:
            assert contains in str(e), "%r lacks %r" % (str(e), contains)
        return e
    raise AssertionError("%s did not raise %s" % (getattr(fn, "__name__", fn), exc.__name__))


def test_shapes_out_of_int64_raise():
    ctx = cpu()
    _raises(OverflowError, dltrain.zeros, (BIG + 3,), ctx=ctx, contains="int64")
    _raises(OverflowError, dltrain.zeros, 2, 2 ** 63, ctx=ctx)
    _raises(OverflowError, dltrain.empty, [1, -2 ** 63 - 1], ctx=ctx)
    _raises(OverflowError, dltrain.from_buffer, b"", (BIG,), ctx=ctx)
    _raises(OverflowError, dltrain.zeros(4, ctx=ctx).reshape, BIG + 4)
    # negative sizes are the library's to refuse, with its message
    _raises(dltrain.InvalidArgument, dltrain.zeros, -1, ctx=ctx, contains="negative")
    # floats are not sizes
    _raises(TypeError, dltrain.zeros, 2.0, ctx=ctx)


def test_module_sizes_and_class_counts_out_of_range_raise():
    require("dlt_resnet_create", "dlt_linear_create")
    ctx = cpu()
    _raises(OverflowError, dltrain.nn.resnet18, BIG + 10, ctx=ctx)
    _raises(OverflowError, dltrain.nn.resnet50, BIG + 10, ctx=ctx)
    _raises(OverflowError, dltrain.nn.ResNet, BIG + 18, 10, ctx=ctx)  # depth is int32
    _raises(OverflowError, dltrain.nn.Linear, BIG + 4, 3, ctx=ctx)
    _raises(OverflowError, dltrain.nn.Conv2d, 3, 8, 3, stride=BIG + 1, ctx=ctx)


def test_batch_sizes_seeds_and_counts_of_data_raise():
    require("dlt_synthetic_dataset_create", "dlt_loader_create")
    ctx = cpu()
    _raises(OverflowError, dltrain.data.SyntheticDataset, BIG + 8, ctx=ctx)
    _raises(OverflowError, dltrain.data.SyntheticDataset, 8, num_classes=2 ** 32 + 3, ctx=ctx)
    _raises(OverflowError, dltrain.data.SyntheticDataset, 8, seed=-1, ctx=ctx)
    ds = dltrain.data.SyntheticDataset(8, num_classes=2, ctx=ctx)
    _raises(OverflowError, dltrain.data.DataLoader, ds, batch_size=BIG + 4)
    _raises(OverflowError, dltrain.data.DataLoader, ds, batch_size=2, seed=BIG)
    ld = dltrain.data.DataLoader(ds, batch_size=4)
    _raises(OverflowError, ld.start_epoch, BIG)
    _raises(OverflowError, ld.epoch_order, BIG + 1)
    _raises(IndexError, ds.__getitem__, BIG)
    assert len(ld) == 2


def test_context_seeds_out_of_range_raise():
    e = _raises(ValueError, dltrain.Context, "cpu", seed=-1, contains="2**64")
    assert not isinstance(e, OverflowError)
    _raises(OverflowError, dltrain.Context, "cpu", seed=BIG)
    ctx = cpu()
    _raises(ValueError, ctx.set_seed, -5)
    _raises(OverflowError, ctx.set_seed, BIG + 1)
    _raises(TypeError, ctx.set_seed, 1.5)
    ctx.set_seed(BIG - 1)  # the largest seed is fine
    assert ctx.get_seed() == (BIG - 1, 0)
    _raises(ValueError, dltrain.Context, "cpu", 2 ** 31)  # device index


def test_indices_out_of_range_raise():
    ctx = cpu()
    t = dltrain.tensor([1.0, 2.0], ctx=ctx)
    _raises(OverflowError, t.get, BIG)
    _raises(OverflowError, t.get, -BIG)
    w = t.requires_grad_()
    if dltrain.is_implemented("dlt_sgd_create"):
        opt = dltrain.optim.SGD([w], lr=0.1)
        _raises(OverflowError, opt.param, 2 ** 32)
        _raises(OverflowError, opt.momentum_buffer, -2 ** 31 - 1)
    if dltrain.is_implemented("dlt_linear_create"):
        lin = dltrain.nn.Linear(2, 2, ctx=ctx)
        _raises(OverflowError, lin.state_entry, 2 ** 32)


def test_every_integer_parameter_of_the_api_is_range_checked():
    """The whole table: each int32/int64/uint32/uint64/size_t parameter of every declared
    function, given a value just outside its C type, raises OverflowError naming the function
    before the library is called (the other arguments are never looked at)."""
    ranges = {ctypes.c_int32: (-2 ** 31 - 1, 2 ** 31), ctypes.c_int64: (-2 ** 63 - 1, 2 ** 63),
              ctypes.c_uint32: (-1, 2 ** 32), ctypes.c_uint64: (-1, BIG),
              ctypes.c_size_t: (-1, 2 ** (8 * ctypes.sizeof(ctypes.c_size_t)))}
    lib = _lib.lib
    checked = 0
    for name, (_, argtypes) in sorted(_lib._SIGNATURES.items()):
        if not lib.has(name):
            continue
        fn = getattr(lib, name)
        for i, a in enumerate(argtypes):
            if a not in ranges:
                continue
            for bad in ranges[a]:
                args = [None] * len(argtypes)
                args[i] = bad
                try:
                    fn(*args)
                except OverflowError as e:
                    assert name in str(e) and str(bad) in str(e), str(e)
                else:
                    raise AssertionError("%s accepted %d as argument %d" % (name, bad, i + 1))
                checked += 1
    assert checked > 100, checked
