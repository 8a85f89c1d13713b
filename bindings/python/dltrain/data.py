"""Datasets resident on the device and the batch loaders (include/dltrain/data.h).

    train = dltrain.data.CIFAR10("data/cifar-10-batches-bin", train=True)
    loader = dltrain.data.DataLoader(train, batch_size=256, shuffle=True)
    for x, y in loader:          # one epoch per `for`
        ...

    ds = dltrain.data.TensorDataset(np_x, np_y)        # your own arrays (PyTorch's name)
    for x, y in dltrain.data.DataLoader(ds, batch_size=64, shuffle=True):
        ...

    tok, train, val = dltrain.data.char_dataset("input.txt")   # nanoGPT's shakespeare_char
    batches = dltrain.data.TokenLoader(train, batch_size=64, block_size=256, seed=1337)
    x, y = batches.next()                              # int64 [64, 256] windows

Batches are borrowed from the loader: x and y live in buffers the loader reuses, so they
are valid until the next batch is taken (or the output settings change). The binding
enforces it: an older batch's Tensor objects are invalidated (using them raises
ValueError). Keep a copy (x.detach() is not one: use x.astype(x.dtype)) to hold values.
"""

import ctypes

from . import dtypes as _dt
from ._handle import Handle, arg
from ._lib import lib, check, enc
from .context import resolve
from ._tensor import Tensor, from_numpy

try:  # numpy is optional (TensorDataset and token arrays need it)
    import numpy as _np
except ImportError:  # pragma: no cover - depends on the interpreter
    _np = None

SPLIT_TRAIN = 0
SPLIT_TEST = 1
IMAGE_BYTES = 3 * 32 * 32
TOKENS_LLMC = 1  # llm.c token files (1024-byte header)
TOKENS_RAW = 2   # nanoGPT's headerless train.bin / val.bin


class Dataset(Handle):
    """A dataset in the context's memory: image records (CIFAR10, RecordDataset,
    TensorDataset(..., image=True)) or records of any shape and dtype (TensorDataset).

    The abstract base, as torch.utils.data.Dataset: make datasets with the classes below
    (arrays: TensorDataset(x, y))."""

    __slots__ = ("__dict__",)
    _destroy = staticmethod(lib.dlt_dataset_destroy)
    _what = "dataset"

    def __init__(self, *args, **kwargs):
        raise TypeError("dltrain.data.Dataset is the base class of the datasets; a dataset over "
                        "arrays is dltrain.data.TensorDataset(x, y) (or TensorDataset(x))")

    def _init_handle(self, ptr, ctx):
        Handle.__init__(self, ptr, (ctx,))
        self.ctx = ctx

    def __len__(self):
        return int(lib.dlt_dataset_size(self.handle))

    @property
    def num_classes(self):
        """Number of classes (0 for a dataset without labels)."""
        return int(lib.dlt_dataset_num_classes(self.handle))

    @property
    def has_labels(self):
        return self.num_classes > 0

    @property
    def sample_shape(self):
        """Shape of one sample ((3, 32, 32) for CIFAR-10)."""
        buf = (ctypes.c_int64 * 8)()
        n = lib.dlt_dataset_sample_shape(self.handle, buf, 8)
        return tuple(int(buf[i]) for i in range(n))

    @property
    def dtype(self):
        """Element dtype of the stored samples (uint8 for images)."""
        return _dt.dtype(int(lib.dlt_dataset_dtype(self.handle)))

    @property
    def sample_bytes(self):
        return int(lib.dlt_dataset_sample_bytes(self.handle))

    @property
    def is_image(self):
        """True for image records (ToTensor, Normalize and augmentation apply)."""
        return bool(lib.dlt_dataset_is_image(self.handle))

    def class_name(self, i):
        s = lib.dlt_dataset_class_name(self.handle, int(i))
        return s.decode() if s is not None else None

    @property
    def classes(self):
        return [self.class_name(i) for i in range(self.num_classes)]

    def get(self, index):
        """(bytes of the sample as stored - 3072 CHW bytes for CIFAR-10 -, label or None).
        Synchronises."""
        size = self.sample_bytes
        buf = ctypes.create_string_buffer(max(size, 1))
        label = ctypes.c_int32()
        check(lib.dlt_dataset_get(self.handle, int(index), buf, size, ctypes.byref(label)))
        return buf.raw[:size], (label.value if self.has_labels else None)

    def _index(self, index):
        n = len(self)
        index = int(index)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("dataset index %d out of range (size %d)" % (index, n))
        return index

    def __getitem__(self, index):
        return self.get(self._index(index))

    def __repr__(self):
        if self.closed:
            return "<dltrain.data.%s closed>" % type(self).__name__
        what = "%d classes" % self.num_classes if self.has_labels else "no labels"
        return "<dltrain.data.%s %d samples of %s %s, %s>" % (
            type(self).__name__, len(self), self.dtype.name, list(self.sample_shape), what)


def _open(fn, ctx, *args):
    out = ctypes.c_void_p()
    check(fn(ctx.handle, *args, ctypes.byref(out)))
    return out.value


class CIFAR10(Dataset):
    """The CIFAR-10 binary release in root (train: data_batch_1..5.bin present; test:
    test_batch.bin). Every file is validated on open."""

    def __init__(self, root, train=True, *, ctx=None):
        ctx = resolve(ctx)
        split = SPLIT_TRAIN if train else SPLIT_TEST
        self._init_handle(_open(lib.dlt_cifar10_open, ctx, enc(root), split), ctx)

    @classmethod
    def from_file(cls, path, *, ctx=None):
        """One CIFAR-10 binary file."""
        ctx = resolve(ctx)
        ds = Dataset.__new__(cls)
        ds._init_handle(_open(lib.dlt_cifar10_open_file, ctx, enc(path)), ctx)
        return ds


class SyntheticDataset(Dataset):
    """n random 3x32x32 images with labels 0..num_classes-1 from seed; learnable=True adds
    a fixed per-class pattern so a model can learn it."""

    def __init__(self, n, num_classes=10, seed=0, learnable=True, *, ctx=None):
        ctx = resolve(ctx)
        self._init_handle(_open(lib.dlt_synthetic_dataset_create, ctx, int(n), int(num_classes),
                                int(seed), 1 if learnable else 0), ctx)


# ---- datasets over arrays and record files -------------------------------------------------

class _TensorDatasetOptions(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("image", ctypes.c_int32),
                ("num_classes", ctypes.c_int32)]


class _RecordFileOptions(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("label_width", ctypes.c_int32),
                ("label_big_endian", ctypes.c_int32), ("num_classes", ctypes.c_int32),
                ("header_bytes", ctypes.c_int64), ("record_bytes", ctypes.c_int64),
                ("label_offset", ctypes.c_int64), ("image_offset", ctypes.c_int64),
                ("channels", ctypes.c_int32), ("height", ctypes.c_int32),
                ("width", ctypes.c_int32)]


def _need_numpy(what):
    if _np is None:
        raise ImportError("%s needs numpy (not importable by this interpreter)" % what)


def _features(x, dtype, ctx):
    """x (a Tensor, numpy array or nested sequence) as a Tensor on ctx in a sample dtype."""
    if isinstance(x, Tensor):
        t = x if x.ctx is ctx else x.to_ctx(ctx)
    else:
        _need_numpy("TensorDataset over arrays")
        a = _np.asarray(x)
        if a.dtype == _np.float64:
            a = a.astype(_np.float32)  # numpy's default float; the library has no float64
        if a.dtype == _np.uint16 and dtype is not None and _dt.dtype(dtype) == _dt.bfloat16:
            return _bf16_from_bits(a, ctx)
        if a.dtype not in (_np.float32, _np.float16, _np.uint8):
            raise TypeError("TensorDataset features must be float32, float16, bfloat16 or uint8 "
                            "(float64 is converted to float32), got numpy %s: convert them, e.g. "
                            "x.astype(numpy.float32)" % a.dtype)
        t = from_numpy(a, ctx=ctx)
    if dtype is not None and _dt.dtype(dtype) != t.dtype:
        t = t.astype(dtype)
    return t


def _bf16_from_bits(a, ctx):
    """A bf16 tensor from a numpy uint16 array of bf16 bit patterns."""
    from ._tensor import empty
    t = empty(a.shape, dtype="bf16", ctx=ctx)
    t.copy_from(_np.ascontiguousarray(a))
    return t


def _labels(y, ctx):
    if isinstance(y, Tensor):
        return y if y.ctx is ctx else y.to_ctx(ctx)
    _need_numpy("TensorDataset over arrays")
    a = _np.asarray(y)
    if a.dtype.kind not in "iu":
        raise TypeError("labels must be integer class indices, got numpy %s%s" % (
            a.dtype, " (float targets are not supported: labels index classes)"
            if a.dtype.kind == "f" else ""))
    if a.dtype.kind == "u" and a.size and int(a.max()) > 2 ** 62:
        raise ValueError("label %d is not a class index" % int(a.max()))
    return from_numpy(a.astype(_np.int64, copy=False), ctx=ctx)


class TensorDataset(Dataset):
    """PyTorch's TensorDataset over your arrays: TensorDataset(x, y) or TensorDataset(x).

    x: numpy array (or Tensor, or nested lists) [N, ...] of float32, float16 or uint8
    (float64 becomes float32; dtype="bf16"/"f16" stores it narrower; a uint16 array with
    dtype="bf16" is taken as bf16 bit patterns). y: integer class indices [N] (any integer
    dtype), checked to be in 0..num_classes-1 (num_classes=0: the largest label + 1).
    image=True: uint8 [N, C, H, W] pictures, which loaders scale by 1/255 (ToTensor) and
    may normalise and augment, as CIFAR10's.

    The data is copied once into the context's memory; a DataLoader gathers its batches
    there. Items: ds[i] is (numpy sample, int label) or (numpy sample,).
    """

    def __init__(self, *tensors, image=False, num_classes=0, dtype=None, ctx=None):
        if len(tensors) not in (1, 2):
            raise TypeError("TensorDataset(x) or TensorDataset(x, y): got %d arrays" % len(tensors))
        if ctx is None:
            first = tensors[0]
            ctx = first.ctx if isinstance(first, Tensor) else resolve(None)
        ctx = resolve(ctx)
        x = _features(tensors[0], dtype, ctx)
        y = _labels(tensors[1], ctx) if len(tensors) == 2 else None
        o = _TensorDatasetOptions()
        lib.dlt_tensor_dataset_options_init(ctypes.addressof(o), ctypes.sizeof(o))
        o.image = 1 if image else 0
        o.num_classes = int(num_classes)
        out = ctypes.c_void_p()
        check(lib.dlt_tensor_dataset_create(x.handle, y.handle if y is not None else None,
                                            ctypes.addressof(o), ctypes.byref(out)))
        self._init_handle(out.value, ctx)

    def __getitem__(self, index):
        _need_numpy("TensorDataset items")
        raw, label = self.get(self._index(index))
        dt = self.dtype
        if dt == _dt.bfloat16:
            a = (_np.frombuffer(raw, _np.uint16).astype(_np.uint32) << 16).view(_np.float32)
        else:
            a = _np.frombuffer(raw, _np.dtype(dt.numpy_name)).copy()
        a = a.reshape(self.sample_shape)
        return (a,) if label is None else (a, label)


class RecordDataset(Dataset):
    """Binary files of fixed-size records (dlt_record_files_open): each file is header_bytes,
    then records of record_bytes holding a uint8 image [channels, height, width] at
    image_offset and an unsigned label of label_width bytes (0: none) at label_offset.
    The defaults are CIFAR-10's layout. CIFAR-100 (fine labels):
        RecordDataset("train.bin", record_bytes=3074, label_offset=1, image_offset=2,
                      num_classes=100)
    """

    def __init__(self, paths, *, record_bytes=3073, image_offset=1, channels=3, height=32,
                 width=32, label_offset=0, label_width=1, label_big_endian=False,
                 num_classes=10, header_bytes=0, ctx=None):
        ctx = resolve(ctx)
        if isinstance(paths, (str, bytes)) or not hasattr(paths, "__iter__"):
            paths = [paths]
        encoded = [enc(p) for p in paths]
        arr = (ctypes.c_char_p * max(len(encoded), 1))(*encoded)
        o = _RecordFileOptions()
        lib.dlt_record_file_options_init(ctypes.addressof(o), ctypes.sizeof(o))
        o.record_bytes, o.image_offset = int(record_bytes), int(image_offset)
        o.channels, o.height, o.width = int(channels), int(height), int(width)
        o.label_offset, o.label_width = int(label_offset), int(label_width)
        o.label_big_endian = 1 if label_big_endian else 0
        o.num_classes, o.header_bytes = int(num_classes), int(header_bytes)
        out = ctypes.c_void_p()
        check(lib.dlt_record_files_open(ctx.handle, arr, len(encoded), ctypes.addressof(o),
                                        ctypes.byref(out)))
        self._init_handle(out.value, ctx)


class DataLoader(Handle):
    """Batches of a Dataset, optionally shuffled per epoch (reproducible from seed), as
    PyTorch's DataLoader(dataset, batch_size, shuffle, drop_last) with the default collate.

    Keyword options map to the setters: dtype/memory_format/label_dtype (set_output),
    normalize=(mean, std) (set_normalize), crop_pad/hflip (set_augment; images only).
    Default output: int64 labels; images f32 contiguous NCHW (byte/255); other samples in
    their own dtype. Batches are (x, y), or (x,) for a dataset without labels.
    """

    __slots__ = ("__dict__",)
    _destroy = staticmethod(lib.dlt_loader_destroy)
    _what = "loader"

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, seed=0, *,
                 dtype=None, memory_format=None, label_dtype=None, normalize=None,
                 crop_pad=0, hflip=False):
        out = ctypes.c_void_p()
        check(lib.dlt_loader_create(arg(dataset, Dataset, "dataset"), int(batch_size),
                                    1 if shuffle else 0, 1 if drop_last else 0, int(seed),
                                    ctypes.byref(out)))
        Handle.__init__(self, out.value, (dataset,))
        self.dataset = dataset
        self.ctx = dataset.ctx
        self._batch = ()
        self._epoch = 0
        if dtype is not None or memory_format is not None or label_dtype is not None:
            default = "f32" if dataset.is_image else dataset.dtype
            self.set_output(default if dtype is None else dtype,
                            0 if memory_format is None else memory_format,
                            "i64" if label_dtype is None else label_dtype)
        if normalize is not None:
            self.set_normalize(*normalize)
        if crop_pad or hflip:
            self.set_augment(crop_pad, hflip)

    def _drop_batch(self):
        for t in self._batch:
            t._invalidate()
        self._batch = ()

    def close(self):
        if getattr(self, "_batch", None):
            self._drop_batch()
        Handle.close(self)

    def set_output(self, dtype="f32", format=0, label_dtype="i64"):
        """Batch dtype (f32/f16/bf16, or the samples' own), memory format and label dtype
        (i32/i64)."""
        self._drop_batch()
        check(lib.dlt_loader_set_output(self.handle, _dt.dtype(dtype),
                                        _dt.memory_format(format), _dt.dtype(label_dtype)))

    def set_normalize(self, mean=None, std=None):
        """x = (byte/255 - mean[c]) / std[c], one mean and std per channel of the images;
        mean None switches normalisation off."""
        if mean is None:
            check(lib.dlt_loader_set_normalize(self.handle, None, None))
            return
        mean = [float(v) for v in mean]
        std = None if std is None else [float(v) for v in std]
        shape = self.dataset.sample_shape
        channels = shape[0] if self.dataset.is_image and shape else len(mean)
        if len(mean) != channels or (std is not None and len(std) != channels):
            raise ValueError("normalize needs %d means and %d stds (one per channel), got %d and %d"
                             % (channels, channels, len(mean), len(std or ())))
        m = (ctypes.c_float * channels)(*mean)
        s = (ctypes.c_float * channels)(*std) if std is not None else None
        check(lib.dlt_loader_set_normalize(self.handle, m, s))

    def set_augment(self, crop_pad=0, hflip=False):
        """Random crop from the image zero-padded by crop_pad, and random horizontal flip."""
        check(lib.dlt_loader_set_augment(self.handle, int(crop_pad), 1 if hflip else 0))

    def start_epoch(self, epoch):
        """Shuffles (if on) for epoch and rewinds."""
        self._drop_batch()
        check(lib.dlt_loader_start_epoch(self.handle, int(epoch)))
        self._epoch = int(epoch)

    def next(self):
        """The next batch (x, y) - (x,) for a dataset without labels - borrowed, valid until
        the next call; None at the end of the epoch (the call after that starts the next
        epoch)."""
        self._drop_batch()
        x, y = ctypes.c_void_p(), ctypes.c_void_p()
        has = ctypes.c_int32()
        check(lib.dlt_loader_next(self.handle, ctypes.byref(x), ctypes.byref(y),
                                  ctypes.byref(has)))
        if not has.value:
            return None
        bx = Tensor._borrow(x.value, self, self.ctx)
        by = Tensor._borrow(y.value, self, self.ctx)
        self._batch = (bx,) if by is None else (bx, by)
        return self._batch

    def seek(self, batch):
        """Moves the current epoch's position to batch (0..len(self)), host and device: after
        n replays of a captured step that each took a batch, seek(position + n)."""
        self._drop_batch()
        check(lib.dlt_loader_seek(self.handle, int(batch)))

    @property
    def position(self):
        """The index of the batch next() takes next in the current epoch."""
        return int(lib.dlt_loader_position(self.handle))

    def __iter__(self):
        """One epoch: epoch 0 first, then 1, 2, ... on each new `for`."""
        self.start_epoch(self._epoch)
        epoch = self._epoch
        while True:
            b = self.next()
            if b is None:
                break
            yield b
        self._epoch = epoch + 1

    def __len__(self):
        """Batches per epoch."""
        return int(lib.dlt_loader_num_batches(self.handle))

    @property
    def batch_size(self):
        return int(lib.dlt_loader_batch_size(self.handle))

    def epoch_order(self, epoch):
        """The sample order of epoch (a list of dataset indices)."""
        n = len(self.dataset)
        arr = (ctypes.c_int64 * n)()
        check(lib.dlt_loader_epoch_order(self.handle, int(epoch), arr, n))
        return list(arr)


def evaluate_accuracy(model, loader):
    """Accuracy of model over one epoch of loader (no-grad, eval mode, restored after)."""
    from .nn import Module
    v = ctypes.c_double()
    check(lib.dlt_evaluate_accuracy(arg(model, Module, "model"), arg(loader, DataLoader, "loader"),
                                    ctypes.byref(v)))
    return v.value


# ---- token data ----------------------------------------------------------------------------

_TOKEN_FORMATS = {"llmc": TOKENS_LLMC, "raw": TOKENS_RAW, "nanogpt": TOKENS_RAW,
                  TOKENS_LLMC: TOKENS_LLMC, TOKENS_RAW: TOKENS_RAW}
_U16P = ctypes.POINTER(ctypes.c_uint16)


class TokenDataset(Handle):
    """uint16 tokens resident in the context's memory, every one checked to be below
    vocab_size (1..65536) when loaded.

        TokenDataset("train.bin", vocab_size=50257, format="raw")          # nanoGPT
        TokenDataset("fineweb_train_000001.bin", vocab_size=50257)         # llm.c (default)
        TokenDataset.from_numpy(ids, vocab_size=65)
        TokenDataset.synthetic(100000, vocab_size=50257, seed=0)
    """

    __slots__ = ("__dict__",)
    _destroy = staticmethod(lib.dlt_token_dataset_destroy)
    _what = "token dataset"

    def __init__(self, path, vocab_size, format="llmc", *, ctx=None):
        ctx = resolve(ctx)
        if format not in _TOKEN_FORMATS:
            raise ValueError("format must be 'llmc' (header) or 'raw' (nanoGPT's train.bin), "
                             "got %r" % (format,))
        out = ctypes.c_void_p()
        check(lib.dlt_token_file_open(ctx.handle, enc(path), _TOKEN_FORMATS[format],
                                      int(vocab_size), ctypes.byref(out)))
        self._init_handle(out.value, ctx)

    def _init_handle(self, ptr, ctx):
        Handle.__init__(self, ptr, (ctx,))
        self.ctx = ctx

    @classmethod
    def from_numpy(cls, tokens, vocab_size, *, ctx=None):
        """Tokens from an integer array or sequence (copied; each below vocab_size)."""
        _need_numpy("TokenDataset.from_numpy")
        ctx = resolve(ctx)
        a = _np.asarray(tokens).reshape(-1)
        if a.dtype.kind not in "iu":
            raise TypeError("tokens must be integers, got numpy %s" % a.dtype)
        out_of_range = _np.nonzero((a < 0) | (a > 65535))[0] if a.size else ()
        if len(out_of_range):
            i = int(out_of_range[0])
            raise ValueError("token %d is %d: tokens are uint16 (0..65535)" % (i, int(a[i])))
        a = _np.ascontiguousarray(a, dtype=_np.uint16)
        out = ctypes.c_void_p()
        check(lib.dlt_token_dataset_create(ctx.handle, a.ctypes.data_as(_U16P), a.size,
                                           int(vocab_size), ctypes.byref(out)))
        ds = cls.__new__(cls)
        ds._init_handle(out.value, ctx)
        return ds

    @classmethod
    def synthetic(cls, n, vocab_size, seed=0, *, ctx=None):
        """n tokens uniform in [0, vocab_size) from seed (the same on every backend)."""
        ctx = resolve(ctx)
        out = ctypes.c_void_p()
        check(lib.dlt_synthetic_tokens_create(ctx.handle, int(n), int(vocab_size), int(seed),
                                              ctypes.byref(out)))
        ds = cls.__new__(cls)
        ds._init_handle(out.value, ctx)
        return ds

    def __len__(self):
        return int(lib.dlt_token_dataset_size(self.handle))

    @property
    def vocab_size(self):
        return int(lib.dlt_token_dataset_vocab_size(self.handle))

    def read(self, start=0, n=None):
        """Tokens start..start+n-1 (to the end when n is None): a numpy uint16 array, or a
        list without numpy. Synchronises."""
        if n is None:
            n = len(self) - int(start)
        n = int(n)
        if _np is not None:
            a = _np.empty(max(n, 0), dtype=_np.uint16)
            check(lib.dlt_token_dataset_read(self.handle, int(start), n, a.ctypes.data_as(_U16P)))
            return a
        buf = (ctypes.c_uint16 * max(n, 1))()
        check(lib.dlt_token_dataset_read(self.handle, int(start), n, buf))
        return list(buf[:n])

    def __repr__(self):
        if self.closed:
            return "<dltrain.data.TokenDataset closed>"
        return "<dltrain.data.TokenDataset %d tokens, vocabulary %d>" % (len(self), self.vocab_size)


class TokenLoader(Handle):
    """nanoGPT's get_batch over a TokenDataset: each batch draws batch_size start offsets
    uniform in [0, len - block_size) and gives x = tokens[o:o+block_size] and
    y = tokens[o+1:o+1+block_size] as [batch_size, block_size] int64 (dtype="i32" for
    int32). Draw s depends only on (seed, s); the draw counter lives on the device, so a
    captured step draws new windows on every replay. x and y are borrowed: valid until the
    next batch (the loader reuses its buffers). Iterating never ends.
    """

    __slots__ = ("__dict__",)
    _destroy = staticmethod(lib.dlt_token_loader_destroy)
    _what = "token loader"

    def __init__(self, dataset, batch_size, block_size, seed=0, *, dtype="i64"):
        out = ctypes.c_void_p()
        check(lib.dlt_token_loader_create(arg(dataset, TokenDataset, "dataset"), int(batch_size),
                                          int(block_size), int(seed), ctypes.byref(out)))
        Handle.__init__(self, out.value, (dataset,))
        self.dataset = dataset
        self.ctx = dataset.ctx
        self.batch_size = int(batch_size)
        self.block_size = int(block_size)
        self._batch = ()
        if _dt.dtype(dtype) != _dt.int64:
            self.set_output(dtype)

    def _drop_batch(self):
        for t in self._batch:
            t._invalidate()
        self._batch = ()

    def close(self):
        if getattr(self, "_batch", None):
            self._drop_batch()
        Handle.close(self)

    def set_output(self, dtype):
        """int64 (default, nanoGPT's) or int32 batches."""
        self._drop_batch()
        check(lib.dlt_token_loader_set_output(self.handle, _dt.dtype(dtype)))

    def next(self):
        """The next batch (x, y)."""
        self._drop_batch()
        x, y = ctypes.c_void_p(), ctypes.c_void_p()
        check(lib.dlt_token_loader_next(self.handle, ctypes.byref(x), ctypes.byref(y)))
        self._batch = (Tensor._borrow(x.value, self, self.ctx), Tensor._borrow(y.value, self, self.ctx))
        return self._batch

    def __iter__(self):
        while True:
            yield self.next()

    def seek(self, step):
        """The next batch is draw `step` (resume an interrupted run at its iteration)."""
        check(lib.dlt_token_loader_seek(self.handle, int(step)))

    @property
    def position(self):
        """The draw counter as the device holds it (replays included). Synchronises."""
        v = ctypes.c_int64()
        check(lib.dlt_token_loader_position(self.handle, ctypes.byref(v)))
        return v.value

    def offsets(self, step):
        """Start offsets of draw `step` (a list of batch_size ints)."""
        arr = (ctypes.c_int64 * self.batch_size)()
        check(lib.dlt_token_loader_offsets(self.handle, int(step), arr, self.batch_size))
        return list(arr)


class CharTokenizer(Handle):
    """nanoGPT's character-level tokenizer: the vocabulary is the text's distinct characters
    sorted by code point (chars), stoi/itos map them to ids and back.

        tok = CharTokenizer(text)                  # or CharTokenizer.from_file(path)
        ids = tok.encode("hello"); tok.decode(ids) == "hello"
    """

    __slots__ = ("__dict__",)
    _destroy = staticmethod(lib.dlt_char_tokenizer_destroy)
    _what = "tokenizer"

    def __init__(self, text):
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        out = ctypes.c_void_p()
        check(lib.dlt_char_tokenizer_create(data, len(data), ctypes.byref(out)))
        Handle.__init__(self, out.value)

    @classmethod
    def from_file(cls, path):
        """The tokenizer of a UTF-8 text file, read as Python's open(path).read() does."""
        out = ctypes.c_void_p()
        check(lib.dlt_char_tokenizer_from_file(enc(path), ctypes.byref(out)))
        return cls._adopt(out.value)

    @classmethod
    def _adopt(cls, ptr):
        tok = cls.__new__(cls)
        Handle.__init__(tok, ptr)
        return tok

    @property
    def vocab_size(self):
        return int(lib.dlt_char_tokenizer_vocab_size(self.handle))

    def __len__(self):
        return self.vocab_size

    @property
    def itos(self):
        """The characters by id (a list of one-character strings)."""
        return [chr(lib.dlt_char_tokenizer_itos(self.handle, i)) for i in range(self.vocab_size)]

    @property
    def chars(self):
        """The vocabulary as one string, in id order."""
        return "".join(self.itos)

    @property
    def stoi(self):
        """{character: id}."""
        return {c: i for i, c in enumerate(self.itos)}

    def encode(self, text):
        """ids (a list of ints) of a str; a character outside the vocabulary raises."""
        data = text.encode("utf-8")
        buf = (ctypes.c_uint16 * max(len(data), 1))()
        n = ctypes.c_int64()
        check(lib.dlt_char_tokenizer_encode(self.handle, data, len(data), buf, len(data),
                                            ctypes.byref(n)))
        return list(buf[:n.value])

    def decode(self, ids):
        """The str of a sequence of ids."""
        ids = [int(i) for i in ids]
        for k, i in enumerate(ids):
            if not 0 <= i <= 65535:
                raise ValueError("ids[%d] = %d is not a token id" % (k, i))
        arr = (ctypes.c_uint16 * max(len(ids), 1))(*ids)
        size = ctypes.c_size_t()
        check(lib.dlt_char_tokenizer_decode(self.handle, arr, len(ids), None, 0, ctypes.byref(size)))
        buf = ctypes.create_string_buffer(size.value + 1)
        check(lib.dlt_char_tokenizer_decode(self.handle, arr, len(ids), buf, size.value + 1,
                                            ctypes.byref(size)))
        return buf.raw[:size.value].decode("utf-8")

    def __repr__(self):
        if self.closed:
            return "<dltrain.data.CharTokenizer closed>"
        return "<dltrain.data.CharTokenizer %d characters>" % self.vocab_size


def char_dataset(path, train_fraction=0.9, *, ctx=None):
    """nanoGPT's shakespeare_char preparation: (tokenizer, train, val) of a UTF-8 text file,
    split at int(n * train_fraction) characters into two TokenDatasets."""
    ctx = resolve(ctx)
    tok, tr, va = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    check(lib.dlt_char_text_open(ctx.handle, enc(path), float(train_fraction), ctypes.byref(tok),
                                 ctypes.byref(tr), ctypes.byref(va)))
    tokenizer = CharTokenizer._adopt(tok.value)
    datasets = []
    for p in (tr, va):
        ds = TokenDataset.__new__(TokenDataset)
        ds._init_handle(p.value, ctx)
        datasets.append(ds)
    return tokenizer, datasets[0], datasets[1]
