"""What every C call goes through: one thread per context at a time, and integers that fit.

A context and everything made from it belongs to one thread at a time (core.h). ctypes
releases the GIL during a call, so two Python threads using one context would run inside
the library at once and corrupt it (use-after-free in the allocator and the tape). The
binding refuses that instead: every wrapper's handle is a HandleInt (an int, so ctypes
passes it unchanged) that carries its context's Guard, and every C function is called
through `wrap`, which enters the guards of the handles among its arguments. A thread that
finds the guard held by another thread gets ConcurrentUseError; the owning thread may
re-enter (a Graph's step callback runs inside dlt_graph_create/run). Handing a context over
between calls is fine: the guard is free whenever no call is in progress.

Releases are the exception: the garbage collector may finalise a tensor in any thread. A
destroy/release that finds the guard held elsewhere is queued, and the owning thread runs
the queue when it leaves its outermost call.

ctypes converts an out-of-range Python int silently (2**64 + 3 becomes 3 for int64_t,
-1 becomes 2**64 - 1 for uint64_t); `wrap` raises OverflowError first, naming the function,
the argument and the C type's range.
"""

import collections
import ctypes
import threading

from .errors import ConcurrentUseError

_get_ident = threading.get_ident

_INT_RANGES = {
    ctypes.c_int32: ("int32_t", -2 ** 31, 2 ** 31 - 1),
    ctypes.c_int64: ("int64_t", -2 ** 63, 2 ** 63 - 1),
    ctypes.c_uint32: ("uint32_t", 0, 2 ** 32 - 1),
    ctypes.c_uint64: ("uint64_t", 0, 2 ** 64 - 1),
    ctypes.c_size_t: ("size_t", 0, 2 ** (8 * ctypes.sizeof(ctypes.c_size_t)) - 1),
}
INT64_MIN, INT64_MAX = -2 ** 63, 2 ** 63 - 1


class Guard:
    """Who is inside a C call on one context right now (a thread id and a depth)."""

    __slots__ = ("what", "_lock", "_owner", "_owner_name", "_depth", "_pending")

    def __init__(self, what):
        self.what = what  # "cpu context 0x..." for messages
        self._lock = threading.Lock()
        self._owner = None
        self._owner_name = None
        self._depth = 0
        # (function, args) of releases queued by other threads, run in their order (a
        # tensor's release is queued before its context's destroy)
        self._pending = collections.deque()

    def enter(self, fname):
        tid = _get_ident()
        if self._owner == tid:  # only this thread ever writes its own id here
            self._depth += 1
            return
        if not self._lock.acquire(False):
            raise ConcurrentUseError(
                "dltrain: %s called from thread %r while thread %r is inside a libdltrain "
                "call on the same %s. A context and everything made from it belongs to one "
                "thread at a time: give each thread its own dltrain.Context (with ctx: ... or "
                "ctx=...), or hand objects over between calls."
                % (fname, threading.current_thread().name, self._owner_name, self.what))
        self._owner = tid
        self._owner_name = threading.current_thread().name
        self._depth = 1

    def exit(self):
        if self._depth == 1 and self._pending:
            self._drain()
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
            self._owner_name = None
            self._lock.release()
            if self._pending:  # queued by another thread while we held the guard
                self._try_drain()

    def _drain(self):
        while self._pending:
            fn, args = self._pending.popleft()
            try:
                fn(*args)
            except Exception:  # a release has nothing to report
                pass

    def defer(self, fn, args):
        """Queues a release for the thread that holds the guard (or runs it now if the
        guard became free meanwhile)."""
        self._pending.append((fn, args))
        self._try_drain()

    def _try_drain(self):
        if self._lock.acquire(False):
            try:
                self._owner = _get_ident()
                self._depth = 1
                self._drain()
            finally:
                self._depth = 0
                self._owner = None
                self._lock.release()


class HandleInt(int):
    """A C handle (an int for ctypes) that knows its context's guard."""

    def __new__(cls, value, guard):
        self = int.__new__(cls, value)
        self.guard = guard
        return self


def handle_int(ptr, guard):
    return HandleInt(ptr, guard) if guard is not None else int(ptr)


def guard_of(obj):
    """The guard of a Handle (its context's), or None."""
    p = getattr(obj, "_ptr", None)
    if type(p) is HandleInt:
        return p.guard
    return getattr(obj, "_guard", None)


def check_int(value, ctype_name, lo, hi, what):
    """OverflowError unless lo <= value <= hi (value an int)."""
    if not lo <= value <= hi:
        raise OverflowError("%s must fit in %s (%d..%d), got %d"
                            % (what, ctype_name, lo, hi, value))
    return value


def tag_array(arr, objs):
    """Marks a ctypes array of handles with the guard of the first of objs that has one, so
    that the call it is passed to is guarded like a call with a handle argument."""
    for o in objs:
        g = guard_of(o)
        if g is not None:
            arr.guard = g
            break
    return arr


_PTR_ARRAY = ctypes.POINTER(ctypes.c_void_p)


def wrap(name, f, argtypes):
    """f (a ctypes function) behind the integer-range check and the context guards."""
    argtypes = argtypes or ()
    checks = tuple((i,) + _INT_RANGES[a] for i, a in enumerate(argtypes) if a in _INT_RANGES)
    arrays = tuple(i for i, a in enumerate(argtypes) if a is _PTR_ARRAY)
    releases = name.endswith("_destroy") or name == "dlt_tensor_release"

    def call(*args):
        for i, cname, lo, hi in checks:
            v = args[i]
            if isinstance(v, int) and not lo <= v <= hi:
                raise OverflowError("%s: argument %d must fit in %s (%d..%d), got %d"
                                    % (name, i + 1, cname, lo, hi, v))
        guard = None
        for a in args:
            if type(a) is HandleInt:
                if guard is None:
                    guard = a.guard
                elif a.guard is not guard:
                    return _call_multi(name, f, args)
        for i in arrays:
            g = getattr(args[i], "guard", None)
            if g is not None:
                if guard is None:
                    guard = g
                elif g is not guard:
                    return _call_multi(name, f, args)
        if guard is None:
            return f(*args)
        if releases:
            try:
                guard.enter(name)
            except ConcurrentUseError:
                guard.defer(f, args)
                return None
        else:
            guard.enter(name)
        try:
            return f(*args)
        finally:
            guard.exit()

    call.__name__ = name
    call.raw = f  # the ctypes function itself
    call.restype = f.restype
    call.argtypes = f.argtypes
    return call


def _call_multi(name, f, args):
    """A call whose handles belong to several contexts (copies between contexts)."""
    guards = []
    for a in args:
        g = a.guard if type(a) is HandleInt else getattr(a, "guard", None)
        if isinstance(g, Guard) and g not in guards:
            guards.append(g)
    entered = []
    try:
        for g in guards:
            g.enter(name)
            entered.append(g)
        return f(*args)
    finally:
        for g in reversed(entered):
            g.exit()
