#!/usr/bin/env python3
"""Runs every test_* function of bindings/python/tests/test_*.py and prints TAP:

    ok 1 - test_tensor.test_bytes_round_trip
    not ok 2 - test_errors.test_shape_error
    # <traceback>
    ok 3 - test_api.test_resnet50 # SKIP dlt_resnet50_create is not implemented by ...
    1..3

A test skips by raising util.Skip(reason) (or unittest.SkipTest); a NotImplementedError
(what the binding raises for a C function the loaded library does not export) is a skip
with its message too. Exit status: 1 if any test failed (or a file could not be imported).

Usage: run_tap.py [-k SUBSTRING] [FILE ...]. Needs dltrain importable (PYTHONPATH) and,
unless libdltrain is installed, DLTRAIN_LIBRARY naming the built library.
"""

import glob
import importlib
import inspect
import os
import sys
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _diag(text):
    for line in text.rstrip().splitlines():
        print("# " + line)


def main(argv):
    pattern = None
    files = []
    i = 0
    while i < len(argv):
        if argv[i] == "-k":
            pattern = argv[i + 1]
            i += 2
        else:
            files.append(argv[i])
            i += 1
    if not files:
        files = sorted(glob.glob(os.path.join(HERE, "test_*.py")))

    import util  # noqa: E402 - after sys.path is set

    n = 0
    failed = 0
    _diag("python %s (%s)" % (sys.version.split()[0], sys.executable))
    try:
        import dltrain
        _diag("dltrain binding on %s, library %s" % (dltrain.version_string(),
                                                     dltrain.library_path()))
        missing = dltrain.missing_functions()
        if missing:
            _diag("%d C functions not in this library build (their tests skip)" % len(missing))
    except Exception:
        pass  # reported by the first test file that imports it
    for path in files:
        modname = os.path.splitext(os.path.basename(path))[0]
        try:
            mod = importlib.import_module(modname)
        except Exception:
            n += 1
            failed += 1
            print("not ok %d - %s (import)" % (n, modname))
            _diag(traceback.format_exc())
            continue
        tests = [(name, fn) for name, fn in vars(mod).items()
                 if name.startswith("test_") and inspect.isfunction(fn)
                 and fn.__module__ == mod.__name__]
        tests.sort(key=lambda t: t[1].__code__.co_firstlineno)
        for name, fn in tests:
            full = "%s.%s" % (modname, name)
            if pattern and pattern not in full:
                continue
            n += 1
            t0 = time.time()
            try:
                fn()
            except (util.Skip, unittest.SkipTest) as e:
                print("ok %d - %s # SKIP %s" % (n, full, str(e).replace("\n", " ")))
                continue
            except NotImplementedError as e:
                print("ok %d - %s # SKIP %s" % (n, full, str(e).replace("\n", " ")))
                continue
            except BaseException as e:  # a failing test must not stop the run
                if isinstance(e, KeyboardInterrupt):
                    raise
                failed += 1
                print("not ok %d - %s" % (n, full))
                _diag(traceback.format_exc())
                continue
            dt = time.time() - t0
            print("ok %d - %s%s" % (n, full, " (%.1f s)" % dt if dt >= 1.0 else ""))
            sys.stdout.flush()
    print("1..%d" % n)
    sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
