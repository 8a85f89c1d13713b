"""Datasets resident on the device and the batch loader (include/dltrain/data.h).

    train = dltrain.data.CIFAR10("data/cifar-10-batches-bin", train=True)
    loader = dltrain.data.DataLoader(train, batch_size=256, shuffle=True)
    for x, y in loader:          # one epoch per `for`
        ...

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
from ._tensor import Tensor

SPLIT_TRAIN = 0
SPLIT_TEST = 1
IMAGE_BYTES = 3 * 32 * 32
TOKENS_LLMC = 1  # llm.c token files (1024-byte header)
TOKENS_RAW = 2   # nanoGPT's headerless train.bin / val.bin


class Dataset(Handle):
    """A dataset of 3x32x32 uint8 images and labels in the context's memory."""

    __slots__ = ("__dict__",)
    _destroy = staticmethod(lib.dlt_dataset_destroy)
    _what = "dataset"

    def __init__(self, ptr, ctx):
        Handle.__init__(self, ptr, (ctx,))
        self.ctx = ctx

    def __len__(self):
        return int(lib.dlt_dataset_size(self.handle))

    @property
    def num_classes(self):
        return int(lib.dlt_dataset_num_classes(self.handle))

    def class_name(self, i):
        s = lib.dlt_dataset_class_name(self.handle, int(i))
        return s.decode() if s is not None else None

    @property
    def classes(self):
        return [self.class_name(i) for i in range(self.num_classes)]

    def get(self, index):
        """(pixels: bytes of 3072, CHW; label: int) of image index. Synchronises."""
        buf = ctypes.create_string_buffer(IMAGE_BYTES)
        label = ctypes.c_int32()
        check(lib.dlt_dataset_get(self.handle, int(index), buf, IMAGE_BYTES,
                                  ctypes.byref(label)))
        return buf.raw, label.value

    def __getitem__(self, index):
        n = len(self)
        index = int(index)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("dataset index %d out of range (size %d)" % (index, n))
        return self.get(index)

    def __repr__(self):
        if self.closed:
            return "<dltrain.data.%s closed>" % type(self).__name__
        return "<dltrain.data.%s %d images, %d classes>" % (type(self).__name__, len(self),
                                                            self.num_classes)


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
        Dataset.__init__(self, _open(lib.dlt_cifar10_open, ctx, enc(root), split), ctx)

    @classmethod
    def from_file(cls, path, *, ctx=None):
        """One CIFAR-10 binary file."""
        ctx = resolve(ctx)
        ds = Dataset.__new__(cls)
        Dataset.__init__(ds, _open(lib.dlt_cifar10_open_file, ctx, enc(path)), ctx)
        return ds


class SyntheticDataset(Dataset):
    """n random 3x32x32 images with labels 0..num_classes-1 from seed; learnable=True adds
    a fixed per-class pattern so a model can learn it."""

    def __init__(self, n, num_classes=10, seed=0, learnable=True, *, ctx=None):
        ctx = resolve(ctx)
        Dataset.__init__(self, _open(lib.dlt_synthetic_dataset_create, ctx, int(n),
                                     int(num_classes), int(seed), 1 if learnable else 0), ctx)


class DataLoader(Handle):
    """Batches of a Dataset, optionally shuffled per epoch (reproducible from seed).

    Keyword options map to the setters: dtype/memory_format/label_dtype (set_output),
    normalize=(mean, std) (set_normalize), crop_pad/hflip (set_augment). Default output:
    f32 contiguous NCHW images (byte/255) and int64 labels.
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
            self.set_output("f32" if dtype is None else dtype,
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
        """Image dtype (f32/f16/bf16), memory format and label dtype (i32/i64)."""
        self._drop_batch()
        check(lib.dlt_loader_set_output(self.handle, _dt.dtype(dtype),
                                        _dt.memory_format(format), _dt.dtype(label_dtype)))

    def set_normalize(self, mean=None, std=None):
        """x = (byte/255 - mean[c]) / std[c]; mean None switches normalisation off."""
        if mean is None:
            check(lib.dlt_loader_set_normalize(self.handle, None, None))
            return
        m = (ctypes.c_float * 3)(*[float(v) for v in mean])
        s = (ctypes.c_float * 3)(*[float(v) for v in std]) if std is not None else None
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
        """The next batch (x, y) (borrowed, valid until the next call), or None at the end
        of the epoch (the call after that starts the next epoch)."""
        self._drop_batch()
        x, y = ctypes.c_void_p(), ctypes.c_void_p()
        has = ctypes.c_int32()
        check(lib.dlt_loader_next(self.handle, ctypes.byref(x), ctypes.byref(y),
                                  ctypes.byref(has)))
        if not has.value:
            return None
        bx = Tensor._borrow(x.value, self, self.ctx)
        by = Tensor._borrow(y.value, self, self.ctx)
        self._batch = (bx, by)
        return bx, by

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
