"""Handles are released exactly once, in a safe order, and nothing leaks over many cycles."""

import gc

import dltrain
import dltrain.functional as F

from util import Skip, cpu, require, rss_bytes

MiB = 1 << 20


class _DestroyLog:
    """Records the destroy/release calls of wrapper classes (the calls still happen)."""

    def __init__(self, *classes):
        self.classes = classes
        self.log = []

    def __enter__(self):
        self.saved = []
        for cls in self.classes:
            real = cls.__dict__["_destroy"].__func__
            self.saved.append((cls, cls.__dict__["_destroy"]))

            def wrapped(ptr, real=real, name=cls.__name__):
                self.log.append((name, ptr))
                real(ptr)
            cls._destroy = staticmethod(wrapped)
        return self

    def __exit__(self, *exc):
        for cls, orig in self.saved:
            cls._destroy = orig

    def names(self):
        return [n for n, _ in self.log]


def test_10000_tensor_cycles_leak_nothing():
    ctx = cpu()
    payload = bytes(4096)
    base_count = ctx.memory_stat("count")
    base_bytes = ctx.memory_allocated()

    def cycle(n):
        for i in range(n):
            t = dltrain.from_buffer(payload, (1024,), ctx=ctx)
            u = t * 2.0  # an op result is an owned reference too
            z = dltrain.zeros((8, 8), ctx=ctx)
            del t, u, z
    cycle(1000)  # warm-up: Python's and the allocator's caches reach their size
    gc.collect()
    rss0 = rss_bytes()
    cycle(10000)
    gc.collect()
    rss1 = rss_bytes()
    assert ctx.memory_stat("count") == base_count, "live allocations grew"
    assert ctx.memory_allocated() == base_bytes, "allocated bytes grew"
    if rss0 is not None:
        # 30,000 leaked tensors would be > 40 MiB of storage alone
        assert rss1 - rss0 < 4 * MiB, "RSS grew by %.1f MiB" % ((rss1 - rss0) / MiB)


def test_context_cycles_leak_nothing():
    def cycle(n):
        for i in range(n):
            ctx = dltrain.Context("cpu")
            t = dltrain.zeros((64, 64), ctx=ctx)
            t2 = F.relu(t)
            del ctx, t, t2
    cycle(100)
    gc.collect()
    rss0 = rss_bytes()
    with _DestroyLog(dltrain.Context) as log:
        cycle(1000)
        gc.collect()
    assert log.names().count("Context") == 1000, len(log.log)
    rss1 = rss_bytes()
    if rss0 is not None:
        assert rss1 - rss0 < 4 * MiB, "RSS grew by %.1f MiB" % ((rss1 - rss0) / MiB)


def test_context_outlives_its_tensors():
    with _DestroyLog(dltrain.Context, dltrain.Tensor) as log:
        ctx = dltrain.Context("cpu")
        t = dltrain.tensor([1.0, 2.0, 3.0], ctx=ctx)
        ctx.close()  # deferred: t still needs the context
        assert log.names() == []
        assert t.tolist() == [1.0, 2.0, 3.0] and (t * 2.0).tolist() == [2.0, 4.0, 6.0]
        try:
            dltrain.zeros(2, ctx=ctx)
        except ValueError as e:
            assert "closed" in str(e)
        else:
            raise AssertionError("a closed context made a tensor")
        del t
        gc.collect()
        names = log.names()
    assert names[-1] == "Context" and names.count("Context") == 1, names
    assert names.count("Tensor") >= 1


def test_garbage_cycles_release_children_before_the_context():
    with _DestroyLog(dltrain.Context, dltrain.Tensor) as log:
        ctx = dltrain.Context("cpu")
        t = dltrain.zeros((4,), ctx=ctx)
        junk = [ctx, t]
        junk.append(junk)  # a reference cycle holding both
        del ctx, t, junk
        gc.collect()
        names = log.names()
    assert names == ["Tensor", "Context"], names


def test_tensors_taken_from_owners_hold_a_reference_of_their_own():
    """A gradient (like a parameter, a momentum buffer, the scaler's scale) is handed out
    with dlt_tensor_retain: each wrapper releases its own reference once, and the owner's
    reference is untouched."""
    ctx = cpu()
    w = dltrain.tensor([1.0, 2.0], ctx=ctx).requires_grad_()
    (w * 3.0).sum().backward()
    base = ctx.memory_stat("count")
    g_ptr = w.grad.handle
    gc.collect()
    with _DestroyLog(dltrain.Tensor) as log:
        for _ in range(100):
            g = w.grad
            assert g.tolist() == [3.0, 3.0]
            del g
        gc.collect()
    assert log.log == [("Tensor", g_ptr)] * 100, log.log[:3]
    assert w.grad.tolist() == [3.0, 3.0] and ctx.memory_stat("count") == base
    # the gradient outlives its leaf
    g = w.grad
    del w
    gc.collect()
    assert g.tolist() == [3.0, 3.0]


def test_module_parameters_outlive_their_module():
    require("dlt_linear_create", "dlt_module_params")
    ctx = cpu()
    import dltrain.nn as nn
    from dltrain._module import _ModuleHandle
    with _DestroyLog(_ModuleHandle) as log:
        lin = nn.Linear(3, 2, ctx=ctx)
        lin_ptr = lin.handle
        p = lin.parameters()[0]
        before = p.tolist()
        del lin  # the module goes; the parameter keeps its own reference
        gc.collect()
        assert log.log == [("_ModuleHandle", lin_ptr)], log.log
        assert p.shape == (2, 3) and p.tolist() == before
        p.fill_(1.5)
        assert p.tolist() == [[1.5] * 3] * 2


def test_sequential_owns_appended_children():
    require("dlt_sequential_create", "dlt_linear_create", "dlt_sequential_append")
    ctx = cpu()
    import dltrain.nn as nn
    from dltrain._module import _ModuleHandle
    with _DestroyLog(_ModuleHandle) as log:
        lin = nn.Linear(4, 4, ctx=ctx)
        seq = nn.Sequential(lin, nn.ReLU(ctx=ctx))
        seq_ptr = seq.handle
        assert len(seq) == 2 and seq[0] is lin
        del seq
        gc.collect()
        assert log.log == []  # lin keeps the container alive
        assert lin.find("weight").shape == (4, 4)
        del lin
        gc.collect()
        # one destroy, of the container (it frees its children itself)
        assert log.log == [("_ModuleHandle", seq_ptr)], log.log


def test_loader_batches_are_borrowed_and_invalidated():
    require("dlt_synthetic_dataset_create", "dlt_loader_create", "dlt_loader_next")
    ctx = cpu()
    ds = dltrain.data.SyntheticDataset(10, num_classes=3, seed=1, ctx=ctx)
    ld = dltrain.data.DataLoader(ds, batch_size=4)
    with _DestroyLog(dltrain.Tensor) as log:
        x, y = ld.next()
        assert x.shape == (4, 3, 32, 32) and y.shape == (4,)
        x2, y2 = ld.next()
        try:
            x.numel
        except ValueError:
            pass
        else:
            raise AssertionError("a stale batch was still usable")
        assert x2.shape == (4, 3, 32, 32)
        del x, y, x2, y2
        gc.collect()
        assert log.log == [], "a borrowed batch was released"
    # the loader keeps its dataset alive; closing both in any order is safe
    del ds
    gc.collect()
    assert len(ld) == 3
    ld.close()


def test_op_and_backward_cycles_free_the_tape():
    ctx = cpu()
    w = dltrain.rand((8, 8), ctx=ctx).requires_grad_()
    x = dltrain.rand((4, 8), ctx=ctx)
    F.linear(x, w).sum().backward()
    base = ctx.memory_stat("count")
    for _ in range(2000):
        loss = F.mean(F.relu(F.linear(x, w)))
        loss.backward()
        del loss
        # forward without backward: dropping the result frees the recording
        F.linear(x, w)
    assert ctx.tape_live_nodes() == 0
    assert ctx.memory_stat("count") == base


def test_rss_probe_works_here():
    if rss_bytes() is None:
        raise Skip("no /proc/self/statm: RSS checks are skipped on this platform")
    assert rss_bytes() > MiB
