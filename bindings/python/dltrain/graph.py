"""Whole-step CUDA graphs (include/dltrain/graph.h).

    def step():
        x, y = loader.next()
        opt.zero_grad()
        with dltrain.autocast():
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt); scaler.update()

    g = dltrain.Graph(step, warmup=3, ctx=ctx)   # runs step 3 times, captures one call
    for _ in range(steps):
        g.run()                                   # one launch for the whole step

The step is called through a ctypes callback (dlt_step_fn). The Graph keeps the callback
(and, through it, the Python function and what it refers to) alive as long as the graph.
An exception raised by the step aborts creation or the eager run with it: the binding
returns a failure status to the library and re-raises the original exception.
On a CPU context, or when capture is impossible, the step runs eagerly on every run()
(is_captured is False; the log callback receives the reason).
What the captured call allocates lives in one buffer per graph, sized by the last warm-up
call; a tensor the captured call keeps is rewritten by every replay and stays valid until
released, also after the graph is gone.
Under autocast, a capture reads a parameter's current f16/bf16 copy without a cast of its
own (the optimizers write the copy with each update); run() first converts again each such
copy whose parameter was written since by the host (a load, a copy, a fill) or is written by
some graph's replays, so every replay sees the current weights. A parameter whose layout
changed since the capture makes run() raise (DLT_ERR_INVALID_STATE: capture again).
"""

import ctypes

from . import errors
from ._handle import Handle
from ._lib import lib, check, STEP_FN
from .context import resolve


class Graph(Handle):
    __slots__ = ("__dict__",)
    _destroy = staticmethod(lib.dlt_graph_destroy)
    _what = "graph"

    def __init__(self, step, warmup=3, *, ctx=None):
        if not callable(step):
            raise TypeError("step must be callable")
        ctx = resolve(ctx)
        self.ctx = ctx
        self.step = step
        # The thunk records the step's exception here (not on self: no reference cycle).
        box = self._exc_box = [None]

        def thunk(user):
            try:
                step()
                return errors.OK
            except errors.DltError as e:
                box[0] = e
                return e.code
            except BaseException as e:  # re-raised by the caller, see _raise
                box[0] = e
                return errors.ERR_INVALID_STATE

        # Keep the C thunk alive as long as the graph: the library calls it on every
        # eager run (fallback mode), and may still hold it while captured.
        self._thunk = STEP_FN(thunk)
        out = ctypes.c_void_p()
        st = lib.dlt_graph_create(ctx.handle, self._thunk, None, int(warmup), ctypes.byref(out))
        Handle.__init__(self, out.value if st == 0 else None, (ctx,))
        self._raise(st)

    def _raise(self, st):
        exc, self._exc_box[0] = self._exc_box[0], None
        if exc is not None:
            raise exc
        check(st)

    def run(self):
        """Replays the captured step (or runs it eagerly in fallback mode), after refreshing
        the autocast copies of parameters written since the capture (see the module doc)."""
        self._raise(lib.dlt_graph_run(self.handle))

    replay = run
    __call__ = run

    @property
    def is_captured(self):
        return bool(lib.dlt_graph_is_captured(self.handle))

    @property
    def num_nodes(self):
        return int(lib.dlt_graph_num_nodes(self.handle))

    _STATS = ("nodes", "kernels", "memcpy", "memset", "events", "mem_alloc", "other", "edges", "depth")

    def stats(self):
        """The captured graph's node counts by kind, its edges and longest dependency chain
        (dlt_graph_stat; all 0 in eager fallback; "depth" -1 and the kinds 0 where the
        driver's graph could not be read past its node count): {"nodes": ..., ...}."""
        return {k: int(lib.dlt_graph_stat(self.handle, i)) for i, k in enumerate(self._STATS)}
