#!/usr/bin/env bash
# The Python wheel, as a user installs it: `pip install ./bindings/python` with no package
# index (offline; pip's build isolation on), into a temporary target, reusing this build
# directory for the library (-C builddir); then the package imports and works from a clean
# environment: no DLTRAIN_LIBRARY, no LD_LIBRARY_PATH, not from the source tree, and it
# loads the libdltrain.so.1 it bundles.
py="$1"; build="$2"; src="$3"
echo "1..4"
if ! "$py" -m pip --version >/dev/null 2>&1; then
  for i in 1 2 3 4; do echo "ok $i - wheel # SKIP $py has no pip (Debian: python3-pip)"; done; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if (cd "$tmp" && env -u PYTHONPATH PIP_NO_INDEX=1 "$py" -m pip install --no-index --no-deps \
      --no-cache-dir --disable-pip-version-check --target "$tmp/site" \
      --config-settings builddir="$build" "$src/bindings/python") >"$tmp/log" 2>&1; then
  echo "ok 1 - pip install ./bindings/python --no-index --target (build isolation, offline)"
else echo "not ok 1 - pip install"; sed 's/^/# /' "$tmp/log" | tail -40; exit 0; fi
rec=$(ls -d "$tmp"/site/dltrain-*.dist-info 2>/dev/null | head -1)
if [ -f "$tmp/site/dltrain/libdltrain.so.1" ] && [ -f "$tmp/site/dltrain/_lib.py" ] &&
   grep -q '^dltrain/libdltrain.so.1,sha256=' "$rec/RECORD" && grep -q '^Tag: py3-none-' "$rec/WHEEL"; then
  echo "ok 2 - the wheel holds the package and libdltrain.so.1 (RECORD, py3-none-<platform> tag)"
else echo "not ok 2 - wheel contents"; ls -R "$tmp/site" | sed 's/^/# /' | head -40; fi
if readelf -d "$tmp/site/dltrain/libdltrain.so.1" 2>/dev/null | grep -q 'SONAME.*libdltrain.so.1' &&
   ! readelf -d "$tmp/site/dltrain/libdltrain.so.1" | grep -qE 'R(UN)?PATH.*'"$build"; then
  echo "ok 3 - the bundled library is the installed one (SONAME libdltrain.so.1, no build-tree RUNPATH)"
else echo "not ok 3 - bundled library"; readelf -d "$tmp/site/dltrain/libdltrain.so.1" | sed 's/^/# /' | head -20; fi
cat >"$tmp/use.py" <<'PY'
import os, sys
import dltrain
from dltrain import _lib
site = sys.argv[1]
assert dltrain.__file__.startswith(site), dltrain.__file__
assert _lib.lib.path == os.path.join(site, "dltrain", "libdltrain.so.1"), _lib.lib.path
ctx = dltrain.Context("cpu")
t = dltrain.zeros((2, 3), ctx=ctx)
assert tuple(t.shape) == (2, 3)
print("imported from", os.path.dirname(dltrain.__file__), "library", os.path.basename(_lib.lib.path))
PY
if out=$(cd "$tmp" && env -u DLTRAIN_LIBRARY -u LD_LIBRARY_PATH PYTHONPATH="$tmp/site" "$py" "$tmp/use.py" "$tmp/site" 2>&1); then
  echo "ok 4 - imports without DLTRAIN_LIBRARY and runs on the bundled library # $out"
else echo "not ok 4 - import"; echo "$out" | sed 's/^/# /'; fi
