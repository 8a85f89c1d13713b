"""Checkpoints for fine-tuning through the binding (dltrain.io): the SafeTensors file handle,
non-strict and prefixed loads with their LoadResult, the shape-mismatch error."""

import os
import struct
import tempfile

import dltrain
import dltrain.nn as nn
from dltrain import errors, io

from util import expect_error, require


def _seq(*pairs):
    s = nn.Sequential()
    for name, m in pairs:
        s.append(m, name=name)
    return s


def test_safetensors_handle_lists_and_reads():
    require("dlt_safetensors_open")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.safetensors")
        a = dltrain.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        b = dltrain.tensor([7, 8], dtype="i64")
        io.safetensors_save(path, {"a": a, "b": b})
        with io.SafeTensors(path) as f:
            assert f.keys() == ["b", "a"]  # data order: element size, largest first
            assert len(f) == 2 and "a" in f and "c" not in f
            assert f.dtype("a") == "F32" and f.dtype("b") == "I64"
            assert f.shape("a") == (2, 3) and f.shape("b") == (2,)
            assert f.metadata("format") == "pt" and f.metadata("nope") is None
            assert f.get_tensor("a").tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
            assert f.get_tensor("b").tolist() == [7, 8]
            expect_error(dltrain.InvalidArgument, errors.ERR_INVALID_ARGUMENT, f.get_tensor, "c",
                         contains="'c'")
        expect_error(ValueError, None, f.keys)  # closed
        # a header with a NUL inside a name is refused (issue 20 item 9)
        hdr = b'{"a\\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
        with open(path, "wb") as fh:
            fh.write(struct.pack("<Q", len(hdr)) + hdr + b"\x01")
        expect_error(dltrain.IOFormatError, errors.ERR_FORMAT, io.SafeTensors, path, contains="NUL")


def test_non_strict_and_prefixed_loads():
    require("dlt_module_load_ex")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.safetensors")
        src = _seq(("body", nn.Linear(4, 3)), ("head", nn.Linear(3, 1000)))
        src.save(path)
        dst = _seq(("body", nn.Linear(4, 3)), ("head", nn.Linear(3, 10)))
        head_before = dst.find("head.weight").tolist()
        # strict: a shape mismatch has its own status, and nothing changes
        expect_error(dltrain.InvalidArgument, errors.ERR_SHAPE, io.load, dst, path,
                     contains="head.weight")
        assert dst.find("head.weight").tolist() == head_before
        r = io.load(dst, path, strict=False)
        assert r == io.LoadResult([], [], ["head.weight", "head.bias"])
        assert dst.find("body.weight").tolist() == src.find("body.weight").tolist()
        assert dst.find("head.weight").tolist() == head_before
        # prefixes: the whole model's body into a body module, from an open file
        body = nn.Linear(4, 3)
        with io.SafeTensors(path) as f:
            assert io.load(body, f, file_prefix="body.") == io.LoadResult([], [], [])
        assert body.weight.tolist() == src.find("body.weight").tolist()
        # and a body file into the whole model
        bpath = os.path.join(d, "body.safetensors")
        body.save(bpath)
        other = _seq(("body", nn.Linear(4, 3)), ("head", nn.Linear(3, 10)))
        assert io.load(other, bpath, module_prefix="body.") == io.LoadResult([], [], [])
        assert other.find("body.bias").tolist() == src.find("body.bias").tolist()
