"""The binding's declarations against the C headers, library discovery and the ABI check.

The headers are the contract: every DLT_API function of include/dltrain/*.h must be declared
in dltrain._lib with exactly the ctypes of its C signature, and every constant the binding
mirrors must have the header's value.
"""

import ctypes
import glob
import os
import re
import subprocess
import sys

import dltrain
from dltrain import _lib, errors, dtypes, context, ops, data, device, _tensor as tensor

from util import INCLUDE, Skip

P = ctypes.POINTER
_SCALARS = {
    "int32_t": ctypes.c_int32, "dlt_status": ctypes.c_int32, "uint32_t": ctypes.c_uint32,
    "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64, "size_t": ctypes.c_size_t,
    "double": ctypes.c_double, "float": ctypes.c_float, "uint16_t": ctypes.c_uint16,
}
_HANDLES = ("dlt_ctx", "dlt_tensor", "dlt_module", "dlt_optimizer", "dlt_grad_scaler",
            "dlt_dataset", "dlt_loader", "dlt_graph", "dlt_device_info", "dlt_gpu_monitor",
            "dlt_event", "dlt_token_dataset", "dlt_token_loader", "dlt_char_tokenizer")
# io.h (harden): the safetensors file handle and load report; an option struct is passed
# by pointer, as c_void_p like a handle
_HANDLES += ("dlt_safetensors", "dlt_load_report", "dlt_module_load_options")
# dist.h (issue 21)
_HANDLES += ("dlt_comm", "dlt_ddp")


def _headers():
    paths = sorted(glob.glob(os.path.join(INCLUDE, "dltrain", "*.h")))
    if not paths:
        raise Skip("headers not found under %s" % INCLUDE)
    return paths


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _declarations():
    """{name: (return type, [param types])} of every DLT_API function, types normalised
    ("const char*", "dlt_tensor**", "int64_t", ...)."""
    out = {}
    for path in _headers():
        text = _strip_comments(open(path).read())
        text = re.sub(r"\s+", " ", text)
        for m in re.finditer(r"DLT_API (?:DLT_NODISCARD )?(?:DLT_DEPRECATED\([^)]*\) )?"
                             r"([\w\s\*]+?)\s*\b(dlt_\w+)\s*\(([^)]*)\)\s*;", text):
            ret, name, params = m.group(1), m.group(2), m.group(3).strip()
            types = []
            if params and params != "void":
                for p in params.split(","):
                    p = p.strip()
                    p = re.sub(r"\b\w+$", "", p) if not p.endswith("*") else p
                    types.append(_norm(p))
            out[name] = (_norm(ret), types)
    return out


def _norm(t):
    t = re.sub(r"\s+", " ", t.strip())
    t = t.replace(" *", "*").replace("* ", "*")
    return t


def _expected_ctype(t, is_return=False):
    """The ctypes type a C type must be declared as (None for void)."""
    if t == "void":
        return None
    if t == "dlt_log_fn":
        return _lib.LOG_FN
    if t == "dlt_step_fn":
        return _lib.STEP_FN
    # nn: custom module callbacks; option structs go as untyped pointers
    if t == "dlt_module_forward_fn":
        return _lib.MODULE_FORWARD_FN
    if t == "dlt_user_destroy_fn":
        return _lib.USER_DESTROY_FN
    if re.fullmatch(r"(const )?dlt_\w+_options\*", t):
        return ctypes.c_void_p
    bare = t.replace("const ", "").replace("const", "")
    if bare in _SCALARS:
        return _SCALARS[bare]
    if bare in ("char*",):
        return ctypes.c_char_p
    if bare in ("void*", "uint8_t*"):
        return ctypes.c_void_p
    if bare.endswith("*") and bare[:-1] in _HANDLES:
        return ctypes.c_void_p
    if bare.endswith("_options*") or bare.endswith("_config*"):  # option/config structs: byref(Structure)
        return ctypes.c_void_p
    if bare.endswith("**") and bare[:-2] in _HANDLES:
        return P(ctypes.c_void_p)
    if bare.endswith("**") and bare[:-2] == "char":
        return P(ctypes.c_char_p)
    if bare.endswith("*") and bare[:-1] in _SCALARS:
        return P(_SCALARS[bare[:-1]])
    raise AssertionError("test does not know the C type %r" % t)


def test_every_header_function_is_declared_with_its_c_types():
    decls = _declarations()
    assert len(decls) > 150, "parsed only %d declarations" % len(decls)
    problems = []
    for name, (ret, params) in sorted(decls.items()):
        if name not in _lib._SIGNATURES:
            problems.append("%s: not declared in dltrain._lib" % name)
            continue
        restype, argtypes = _lib._SIGNATURES[name]
        want_ret = _expected_ctype(ret, True)
        if restype is not want_ret and restype != want_ret:
            problems.append("%s: restype %s, header says %s" % (name, restype, ret))
        want = [_expected_ctype(p) for p in params]
        if len(want) != len(argtypes):
            problems.append("%s: %d argtypes, header has %d parameters" % (name, len(argtypes),
                                                                          len(want)))
            continue
        for i, (a, w) in enumerate(zip(argtypes, want)):
            if a is not w and a != w:
                problems.append("%s: argument %d is %s, header says %s" % (name, i, a, params[i]))
    for name in _lib._SIGNATURES:
        if name not in decls:
            problems.append("%s: declared in dltrain._lib but in no header" % name)
    assert not problems, "\n".join(problems)


def test_loaded_functions_carry_the_declared_types():
    lib = _lib.lib
    checked = 0
    for name, (restype, argtypes) in _lib._SIGNATURES.items():
        if not lib.has(name):
            continue
        f = getattr(lib, name)
        assert f.restype is restype or f.restype == restype, name
        assert list(f.argtypes) == list(argtypes), name
        checked += 1
    assert checked > 50


_PY_CONSTANTS = {
    "DLT_ABI_VERSION": _lib.ABI_VERSION, "DLT_MAX_DIMS": tensor.MAX_DIMS,
    "DLT_F32": dtypes.float32, "DLT_F16": dtypes.float16, "DLT_BF16": dtypes.bfloat16,
    "DLT_I32": dtypes.int32, "DLT_I64": dtypes.int64, "DLT_U8": dtypes.uint8,
    "DLT_FORMAT_CONTIGUOUS": dtypes.CONTIGUOUS, "DLT_FORMAT_CHANNELS_LAST": dtypes.CHANNELS_LAST,
    "DLT_OK": errors.OK,
}


def test_constants_match_the_headers():
    consts = {}
    for path in _headers():
        for m in re.finditer(r"^#define (DLT_\w+) (-?\d+)\b", open(path).read(), re.M):
            consts[m.group(1)] = int(m.group(2))
    modules = {"ERR_": [errors], "DEVICE_": [context], "MEM_": [context], "LOG_": [context],
               "REDUCTION_": [ops], "SPLIT_": [data], "VALUE_": [device], "GEMM_": [device],
               "TOKENS_": [data]}
    checked = 0
    problems = []
    for name, value in sorted(consts.items()):
        short = name[4:]
        if name in _PY_CONSTANTS:
            got = _PY_CONSTANTS[name]
        else:
            mods = [m for prefix, ms in modules.items() if short.startswith(prefix) for m in ms]
            if not mods:
                continue  # device info/monitor keys are enumerated from the library
            got = getattr(mods[0], short, None)
            if got is None:
                problems.append("%s has no Python counterpart %s.%s" % (name, mods[0].__name__,
                                                                        short))
                continue
        if int(got) != value:
            problems.append("%s = %d, binding has %d" % (name, value, int(got)))
        checked += 1
    assert not problems, "\n".join(problems)
    assert checked >= 40, checked
    # every status code maps to the exception class of its kind
    for name, value in consts.items():
        if name.startswith("DLT_ERR_"):
            cls = errors.error_class(value)
            want = {1: errors.InvalidArgument, 2: errors.NotSupported, 3: errors.OutOfMemory,
                    4: errors.DeviceError, 5: errors.IOFormatError, 6: errors.DistError,
                    9: errors.InternalError}
            assert issubclass(cls, want[value // 100]), (name, cls)


def test_library_reports_abi_and_version():
    assert dltrain.abi_version() == dltrain.ABI_VERSION == 1
    v = dltrain.version()
    assert dltrain.version_string() == "%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100)


def test_abi_mismatch_message_names_both_generations():
    try:
        _lib.check_abi(2, "/x/libdltrain.so.2")
    except ImportError as e:
        msg = str(e)
        assert "ABI 2" in msg and "ABI 1" in msg and "/x/libdltrain.so.2" in msg, msg
    else:
        raise AssertionError("check_abi(2) did not raise")
    _lib.check_abi(1, "ok")  # the matching generation passes


def _import_in_subprocess(env_lib, prelude=""):
    env = dict(os.environ)
    if env_lib is None:
        env.pop("DLTRAIN_LIBRARY", None)
    else:
        env["DLTRAIN_LIBRARY"] = env_lib
    code = prelude + (
        "try:\n"
        "    import dltrain\n"
        "    print('IMPORTED', dltrain.abi_version())\n"
        "except ImportError as e:\n"
        "    print('IMPORTERROR', e)\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=120)
    return r.stdout.strip()


def test_import_fails_cleanly_for_a_missing_library():
    out = _import_in_subprocess("/nonexistent/libdltrain.so.1")
    assert out.startswith("IMPORTERROR") and "/nonexistent/libdltrain.so.1" in out, out
    assert "DLTRAIN_LIBRARY" in out, out


def test_import_refuses_a_library_that_is_not_libdltrain():
    libm = None
    import ctypes.util
    libm = ctypes.util.find_library("m")
    if not libm:
        raise Skip("no libm to stand in for a foreign library")
    out = _import_in_subprocess(libm)
    assert out.startswith("IMPORTERROR") and "not libdltrain" in out, out


def test_import_refuses_another_abi_generation():
    # The real library, with dlt_abi_version answering 2 (as a libdltrain.so.2 would).
    prelude = (
        "import ctypes\n"
        "class _FakeCDLL(ctypes.CDLL):\n"
        "    def __getattr__(self, name):\n"
        "        if name == 'dlt_abi_version':\n"
        "            f = ctypes.CFUNCTYPE(ctypes.c_uint32)(lambda: 2)\n"
        "            self.__dict__[name] = f\n"
        "            return f\n"
        "        return ctypes.CDLL.__getattr__(self, name)\n"
        "ctypes.CDLL = _FakeCDLL\n")
    out = _import_in_subprocess(os.environ.get("DLTRAIN_LIBRARY") or dltrain.library_path(),
                                prelude)
    assert out.startswith("IMPORTERROR"), out
    assert "ABI 2" in out and "ABI 1" in out, out


def test_import_through_the_environment_variable_loads_that_file():
    path = dltrain.library_path()
    if not os.path.isabs(path):
        raise Skip("library was found by name (%s), not by path" % path)
    out = _import_in_subprocess(path)
    assert out == "IMPORTED 1", out


def test_missing_functions_raise_not_implemented_at_call_time():
    stub = _lib._Missing("dlt_not_a_function", "libdltrain.so.1")
    try:
        stub(1, 2)
    except NotImplementedError as e:
        assert "dlt_not_a_function" in str(e) and "libdltrain.so.1" in str(e)
    else:
        raise AssertionError("stub did not raise")
    assert not dltrain.is_implemented("dlt_not_a_function")
    assert dltrain.is_implemented("dlt_tensor_empty")


def test_every_function_refuses_null_handles_and_out_pointers():
    """The whole API walked from the headers: every function returning dlt_status, called with
    NULL for each pointer argument (handles, out-pointers, buffers, callbacks) and 1 for the
    numbers, must return an invalid-argument status (1xx) with a message and must not crash;
    every other function must survive NULL handles. A function is covered as soon as a
    header declares it."""
    decls = _declarations()
    lib = _lib.lib
    checked = 0
    problems = []
    for name, (ret, params) in sorted(decls.items()):
        fn = getattr(lib, name, None)
        if fn is None or not params or not any("*" in p or p.endswith("_fn") for p in params):
            continue
        args = []
        for p, ct in zip(params, fn.argtypes):
            if isinstance(ct, type) and issubclass(ct, ctypes._CFuncPtr):
                args.append(ctypes.cast(None, ct))
            elif "*" in p:
                args.append(None)
            elif ct is ctypes.c_double:
                args.append(1.0)
            else:
                args.append(1)
        if name == "dlt_ctx_create":
            args[2] = _lib.ABI_VERSION  # reach the NULL check, not the version check
        lib.dlt_clear_error()
        r = fn(*args)
        checked += 1
        if ret == "dlt_status":
            msg = lib.dlt_last_error()
            if r // 100 != 1 or not msg:
                problems.append("%s -> %d %r" % (name, r, msg))
    assert checked > 150, "only %d functions walked" % checked
    assert not problems, "functions not refusing NULL arguments: " + "; ".join(problems)
