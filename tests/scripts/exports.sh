#!/usr/bin/env bash
# Only dlt_ symbols may be exported by the shared library (TAP output).
lib="$1"
echo "1..2"
syms=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^$')
bad=$(printf '%s\n' "$syms" | grep -v '^dlt_[a-z]' | grep -v '^DLT_' || true)
if [ -z "$bad" ]; then echo "ok 1 - only dlt_ symbols exported ($(printf '%s\n' "$syms" | wc -l) symbols)"
else echo "not ok 1 - foreign exported symbols"; printf '# %s\n' $bad | head -20; fi
internal=$(printf '%s\n' "$syms" | grep '^dlt__' || true)
if [ -z "$internal" ]; then echo "ok 2 - no internal dlt__ symbols exported"
else echo "not ok 2 - internal symbols exported"; printf '# %s\n' $internal | head; fi
