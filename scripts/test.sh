#!/usr/bin/env bash
# scripts/test.sh - the README's test command, and what CI runs (.ci/run).
#
# On a fresh Debian/Ubuntu machine it installs what the build and the tests need (apt-get:
# compiler, meson, ninja, pkg-config, OpenBLAS, cJSON, CMake for the install test, numpy
# when no python3 has it, pip for the wheel test, matplotlib and (optionally) Chromium for
# the report test), configures into ./build (CUDA backend when nvcc/cuDNN are present),
# builds with warnings as errors, runs the whole suite, then builds the host code again with
# AddressSanitizer and UndefinedBehaviorSanitizer (float-cast-overflow included, no
# recovery) into ./build-asan and runs the CPU tests there. It ends with
#   N passed, N failed, N skipped
# counting test cases (TAP lines) over every test program, and exits non-zero on failure.
# A configure or build failure prints the end of its log and the first error, and counts
# as a failure.
#
# GPU architectures: the library's default is a fat binary (every architecture from sm_75
# up, see README.md); compiling it on CI's 2 cores takes several times as long as one
# architecture, so this script configures DLT_GPU_ARCH (default "75,90": the oldest
# architecture the CUDA 13 build supports, for the compile check, and the H200's, so the
# CUDA tests run on the lent GPU); an existing build directory is reconfigured with it.
#
# Environment: DLT_SKIP_ASAN=1 skips the sanitizer build; DLT_BUILD_DIR (default build);
# DLT_TEST_ARGS passes extra arguments to `meson test` (e.g. --suite cuda); DLT_GPU_ARCH
# (default 75,90; "auto" for the fat binary).
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
build=${DLT_BUILD_DIR:-build}
asan=build-asan

# ---- dependencies -------------------------------------------------------------------------
need_pkgs=()
have() { command -v "$1" >/dev/null 2>&1; }
have meson || need_pkgs+=(meson)
have ninja || need_pkgs+=(ninja-build)
have pkg-config || need_pkgs+=(pkg-config)
have cc || need_pkgs+=(gcc)
have c++ || need_pkgs+=(g++)
have cmake || need_pkgs+=(cmake)
pkg-config --exists openblas 2>/dev/null || pkg-config --exists cblas 2>/dev/null || need_pkgs+=(libopenblas-dev)
pkg-config --exists libcjson 2>/dev/null || need_pkgs+=(libcjson-dev)
# The Python binding's numpy tests: any python3 with numpy will do (meson's python test
# picks the first of python3 on PATH, meson's own, /usr/bin/python3 that has it).
numpy_py=""
for py in python3 /usr/bin/python3; do
  if have "$py" && "$py" -c 'import numpy' 2>/dev/null; then numpy_py=$(command -v "$py"); break; fi
done
if [ -z "$numpy_py" ]; then
  have python3 || need_pkgs+=(python3)
  need_pkgs+=(python3-numpy)
  numpy_py=/usr/bin/python3
fi
# The wheel test runs `python -m pip install ./bindings/python` with that interpreter.
if [ "$numpy_py" = /usr/bin/python3 ] && ! /usr/bin/python3 -m pip --version >/dev/null 2>&1; then
  need_pkgs+=(python3-pip)
fi
# the comparison report (scripts/report.py, the report test) draws with Debian's matplotlib
if [ -x /usr/bin/python3 ] && ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then need_pkgs+=(python3-matplotlib); fi
SUDO=""; [ "$(id -u)" -ne 0 ] && have sudo && SUDO=sudo
apt_updated=0
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "== installing: ${need_pkgs[*]}"
  if have apt-get; then
    $SUDO apt-get update -qq >/dev/null 2>&1; apt_updated=1
    if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >build-apt.log 2>&1; then
      echo "apt-get install ${need_pkgs[*]} failed; its last lines:"; tail -15 build-apt.log; exit 2
    fi
    rm -f build-apt.log
  else
    echo "missing ${need_pkgs[*]} and no apt-get: install them and rerun"; exit 2
  fi
fi
# Headless Chromium opens the report's HTML page in the report test. Optional: where it cannot
# be installed (or started), those cases skip with the reason.
if ! have chromium && have apt-get; then
  echo "== installing (optional, for the report test): chromium"
  [ $apt_updated = 1 ] || $SUDO apt-get update -qq >/dev/null 2>&1
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null 2>&1 \
    || echo "   chromium not installed: the report test's browser cases will skip"
fi
# The CUDA toolkit is found through nvcc on PATH.
[ -x /usr/local/cuda/bin/nvcc ] && case ":$PATH:" in *:/usr/local/cuda/bin:*) ;; *) export PATH="/usr/local/cuda/bin:$PATH";; esac

# Prints the end of a failed step's log and its first error lines, and leaves a marker the
# summary counts (the build directory itself may not exist after a failed configure).
fail_step() { # dir step log
  local dir=$1 step=$2 log=$3
  echo "== $step of $dir FAILED; last lines of $log:"
  tail -40 "$log" | sed 's/^/   /'
  local cause
  cause=$(grep -m 5 -E 'ERROR:|error:|Error |FAILED:|undefined reference|No such file' "$log")
  [ -n "$cause" ] && { echo "== cause:"; echo "$cause" | sed 's/^/   /'; }
  echo "$step" >"$dir.failed.log"
}

status=0
run_suite() { # dir setup-args...
  local dir=$1; shift
  rm -f "$dir.failed.log" "$dir/meson-logs/testlog.json"
  if [ ! -f "$dir/build.ninja" ]; then
    echo "== configuring $dir: meson setup $dir $*"
    if ! meson setup "$dir" "$@" >"$dir.setup.log" 2>&1; then
      fail_step "$dir" configure "$dir.setup.log"; return 1
    fi
    grep -E '^ +(CUDA backend|CUDA arch) *:' "$dir.setup.log"
  else # an existing build directory takes this script's options too (they may have changed)
    if ! meson configure "$dir" "$@" >"$dir.setup.log" 2>&1; then
      fail_step "$dir" configure "$dir.setup.log"; return 1
    fi
  fi
  echo "== building $dir"
  if ! ninja -C "$dir" >"$dir.build.log" 2>&1; then
    fail_step "$dir" build "$dir.build.log"; return 1
  fi
  echo "== testing $dir"
  meson test -C "$dir" --print-errorlogs ${DLT_TEST_ARGS:-} 2>&1 | grep -E '^ *[0-9]+/[0-9]+ |^(Ok|Fail|Skipped|Timeout):'
  return 0
}

run_suite "$build" -Dwerror=true -Dbuildtype=debugoptimized -Dgpu_arch="${DLT_GPU_ARCH:-75,90}" || status=1
if [ "${DLT_SKIP_ASAN:-0}" != 1 ]; then
  # Host code only (the CUDA runtime and ASan do not mix), sanitizers on. GCC's
  # -fsanitize=undefined leaves out float-cast-overflow (a float converted to an integer
  # type that cannot hold it), so it is added; no recovery: a report ends the test program,
  # which then fails, instead of a line in a log nobody reads.
  ubsan="-fsanitize=float-cast-overflow -fno-sanitize-recover=undefined,float-cast-overflow"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 run_suite "$asan" -Dwerror=true \
    -Dcuda=disabled -Db_sanitize=address,undefined -Db_lundef=false -Dexamples=true \
    "-Dc_args=$ubsan" "-Dc_link_args=$ubsan" || status=1
fi

# ---- count test cases over both builds ----------------------------------------------------
python3 - "$build" "$asan" <<'PY' || status=1
import json, os, re, sys
passed = failed = skipped = 0
bad_programs = []
for d in sys.argv[1:]:
    marker = d + ".failed.log"
    if os.path.exists(marker):
        step = open(marker).read().strip() or "build"
        print(f"{step} of {d} failed: its tests did not run")
        failed += 1
        continue
    log = os.path.join(d, "meson-logs", "testlog.json")
    if not os.path.exists(log):
        continue
    for line in open(log):
        r = json.loads(line)
        out = r.get("stdout") or ""
        cases = 0
        for l in out.splitlines():
            m = re.match(r"^(not ok|ok)\b.*?(#\s*SKIP.*)?$", l)
            if not m:
                continue
            cases += 1
            if m.group(1) == "not ok":
                failed += 1
                print(f"FAILED {d}/{r['name']}: {l}")
            elif m.group(2):
                skipped += 1
            else:
                passed += 1
        if r.get("result") not in ("OK", "SKIP", "EXPECTEDFAIL"):
            bad_programs.append(f"{d}/{r['name']} ({r.get('result')})")
            if cases == 0:
                failed += 1  # a program that crashed before reporting counts as one failure
for b in bad_programs:
    print("program failed:", b)
if passed + failed + skipped == 0:
    print("no test ran")
    failed = 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or bad_programs else 0)
PY
[ $? -ne 0 ] && status=1
exit $status
