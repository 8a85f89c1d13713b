"""Failing calls raise DltError subclasses with the library's own code and message."""

import dltrain
import dltrain.functional as F
from dltrain import errors

from util import Skip, cpu, expect_error


def test_wrong_shapes_raise_invalid_argument_with_the_message():
    ctx = cpu()
    x = dltrain.zeros((4, 3), ctx=ctx)
    w = dltrain.zeros((5, 2), ctx=ctx)  # K mismatch: x has 3 columns, w 2
    e = expect_error(dltrain.InvalidArgument, errors.ERR_SHAPE, F.linear, x, w,
                     contains="dlt_linear")
    assert isinstance(e, ValueError) and isinstance(e, dltrain.DltError)
    assert e.message == dltrain.last_error()[1] and dltrain.last_error()[0] == errors.ERR_SHAPE
    assert "dlt_linear" in str(e) and "102" in str(e)
    a, b = dltrain.zeros((2, 3), ctx=ctx), dltrain.zeros((3, 2), ctx=ctx)
    expect_error(dltrain.InvalidArgument, errors.ERR_SHAPE, F.add, a, b, contains="dlt_add")
    expect_error(dltrain.InvalidArgument, None, F.reshape, a, (4, 2), contains="dlt_reshape")
    logits = dltrain.zeros((4, 3), ctx=ctx)
    targets = dltrain.tensor([0, 1, 2], ctx=ctx)  # 3 targets for 4 rows
    if dltrain.is_implemented("dlt_cross_entropy"):
        expect_error(dltrain.InvalidArgument, errors.ERR_SHAPE, F.cross_entropy, logits, targets,
                     contains="dlt_cross_entropy")


def test_none_arguments_reach_the_library_as_null():
    ctx = cpu()
    x = dltrain.zeros((2, 2), ctx=ctx)
    expect_error(dltrain.InvalidArgument, errors.ERR_NULL_POINTER, F.relu, None,
                 contains="dlt_relu: argument 'x' is NULL")
    expect_error(dltrain.InvalidArgument, errors.ERR_NULL_POINTER, F.add, x, None,
                 contains="'b' is NULL")
    expect_error(dltrain.InvalidArgument, errors.ERR_NULL_POINTER, dltrain.backward, None,
                 contains="dlt_backward")
    expect_error(dltrain.InvalidArgument, errors.ERR_NULL_POINTER, F.linear, x, None,
                 contains="dlt_linear")
    # a wrong Python type is a TypeError before any C call
    try:
        F.relu("x")
    except TypeError as e:
        assert "Tensor" in str(e)
    else:
        raise AssertionError("a str was accepted as a tensor")


def test_bad_dtype_and_format_values():
    ctx = cpu()
    e = expect_error(dltrain.InvalidArgument, errors.ERR_DTYPE, dltrain.empty, (2,), dtype=99,
                     ctx=ctx, contains="unknown dtype 99")
    assert e.message.startswith("dlt_tensor_empty")
    expect_error(dltrain.InvalidArgument, errors.ERR_INVALID_ARGUMENT, dltrain.empty, (2, 3),
                 dtype="f32", memory_format=1, ctx=ctx, contains="channels-last needs a 4-D tensor")
    expect_error(dltrain.InvalidArgument, errors.ERR_INVALID_ARGUMENT, dltrain.empty, (2, -3),
                 ctx=ctx, contains="negative")
    ints = dltrain.tensor([1, 2], ctx=ctx)
    if dltrain.is_implemented("dlt_relu"):
        expect_error(dltrain.InvalidArgument, errors.ERR_DTYPE, F.relu, ints)


def test_host_buffer_of_the_wrong_size():
    ctx = cpu()
    expect_error(dltrain.InvalidArgument, errors.ERR_INVALID_ARGUMENT, dltrain.from_buffer,
                 b"\0" * 10, (2, 2), ctx=ctx, contains="the host buffer has 10 bytes")
    t = dltrain.zeros((2, 2), ctx=ctx)
    expect_error(dltrain.InvalidArgument, errors.ERR_INVALID_ARGUMENT, t.copy_to,
                 bytearray(3), contains="dlt_tensor_copy_to_host")


def test_cuda_context_without_a_gpu_raises_no_device():
    if dltrain.cuda_device_count() > 0:
        raise Skip("a CUDA device is present (%d)" % dltrain.cuda_device_count())
    e = expect_error(dltrain.NoDevice, errors.ERR_NO_DEVICE, dltrain.Context, "cuda")
    assert isinstance(e, dltrain.NotSupported)
    assert e.message.startswith("dlt_ctx_create: ") and len(e.message) > 30, e.message
    expect_error(dltrain.NoDevice, errors.ERR_NO_DEVICE, dltrain.Context, "cuda:1")


def test_invalid_device_and_index():
    expect_error(dltrain.InvalidArgument, errors.ERR_INVALID_ARGUMENT, dltrain.Context, 7,
                 contains="unknown device_type 7")
    try:
        dltrain.Context("tpu")
    except ValueError as e:
        assert "tpu" in str(e)
    else:
        raise AssertionError("unknown device name accepted")


def test_objects_from_different_contexts():
    a = dltrain.zeros((2,), ctx=cpu())
    b = dltrain.zeros((2,), ctx=cpu())
    expect_error(dltrain.InvalidArgument, errors.ERR_CONTEXT_MISMATCH, F.add, a, b,
                 contains="different contexts")


def test_backward_twice_is_invalid_state():
    ctx = cpu()
    w = dltrain.tensor([1.0, 2.0], ctx=ctx).requires_grad_()
    loss = (w * 3.0).sum()
    loss.backward()
    expect_error(dltrain.InvalidArgument, errors.ERR_INVALID_STATE, loss.backward,
                 contains="dlt_backward")
    # nothing was recorded for a plain tensor
    plain = dltrain.zeros((1,), ctx=ctx)
    expect_error(dltrain.InvalidArgument, errors.ERR_INVALID_STATE, plain.backward)


def test_injected_allocation_failure_is_out_of_memory():
    ctx = cpu()
    ctx.testing_fail_alloc(1)
    e = expect_error(dltrain.OutOfMemory, errors.ERR_OUT_OF_MEMORY, dltrain.zeros, (16,), ctx=ctx)
    assert isinstance(e, MemoryError) and e.message
    ctx.testing_fail_alloc(0)
    assert dltrain.zeros((16,), ctx=ctx).numel == 16  # and the context still works


def test_autocast_end_without_begin():
    ctx = cpu()
    expect_error(dltrain.InvalidArgument, errors.ERR_INVALID_STATE, dltrain.amp.autocast_end,
                 ctx, contains="dlt_autocast_end")


def test_exception_classes_by_kind():
    cases = {100: dltrain.InvalidArgument, 105: dltrain.InvalidArgument,
             200: dltrain.NotSupported, 201: dltrain.NoDevice, 300: dltrain.OutOfMemory,
             301: dltrain.OutOfMemory, 400: dltrain.DeviceError, 403: dltrain.DeviceError,
             500: dltrain.IOFormatError, 501: dltrain.IOFormatError, 900: dltrain.InternalError,
             777: dltrain.DltError}
    for code, cls in cases.items():
        e = errors.from_status(code, "msg %d" % code, "s")
        assert type(e) is cls and e.code == code and e.message == "msg %d" % code
    assert errors.from_status(301, "m").__class__ is dltrain.OutOfMemory
    import pickle
    e = pickle.loads(pickle.dumps(errors.from_status(102, "shape!", "shape mismatch")))
    assert isinstance(e, dltrain.InvalidArgument) and e.code == 102 and e.message == "shape!"
