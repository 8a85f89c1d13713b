#!/usr/bin/env bash
# scripts/fuzz.sh - builds the libFuzzer targets (fuzz/fuzz_<target>.c) and runs each for a
# bounded time, then folds what it found into the corpus (fuzz/corpus/<target>/).
#
#   scripts/fuzz.sh [seconds per target] [--seeds]     (default 60 seconds; 0: build only)
#
# Build: ./build-fuzz, a meson build of the CPU-only library with clang, AddressSanitizer,
# UndefinedBehaviorSanitizer (no recovery: any report stops the run) and libFuzzer's
# coverage instrumentation (-fsanitize=fuzzer-no-link), as a static library; each target
# is linked against it with -fsanitize=fuzzer,address,undefined. The main build is not
# touched. Needs clang and its libFuzzer runtime (Debian: clang libclang-rt-14-dev; the
# script installs them with apt-get when missing and it can).
#
# Run: every target fuzzes a copy of its corpus for the given time (one process each, one
# after the other; DLT_FUZZ_PARALLEL=1 runs them at the same time). Inputs that crash, leak,
# hang or break a harness rule are saved under build-fuzz/artifacts/<target>/ (the run of
# that target stops at the first one). Then the corpus is merged: the named files
# (seed-*, edge-*, regress-*: the hand-made seeds and the regression cases of past
# findings) are always kept, and of the other inputs (the old corpus and the new finds)
# only those reaching code edges the kept ones do not, as libFuzzer's -merge=1 picks them
# with -use_counters=0 (edges only, not hit counts: a corpus of about a hundred files per
# target instead of several hundred). DLT_FUZZ_NO_MERGE=1 leaves the corpus alone.
#
# --seeds regenerates the seed-*/edge-* files first (fuzz/gen_seeds.c writes the library-
# made files, fuzz/make_seeds.py the hand-made ones).
#
# The table at the end: target, executions, seconds, coverage (edges / features as
# libFuzzer counts them), corpus files after the merge, crashes found (artifacts).
# Exit status 1 when a target found something. tests/test_fuzz_corpus replays the corpus
# in the ordinary test suite.
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
secs=60
seeds=0
for a in "$@"; do
  case "$a" in
    --seeds) seeds=1 ;;
    ''|*[!0-9]*) echo "usage: $0 [seconds per target] [--seeds]"; exit 2 ;;
    *) secs=$a ;;
  esac
done
targets=${DLT_FUZZ_TARGETS:-"cifar10 safetensors"}
build=build-fuzz

# ---- toolchain ------------------------------------------------------------------------------
have() { command -v "$1" >/dev/null 2>&1; }
fuzzer_rt() { ls "$(clang -print-resource-dir 2>/dev/null)"/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; }
if ! have clang || ! fuzzer_rt; then
  echo "== installing clang and its libFuzzer runtime"
  SUDO=""; [ "$(id -u)" -ne 0 ] && have sudo && SUDO=sudo
  if have apt-get; then
    $SUDO apt-get update -qq >/dev/null 2>&1
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang >/dev/null 2>&1
    ver=$(clang --version 2>/dev/null | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "libclang-rt-$ver-dev" >/dev/null 2>&1 || true
  fi
  have clang && fuzzer_rt || { echo "clang with libFuzzer (libclang_rt.fuzzer) is needed"; exit 2; }
fi
have meson && have ninja || { echo "meson and ninja are needed (scripts/test.sh installs them)"; exit 2; }

# ---- build ----------------------------------------------------------------------------------
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
if [ ! -f "$build/build.ninja" ]; then
  CC=clang meson setup "$build" -Dcuda=disabled -Dtests=false -Dexamples=false \
    -Ddefault_library=static -Dbuildtype=debugoptimized -Db_sanitize=address,undefined \
    -Db_lundef=false "-Dc_args=-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined" \
    >"$build.setup.log" 2>&1 || { cat "$build.setup.log"; exit 1; }
  rm -f "$build.setup.log"
fi
echo "== building $build"
ninja -C "$build" >"$build.build.log" 2>&1 || { tail -40 "$build.build.log"; exit 1; }
libs="$build/libdltrain.a $(pkg-config --libs libcjson) $(pkg-config --libs openblas 2>/dev/null || pkg-config --libs cblas) -lm -lpthread -ldl"
for t in $targets; do
  # shellcheck disable=SC2086
  clang -g -O1 -Wall -Wextra -Iinclude -fsanitize=fuzzer $san "fuzz/fuzz_$t.c" $libs \
    -o "$build/fuzz_$t" || exit 1
done
# shellcheck disable=SC2086
clang -g -O1 -Wall -Wextra -Iinclude -fsanitize=fuzzer-no-link $san fuzz/gen_seeds.c $libs \
  -o "$build/gen_seeds" || exit 1

if [ "$seeds" = 1 ]; then
  echo "== writing the seeds"
  mkdir -p fuzz/corpus/cifar10 fuzz/corpus/safetensors
  "$build/gen_seeds" fuzz/corpus/safetensors || exit 1
  python3 fuzz/make_seeds.py fuzz/corpus || exit 1
fi
[ "$secs" = 0 ] && exit 0

# ---- run ------------------------------------------------------------------------------------
max_len() { case "$1" in cifar10) echo 32768 ;; *) echo 16384 ;; esac; }
extra() { [ -f "fuzz/$1.dict" ] && echo "-dict=fuzz/$1.dict"; }
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

run_target() { # target
  local t=$1 work="$build/work/$1" art="$build/artifacts/$1"
  rm -rf "$work" "$art"
  mkdir -p "$work" "$art" "fuzz/corpus/$t"
  cp fuzz/corpus/"$t"/* "$work"/ 2>/dev/null
  local t0 t1
  t0=$(date +%s)
  # shellcheck disable=SC2046
  "$build/fuzz_$t" -max_total_time="$secs" -timeout=25 -rss_limit_mb=4096 \
    -max_len="$(max_len "$t")" $(extra "$t") -print_final_stats=1 -artifact_prefix="$art/" \
    "$work" >"$build/fuzz_$t.log" 2>&1
  t1=$(date +%s)
  echo $((t1 - t0)) >"$build/fuzz_$t.secs"
}

merge_target() { # target
  local t=$1 fresh="$build/merge/$1" corpus="fuzz/corpus/$1"
  rm -rf "$fresh"
  mkdir -p "$fresh"
  cp "$corpus"/seed-* "$corpus"/edge-* "$corpus"/regress-* "$fresh"/ 2>/dev/null
  "$build/fuzz_$t" -merge=1 -use_counters=0 -timeout=25 -rss_limit_mb=4096 -max_len="$(max_len "$t")" \
    "$fresh" "$corpus" "$build/work/$t" >"$build/merge_$t.log" 2>&1 ||
    { echo "merge of $t failed (corpus left as it was): see $build/merge_$t.log"; return; }
  find "$corpus" -maxdepth 1 -type f ! -name 'seed-*' ! -name 'edge-*' ! -name 'regress-*' -delete
  find "$fresh" -maxdepth 1 -type f ! -name 'seed-*' ! -name 'edge-*' ! -name 'regress-*' \
    -exec cp {} "$corpus"/ \;
}

echo "== fuzzing: $targets, ${secs}s each"
if [ "${DLT_FUZZ_PARALLEL:-0}" = 1 ]; then
  for t in $targets; do run_target "$t" & done
  wait
else
  for t in $targets; do run_target "$t"; done
fi

status=0
rows=()
for t in $targets; do
  log="$build/fuzz_$t.log"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  [ -z "$execs" ] && execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  crashes=$(find "$build/artifacts/$t" -type f | wc -l)
  if [ "$crashes" -gt 0 ]; then
    status=1
    echo "== $t found $crashes input(s): $(find "$build/artifacts/$t" -type f | tr '\n' ' ')"
    grep -E 'ERROR: |SUMMARY: |fuzz_[a-z0-9]*: |runtime error' "$log" | head -8 | sed 's/^/   /'
  fi
  [ "${DLT_FUZZ_NO_MERGE:-0}" = 1 ] || merge_target "$t"
  files=$(find "fuzz/corpus/$t" -type f | wc -l)
  kb=$(du -sk "fuzz/corpus/$t" | cut -f1)
  rows+=("$(printf '%-12s %12s %8s %7s %8s %6s %7s %7s' "$t" "${execs:-?}" \
    "$(cat "$build/fuzz_$t.secs")" "${cov:-?}" "${ft:-?}" "$files" "$kb" "$crashes")")
done
total_files=$(find fuzz/corpus -type f | wc -l)
total_kb=$(du -sk fuzz/corpus | cut -f1)
[ "$total_files" -gt 200 ] || [ "$total_kb" -gt 2048 ] &&
  echo "warning: the corpus holds $total_files files, ${total_kb} KB (budget: 200 files, 2 MB)"
echo
printf '%-12s %12s %8s %7s %8s %6s %7s %7s\n' target executions seconds cov features files KB crashes
for r in "${rows[@]}"; do echo "$r"; done
exit $status
