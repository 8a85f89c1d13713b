#!/usr/bin/env bash
# Attention forward + backward at one shape: examples/bench_attention (our three paths) and
# scripts/bench_attention_torch.py (PyTorch's four backends) in the same call, one table, then
# each of our paths against PyTorch's flash backend (issue 16's target: ours <= 1.1x its time).
#   BUILD=build-gpu bash scripts/bench_attention_vs_torch.sh [bench_attention options]
# The options (--batch --heads --context --head-dim --amp --causal --steps --warmup) go to both.
set -u
BUILD=${BUILD:-build}
PY=${PYTHON:-python3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$BUILD/examples/bench_attention" "$@" >"$tmp/ours.txt" 2>&1; rc_ours=$?
"$PY" "$(dirname "$0")/bench_attention_torch.py" "$@" >"$tmp/torch.txt" 2>&1; rc_torch=$?
grep '^#' "$tmp/ours.txt" "$tmp/torch.txt" | sed 's/^[^:]*://'
echo "| impl | path | fwd ms | bwd ms | total ms | fwd TFLOP/s | bwd TFLOP/s |"
echo "|---|---|---|---|---|---|---|"
grep -h '^| libdltrain\|^| PyTorch' "$tmp/ours.txt" "$tmp/torch.txt"
[ $rc_ours = 0 ] || { echo "bench_attention rc=$rc_ours:"; tail -5 "$tmp/ours.txt"; }
[ $rc_torch = 0 ] || { echo "bench_attention_torch.py rc=$rc_torch:"; tail -5 "$tmp/torch.txt"; }
ref=$(awk -F'|' '$2 ~ /PyTorch/ && $3 ~ /flash/ && $6 ~ /[0-9]/ {gsub(/ /, "", $6); print $6}' "$tmp/torch.txt")
if [ -n "$ref" ]; then
  awk -F'|' -v ref="$ref" '$2 ~ /libdltrain/ && $6 ~ /[0-9]/ {gsub(/ /, "", $3); gsub(/ /, "", $6);
    printf "libdltrain %s: %.2fx PyTorch flash'"'"'s time (%s vs %s ms)\n", $3, $6 / ref, $6, ref}' "$tmp/ours.txt"
fi
[ $rc_ours = 0 ] && [ $rc_torch = 0 ]
