"""Datasets over numpy arrays (TensorDataset + DataLoader), record files, token data and
the character tokenizer through the binding.

Expectations come from numpy and from a Philox4x32-10 written here in Python (the shuffle
order and the token windows), never from the library itself.
"""

import os
import struct
import tempfile

import dltrain
from dltrain import errors
from dltrain.data import (CharTokenizer, DataLoader, Dataset, RecordDataset, TensorDataset,
                          TokenDataset, TokenLoader, char_dataset)

from util import cpu, expect_error, numpy_or_skip, REPO

M32 = 0xFFFFFFFF


def philox(seed, counter):
    """Philox4x32-10 with counter (words 0-1; 2-3 zero) and the 64-bit seed as key."""
    c = [counter & M32, counter >> 32, 0, 0]
    k0, k1 = seed & M32, seed >> 32
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c[3] ^ k1) & M32, p0 & M32]
    return c


def epoch_order(seed, epoch, n):
    keys = []
    for i in range(n):
        w = philox(seed, (epoch << 32) | i)
        keys.append(((w[0] << 32) | w[1], i))
    return [i for _, i in sorted(keys)]


def token_offset(seed, step, row, rng):
    w = philox(seed, (step << 32) | row)
    return (((w[0] << 32) | w[1]) * rng) >> 64


# ---- TensorDataset and DataLoader ----------------------------------------------------------
def test_dataset_base_class_explains_itself():
    np = numpy_or_skip()
    x, y = np.zeros((4, 2)), np.array([0, 1, 0, 1])
    try:
        Dataset(x, y)  # issue 19: this said "truth value of an array is ambiguous"
    except TypeError as e:
        assert "TensorDataset" in str(e), str(e)
    else:
        raise AssertionError("Dataset(x, y) did not raise")


def test_tensor_dataset_batches_match_numpy():
    np = numpy_or_skip()
    ctx = cpu()
    rng = np.random.default_rng(3)
    x = rng.standard_normal((23, 3, 2))  # float64: stored as float32
    y = rng.integers(0, 5, 23)
    ds = TensorDataset(x, y, ctx=ctx)
    assert len(ds) == 23 and ds.num_classes == int(y.max()) + 1
    assert ds.sample_shape == (3, 2) and ds.dtype == dltrain.f32 and not ds.is_image
    sample, label = ds[4]
    assert (sample == x[4].astype(np.float32)).all() and label == y[4]
    ld = DataLoader(ds, batch_size=5, shuffle=True, seed=11)
    assert len(ld) == 5
    for epoch in range(2):
        order = epoch_order(11, epoch, 23)
        assert ld.epoch_order(epoch) == order
        seen = 0
        for bx, by in ld:
            rows = order[seen:seen + bx.shape[0]]
            assert (bx.numpy() == x[rows].astype(np.float32)).all()
            assert by.dtype == dltrain.int64 and by.tolist() == y[rows].tolist()
            seen += bx.shape[0]
        assert seen == 23
    # seek: the position moves (host and device); the next batch is that batch of the epoch
    ld.start_epoch(0)
    assert ld.position == 0
    ld.seek(3)
    assert ld.position == 3
    bx, by = ld.next()
    rows = epoch_order(11, 0, 23)[15:20]
    assert (bx.numpy() == x[rows].astype(np.float32)).all() and ld.position == 4
    expect_error(dltrain.InvalidArgument, errors.ERR_INVALID_ARGUMENT, ld.seek, 6, contains="outside 0..5")
    assert ld.position == 4
    # drop_last and half precision, against numpy's rounding
    ld = DataLoader(ds, batch_size=5, drop_last=True, dtype="f16")
    sizes = []
    for bx, by in ld:
        assert bx.dtype == dltrain.f16
        want = x[len(sizes) * 5:len(sizes) * 5 + 5].astype(np.float32).astype(np.float16)
        assert (bx.numpy().view(np.uint16) == want.view(np.uint16)).all()
        sizes.append(bx.shape[0])
    assert sizes == [5, 5, 5, 5]


def test_tensor_dataset_features_only_and_dtypes():
    np = numpy_or_skip()
    ctx = cpu()
    x = np.arange(10, dtype=np.uint8).reshape(5, 2)
    ds = TensorDataset(x, ctx=ctx)
    assert ds.num_classes == 0 and not ds.has_labels and ds.dtype == dltrain.uint8
    assert len(ds[2]) == 1 and ds[2][0].tolist() == [4, 5]
    batches = [(len(b), b[0].shape) for b in DataLoader(ds, batch_size=2)]
    assert batches == [(1, (2, 2)), (1, (2, 2)), (1, (1, 2))]  # (x,) tuples
    first = DataLoader(ds, batch_size=5).next()
    assert first[0].dtype == dltrain.uint8 and first[0].tolist() == x.tolist()
    ld = DataLoader(ds, batch_size=5, dtype="f32")
    (bx,) = ld.next()
    assert bx.tolist() == x.astype(np.float32).tolist()  # values, not scaled
    # stored narrower, and from bf16 bit patterns
    d16 = TensorDataset(np.array([[0.1], [1 / 3]]), dtype="bf16", ctx=ctx)
    assert d16.dtype == dltrain.bf16
    (bb,) = DataLoader(d16, batch_size=2).next()
    assert bb.dtype == dltrain.bf16
    bits = np.array([[0x3DCD], [0x3EAB]], dtype=np.uint16)  # bf16(0.1), bf16(1/3)
    d2 = TensorDataset(bits, dtype="bf16", ctx=ctx)
    assert d2[0][0].tolist() == [0.10009765625]  # widened to float32 (numpy has no bf16)
    (b2,) = DataLoader(d2, batch_size=2, dtype="f32").next()
    assert b2.tolist() == [[0.10009765625], [0.333984375]]


def test_tensor_dataset_images():
    np = numpy_or_skip()
    ctx = cpu()
    x = (np.arange(6 * 2 * 3 * 4) * 37 % 256).astype(np.uint8).reshape(6, 2, 3, 4)
    y = np.array([0, 1, 2, 0, 1, 2], dtype=np.int32)
    ds = TensorDataset(x, y, image=True, ctx=ctx)
    assert ds.is_image and ds.sample_shape == (2, 3, 4)
    ld = DataLoader(ds, batch_size=6, normalize=((0.5, 0.25), (0.5, 2.0)))
    bx, by = ld.next()
    want = x.astype(np.float32) / np.float32(255)
    want = (want - np.array([0.5, 0.25], np.float32)[None, :, None, None]) / \
        np.array([0.5, 2.0], np.float32)[None, :, None, None]
    assert (bx.numpy() == want).all()
    try:
        ld.set_normalize((0.5, 0.5, 0.5), (1, 1, 1))  # three means for two channels
    except ValueError as e:
        assert "2 means" in str(e)
    else:
        raise AssertionError("a mean per channel was not enforced")
    DataLoader(ds, batch_size=2, crop_pad=1, hflip=True).next()
    plain = TensorDataset(x.astype(np.float32), y, ctx=ctx)
    expect_error(dltrain.InvalidArgument, errors.ERR_INVALID_ARGUMENT, DataLoader, plain,
                 batch_size=2, hflip=True, contains="image")


def test_tensor_dataset_refusals():
    np = numpy_or_skip()
    ctx = cpu()
    x = np.zeros((4, 3), np.float32)
    for bad, what in ((np.zeros((4, 3), np.int32), "int32"), (np.zeros((4, 3), bool), "bool")):
        try:
            TensorDataset(bad, ctx=ctx)
        except TypeError as e:
            assert what in str(e) and "float32" in str(e), str(e)
        else:
            raise AssertionError("%s features accepted" % what)
    try:
        TensorDataset(x, np.array([0.0, 1.0, 2.0, 3.0]), ctx=ctx)
    except TypeError as e:
        assert "integer class indices" in str(e)
    else:
        raise AssertionError("float labels accepted")
    expect_error(dltrain.InvalidArgument, errors.ERR_INVALID_ARGUMENT, TensorDataset, x,
                 np.array([0, 1, -1, 2]), ctx=ctx, contains="labels[2] = -1")
    expect_error(dltrain.InvalidArgument, errors.ERR_INVALID_ARGUMENT, TensorDataset, x,
                 np.array([0, 1, 2, 3]), num_classes=3, ctx=ctx, contains="labels[3] = 3")
    expect_error(dltrain.InvalidArgument, errors.ERR_SHAPE, TensorDataset, x,
                 np.array([0, 1, 2]), ctx=ctx, contains="[4]")
    expect_error(dltrain.InvalidArgument, errors.ERR_SHAPE, TensorDataset, x, np.array([0] * 4),
                 image=True, ctx=ctx)
    try:
        TensorDataset(ctx=ctx)
    except TypeError:
        pass
    else:
        raise AssertionError("TensorDataset() accepted")


def test_tensor_dataset_from_tensors_and_evaluation():
    np = numpy_or_skip()
    ctx = cpu(seed=1)
    with ctx:
        x = dltrain.from_numpy(np.eye(4, dtype=np.float32))
        y = dltrain.tensor([0, 1, 2, 3], dtype="i64")
        ds = TensorDataset(x, y)
        model = dltrain.nn.Linear(4, 4)
        w = dict(model.named_parameters())["weight"]
        w.copy_(dltrain.from_numpy(np.eye(4, dtype=np.float32) * 5))
        acc = dltrain.data.evaluate_accuracy(model, DataLoader(ds, batch_size=3))
    assert acc == 1.0, acc


def test_record_dataset_cifar100_layout():
    np = numpy_or_skip()
    ctx = cpu()
    rng = np.random.default_rng(5)
    recs = rng.integers(0, 256, (4, 3074), dtype=np.uint8)
    recs[:, 0] = [3, 19, 0, 7]    # coarse
    recs[:, 1] = [99, 0, 42, 7]   # fine
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "train.bin")
        recs.tofile(path)
        fine = RecordDataset(path, record_bytes=3074, label_offset=1, image_offset=2,
                             num_classes=100, ctx=ctx)
        coarse = RecordDataset([path], record_bytes=3074, image_offset=2, num_classes=20, ctx=ctx)
        assert [fine[i][1] for i in range(4)] == [99, 0, 42, 7]
        assert [coarse[i][1] for i in range(4)] == [3, 19, 0, 7]
        assert fine[2][0] == recs[2, 2:].tobytes() and fine.sample_shape == (3, 32, 32)
        expect_error(dltrain.IOFormatError, errors.ERR_FORMAT, RecordDataset, path,
                     record_bytes=3074, label_offset=1, image_offset=2, num_classes=20, ctx=ctx,
                     contains="train.bin")


# ---- token data ----------------------------------------------------------------------------
def _llmc_file(path, tokens, magic=20240520, version=1, count=None):
    header = [0] * 256
    header[0], header[1], header[2] = magic, version, len(tokens) if count is None else count
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def test_token_files_and_windows():
    np = numpy_or_skip()
    ctx = cpu()
    tokens = [(i * 7919 + 5) % 50257 for i in range(500)]
    with tempfile.TemporaryDirectory() as d:
        llmc, raw = os.path.join(d, "shard.bin"), os.path.join(d, "train.bin")
        _llmc_file(llmc, tokens)
        np.array(tokens, dtype="<u2").tofile(raw)
        a = TokenDataset(llmc, vocab_size=50257, ctx=ctx)
        b = TokenDataset(raw, vocab_size=50257, format="raw", ctx=ctx)
        assert len(a) == len(b) == 500 and a.vocab_size == 50257
        assert a.read().tolist() == tokens and b.read(498, 2).tolist() == tokens[498:]
        ld = TokenLoader(a, batch_size=4, block_size=16, seed=1337)
        for step in range(3):
            x, y = ld.next()
            assert x.shape == (4, 16) and x.dtype == dltrain.int64
            offs = [token_offset(1337, step, r, 500 - 16) for r in range(4)]
            assert ld.offsets(step) == offs
            assert x.tolist() == [tokens[o:o + 16] for o in offs]
            assert y.tolist() == [tokens[o + 1:o + 17] for o in offs]
        assert ld.position == 3
        ld.seek(1)
        x, _ = ld.next()
        assert x.tolist() == [tokens[o:o + 16] for o in ld.offsets(1)]
        l32 = TokenLoader(b, batch_size=2, block_size=8, seed=1337, dtype="i32")
        x, y = l32.next()
        assert x.dtype == dltrain.int32
        # malformed files: the file and the position named
        _llmc_file(llmc, tokens, magic=1234)
        expect_error(dltrain.IOFormatError, errors.ERR_FORMAT, TokenDataset, llmc, 50257,
                     ctx=ctx, contains="bad magic 1234")
        _llmc_file(llmc, tokens, count=501)
        expect_error(dltrain.IOFormatError, errors.ERR_FORMAT, TokenDataset, llmc, 50257,
                     ctx=ctx, contains="truncated")
        expect_error(dltrain.IOFormatError, errors.ERR_FORMAT, TokenDataset, raw, 50000,
                     format="raw", ctx=ctx, contains="not below the vocabulary size 50000")
        expect_error(dltrain.IOFormatError, errors.ERR_IO, TokenDataset,
                     os.path.join(d, "missing.bin"), 100, ctx=ctx, contains="missing.bin")
        try:
            TokenDataset(raw, 100, format="bin", ctx=ctx)
        except ValueError:
            pass
        else:
            raise AssertionError("format 'bin' accepted")


def test_token_datasets_from_arrays_and_synthetic():
    np = numpy_or_skip()
    ctx = cpu()
    ds = TokenDataset.from_numpy(np.arange(100) % 10, vocab_size=10, ctx=ctx)
    assert len(ds) == 100 and ds.read(0, 12).tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    expect_error(dltrain.InvalidArgument, errors.ERR_INVALID_ARGUMENT, TokenDataset.from_numpy,
                 np.arange(100), vocab_size=50, ctx=ctx, contains="token 50 is 50")
    try:
        TokenDataset.from_numpy(np.array([1, 70000]), vocab_size=65536, ctx=ctx)
    except ValueError as e:
        assert "token 1 is 70000" in str(e)
    else:
        raise AssertionError("70000 accepted as a uint16 token")
    s1 = TokenDataset.synthetic(1000, 300, seed=4, ctx=ctx)
    s2 = TokenDataset.synthetic(1000, 300, seed=4, ctx=ctx)
    s3 = TokenDataset.synthetic(1000, 300, seed=5, ctx=ctx)
    t1 = s1.read()
    assert (t1 == s2.read()).all() and not (t1 == s3.read()).all() and t1.max() < 300
    w = philox(4, (4 << 56) + 0)
    assert t1[:4].tolist() == [(w[k] * 300) >> 32 for k in range(4)]
    la, lb, lc = (TokenLoader(s1, 3, 10, seed=s) for s in (9, 9, 10))
    xa, xb, xc = la.next()[0].tolist(), lb.next()[0].tolist(), lc.next()[0].tolist()
    assert xa == xb and xa != xc
    expect_error(dltrain.InvalidArgument, errors.ERR_INVALID_ARGUMENT, TokenLoader, ds, 2, 100,
                 contains="at least 101")


def test_char_tokenizer_and_dataset():
    ctx = cpu()
    tok = CharTokenizer("hello world\n")
    assert tok.vocab_size == 9 and tok.chars == "\n dehlorw"
    assert tok.stoi["h"] == 4 and tok.itos[4] == "h"
    assert tok.encode("hello") == [4, 3, 5, 5, 6] and tok.decode([4, 3, 5, 5, 6]) == "hello"
    expect_error(dltrain.InvalidArgument, errors.ERR_INVALID_ARGUMENT, tok.encode, "help",
                 contains="U+0070")
    expect_error(dltrain.InvalidArgument, errors.ERR_INVALID_ARGUMENT, tok.decode, [1, 9],
                 contains="ids[1] = 9")
    u = CharTokenizer("h\u00e9llo\u20ac\U0001F600")
    assert u.chars == "hlo\u00e9\u20ac\U0001F600" and u.decode(u.encode("\u20ach\u00e9")) == "\u20ach\u00e9"
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "input.txt")
        with open(path, "wb") as f:
            f.write(b"ab\r\ncd\ref\ngh\r\n\xc3\xa9")
        with open(path) as f:  # what nanoGPT's prepare.py sees
            text = f.read()
        chars = sorted(set(text))
        n = len(text)
        t, train, val = char_dataset(path, ctx=ctx)
        assert t.chars == "".join(chars) and len(train) == int(n * 0.9) and len(val) == n - int(n * 0.9)
        stoi = {c: i for i, c in enumerate(chars)}
        assert list(train.read()) + list(val.read()) == [stoi[c] for c in text]
        assert CharTokenizer.from_file(path).chars == t.chars
        with open(path, "wb") as f:
            f.write(b"caf\xe9")
        expect_error(dltrain.IOFormatError, errors.ERR_FORMAT, char_dataset, path, ctx=ctx,
                     contains="byte offset 3")


def test_tiny_shakespeare():
    np = numpy_or_skip()
    path = os.path.join(REPO, "..", "shared", "data", "tinyshakespeare", "input.txt")
    if not os.path.exists(path):
        from util import Skip
        raise Skip("tiny Shakespeare not found")
    tok, train, val = char_dataset(path, ctx=cpu())
    with open(path) as f:
        text = f.read()
    chars = sorted(set(text))
    assert tok.vocab_size == 65 and tok.chars == "".join(chars)
    assert len(train) == 1003854 and len(val) == 111540
    stoi = {c: i for i, c in enumerate(chars)}
    ids = np.array([stoi[c] for c in text], dtype=np.uint16)
    assert (train.read() == ids[:1003854]).all() and (val.read() == ids[1003854:]).all()
    ld = TokenLoader(train, batch_size=64, block_size=256, seed=1337)
    x, y = ld.next()
    offs = ld.offsets(0)
    assert (x.numpy() == np.stack([ids[o:o + 256] for o in offs])).all()
    assert (y.numpy() == np.stack([ids[o + 1:o + 257] for o in offs])).all()
