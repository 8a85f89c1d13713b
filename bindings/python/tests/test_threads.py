"""Issue 20 item 1 (threads): one context used from two threads at once is refused with
ConcurrentUseError instead of corrupting the library (before the fix: a use-after-free in
3 of 3 runs). Handing a context over between calls stays allowed, contexts of different
threads run concurrently, and a tensor the garbage collector releases in a foreign thread
while its context is busy is released later by the owning thread.

The concurrent cases are made deterministic with a Graph: its step callback runs inside
dlt_graph_create (a C call holding the context) and waits there while the other thread
tries the context.
"""

import gc
import threading

import dltrain
from dltrain.errors import ConcurrentUseError

from util import cpu, require

TIMEOUT = 30


def _inside_a_call(ctx, action):
    """Runs action() in a second thread while this thread is inside a C call on ctx;
    returns what action returned or raised (as ("ok", value) / ("raised", exc))."""
    require("dlt_graph_create")
    inside, done = threading.Event(), threading.Event()
    result = []

    def worker():
        inside.wait(TIMEOUT)
        try:
            result.append(("ok", action()))
        except BaseException as e:
            result.append(("raised", e))
        done.set()

    th = threading.Thread(target=worker, name="intruder")
    th.start()
    calls = [0]

    def step():
        calls[0] += 1
        if calls[0] == 1:
            inside.set()
            assert done.wait(TIMEOUT), "the second thread did not finish"

    g = dltrain.Graph(step, warmup=1, ctx=ctx)
    th.join(TIMEOUT)
    g.close()
    assert result, "the second thread did not run"
    return result[0]


def _assert_refused(outcome, what):
    kind, v = outcome
    assert kind == "raised" and isinstance(v, ConcurrentUseError), \
        "%s from a second thread was not refused: %r" % (what, v)
    msg = str(v)
    assert "one thread at a time" in msg and "intruder" in msg and "MainThread" in msg, msg
    assert isinstance(v, RuntimeError)


def test_a_second_thread_is_refused_while_a_call_is_in_progress():
    ctx = cpu()
    t = dltrain.tensor([1.0, 2.0], ctx=ctx)
    _assert_refused(_inside_a_call(ctx, lambda: dltrain.zeros(2, ctx=ctx)), "a factory")
    _assert_refused(_inside_a_call(ctx, lambda: t.tolist()), "a tensor read")
    _assert_refused(_inside_a_call(ctx, lambda: t * 2.0), "an op")
    _assert_refused(_inside_a_call(ctx, lambda: ctx.synchronize()), "a context call")
    # nothing was corrupted and the context is free again
    assert t.tolist() == [1.0, 2.0] and (t * 2.0).tolist() == [2.0, 4.0]


def test_modules_and_optimizers_are_guarded_too():
    require("dlt_linear_create", "dlt_sgd_create")
    ctx = cpu()
    lin = dltrain.nn.Linear(2, 2, ctx=ctx)
    opt = dltrain.optim.SGD(lin.parameters(), lr=0.1)
    x = dltrain.ones(1, 2, ctx=ctx)
    _assert_refused(_inside_a_call(ctx, lambda: lin(x)), "a module forward")
    _assert_refused(_inside_a_call(ctx, lambda: opt.zero_grad()), "an optimizer call")
    # parameter arrays (dlt_zero_grad takes an array of handles) are guarded as well
    _assert_refused(_inside_a_call(ctx, lambda: dltrain.zero_grad(lin.parameters())),
                    "zero_grad of a list")


def test_the_owning_thread_may_reenter():
    require("dlt_graph_create")
    ctx = cpu()
    seen = []

    def step():
        seen.append((dltrain.ones(3, ctx=ctx) * 2.0).sum().item())

    g = dltrain.Graph(step, warmup=2, ctx=ctx)
    g.run()
    assert seen == [6.0, 6.0, 6.0], seen


def test_a_context_can_be_handed_over_between_calls():
    ctx = cpu(seed=5)
    t = dltrain.tensor([1.0, 2.0, 3.0], ctx=ctx)
    out = []
    th = threading.Thread(target=lambda: out.append((t * 3.0).tolist()))
    th.start()
    th.join(TIMEOUT)
    assert out == [[3.0, 6.0, 9.0]]
    assert (t + t).tolist() == [2.0, 4.0, 6.0]


def test_threads_with_their_own_contexts_run_concurrently():
    errors = []
    results = []

    def work(seed):
        try:
            ctx = cpu(seed=seed)
            w = dltrain.rand(32, 32, ctx=ctx).requires_grad_()
            x = dltrain.rand(8, 32, ctx=ctx)
            for _ in range(200):
                loss = dltrain.functional.linear(x, w).sum()
                loss.backward()
            results.append(w.grad.sum().item())
        except BaseException as e:
            errors.append(e)

    ths = [threading.Thread(target=work, args=(s,)) for s in (1, 2, 3)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(TIMEOUT * 4)
    assert not errors, errors
    assert len(results) == 3


def test_two_threads_hammering_one_context_never_crash():
    """Without the guard this crashed the interpreter; now each call either works or is
    refused, and the values stay right."""
    ctx = cpu()
    a = dltrain.ones(64, 64, ctx=ctx)
    bad = []
    refused = [0]

    def work():
        for _ in range(400):
            try:
                r = (a * 2.0 + a).sum().item()
                if r != 3.0 * 64 * 64:
                    bad.append(r)
            except ConcurrentUseError:
                refused[0] += 1
            except BaseException as e:
                bad.append(e)

    ths = [threading.Thread(target=work) for _ in range(2)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(TIMEOUT * 4)
    assert not bad, bad[:3]
    assert (a * 2.0).sum().item() == 2.0 * 64 * 64


def test_a_release_from_a_foreign_thread_waits_for_the_owner():
    """The garbage collector may drop a tensor in any thread: a release that meets a busy
    context is queued and done by the owning thread when its call ends."""
    ctx = cpu()
    base = ctx.memory_stat("count")
    box = [dltrain.zeros(1024, ctx=ctx)]
    assert ctx.memory_stat("count") == base + 1

    def drop():
        box.pop()  # the last reference: dlt_tensor_release while the owner is inside a call
        gc.collect()
        return "dropped"

    assert _inside_a_call(ctx, drop) == ("ok", "dropped")
    assert ctx.memory_stat("count") == base


def test_queued_releases_run_in_their_order():
    """A tensor's release is queued before its (closing) context's destroy: the owner runs
    the queue first in, first out."""
    from dltrain._guard import Guard
    g = Guard("test context")
    held, release = threading.Event(), threading.Event()
    order = []

    def owner():
        g.enter("dlt_test")
        held.set()
        release.wait(TIMEOUT)
        g.exit()  # runs the queue

    th = threading.Thread(target=owner)
    th.start()
    held.wait(TIMEOUT)
    g.defer(order.append, ("tensor release",))
    g.defer(order.append, ("context destroy",))
    assert order == []  # the owner still holds the guard
    release.set()
    th.join(TIMEOUT)
    assert order == ["tensor release", "context destroy"], order
    g.enter("dlt_test")  # free again
    g.exit()


def test_set_num_threads_round_trip_and_errors():
    require("dlt_set_num_threads")
    default = dltrain.get_num_threads()
    assert default >= 1
    try:
        dltrain.set_num_threads(1)
        assert dltrain.get_num_threads() == 1
        x = dltrain.ones(3, 4, ctx=cpu())
        assert (x * 2).tolist() == [[2.0] * 4] * 3
        for bad in (-1, 5000):
            try:
                dltrain.set_num_threads(bad)
            except dltrain.InvalidArgument as e:
                assert "threads" in str(e)
            else:
                raise AssertionError("set_num_threads(%d) was accepted" % bad)
        assert dltrain.get_num_threads() == 1, "a refused call changed the count"
    finally:
        dltrain.set_num_threads(0)
    assert dltrain.get_num_threads() == default
