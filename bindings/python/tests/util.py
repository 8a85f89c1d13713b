"""Helpers shared by the binding's tests (not a test file itself)."""

import math
import os

import dltrain

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
INCLUDE = os.path.join(REPO, "include")


class Skip(Exception):
    """Raised by a test that cannot run here; the runner prints `# SKIP reason`."""


def require(*c_functions):
    """Skips unless the loaded library exports every named C function."""
    missing = [f for f in c_functions if not dltrain.is_implemented(f)]
    if missing:
        raise Skip("not in this libdltrain build: " + ", ".join(missing))


def numpy_or_skip():
    try:
        import numpy
    except ImportError:
        raise Skip("numpy is not importable by this interpreter") from None
    return numpy


def cpu(seed=0):
    return dltrain.Context("cpu", seed=seed)


def rss_bytes():
    """Resident set size of this process (Linux /proc), or None elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def assert_close(got, want, rtol=1e-5, atol=1e-6, what="value"):
    if isinstance(got, (list, tuple)):
        assert len(got) == len(want), "%s: length %d != %d" % (what, len(got), len(want))
        worst = None
        for i, (g, w) in enumerate(zip(got, want)):
            if isinstance(g, (list, tuple)):
                assert_close(g, w, rtol, atol, "%s[%d]" % (what, i))
                continue
            err = abs(g - w)
            if not (err <= atol + rtol * abs(w)) or math.isnan(g) != math.isnan(w):
                worst = worst or (i, g, w)
        assert worst is None, "%s[%d] = %r, want %r (rtol %g, atol %g)" % (
            what, worst[0], worst[1], worst[2], rtol, atol)
        return
    assert abs(got - want) <= atol + rtol * abs(want), "%s = %r, want %r" % (what, got, want)


def expect_error(cls, code, fn, *args, contains=None, **kwargs):
    """Calls fn and checks it raises cls with .code == code (and the message has
    `contains`); returns the exception."""
    try:
        fn(*args, **kwargs)
    except cls as e:
        if code is not None:
            assert e.code == code, "code %d, want %d (%s)" % (e.code, code, e.message)
        if contains is not None:
            assert contains in e.message, "message %r lacks %r" % (e.message, contains)
        return e
    raise AssertionError("%s did not raise %s" % (getattr(fn, "__name__", fn), cls.__name__))
