#!/usr/bin/env bash
# scripts/test.sh - the README's test command, and what CI runs (.ci/run).
#
# On a fresh Debian/Ubuntu machine it installs what the build needs (apt-get), configures
# into ./build (CUDA backend when nvcc/cuDNN are present), builds with warnings as errors,
# runs the whole suite, then builds the host code again with AddressSanitizer and
# UndefinedBehaviorSanitizer (float-cast-overflow included, no recovery) into ./build-asan
# and runs the CPU tests there. It ends with
#   N passed, N failed, N skipped
# counting test cases (TAP lines) over every test program, and exits non-zero on failure.
#
# Environment: DLT_SKIP_ASAN=1 skips the sanitizer build; DLT_BUILD_DIR (default build);
# DLT_TEST_ARGS passes extra arguments to `meson test` (e.g. --suite cuda).
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
have python3 || need_pkgs+=(python3)
pkg-config --exists openblas 2>/dev/null || pkg-config --exists cblas 2>/dev/null || need_pkgs+=(libopenblas-dev)
pkg-config --exists libcjson 2>/dev/null || need_pkgs+=(libcjson-dev)
# the Python binding's numpy tests run under the interpreter meson runs with
if [ -x /usr/bin/python3 ] && ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then need_pkgs+=(python3-numpy); fi
# the comparison report (scripts/report.py, the report test) draws with Debian's matplotlib
if [ -x /usr/bin/python3 ] && ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then need_pkgs+=(python3-matplotlib); fi
SUDO=""; [ "$(id -u)" -ne 0 ] && have sudo && SUDO=sudo
apt_updated=0
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "== installing: ${need_pkgs[*]}"
  if have apt-get; then
    $SUDO apt-get update -qq >/dev/null 2>&1; apt_updated=1
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null 2>&1 \
      || { echo "apt-get install ${need_pkgs[*]} failed"; exit 2; }
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

status=0
run_suite() { # dir setup-args...
  local dir=$1; shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
    rm -f "$dir.setup.log"
  else # an existing build directory takes this script's options too (they may have changed)
    meson configure "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
    rm -f "$dir.setup.log"
  fi
  echo "== building $dir"
  rm -f "$dir/meson-logs/testlog.json" "$dir/meson-logs/build-failed"
  if ! ninja -C "$dir" >"$dir.build.log" 2>&1; then
    tail -60 "$dir.build.log"; mkdir -p "$dir/meson-logs"; touch "$dir/meson-logs/build-failed"; return 1
  fi
  echo "== testing $dir"
  meson test -C "$dir" --print-errorlogs ${DLT_TEST_ARGS:-} 2>&1 | grep -E '^ *[0-9]+/[0-9]+ |^(Ok|Fail|Skipped|Timeout):' 
  return 0
}

run_suite "$build" -Dwerror=true -Dbuildtype=debugoptimized || status=1
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
    if os.path.exists(os.path.join(d, "meson-logs", "build-failed")):
        print(f"build of {d} failed")
        failed += 1
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
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or bad_programs else 0)
PY
[ $? -ne 0 ] && status=1
exit $status
