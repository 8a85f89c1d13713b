#!/usr/bin/env bash
# bench_vs_torch.sh - on a GPU machine: libdltrain's bench and PyTorch's reference in the same
# call, then one table with the ratios. BUILD (default build), ANCHORS (default
# ../shared/anchors, or .device/anchors on a lent machine), BENCH_ARGS, BATCHES.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ANCHORS=${ANCHORS:-../shared/anchors}
[ -d "$ANCHORS" ] || ANCHORS=.device/anchors
BATCHES=${BATCHES:-64,256,1024}
out=$(mktemp)
"$BUILD/examples/bench" --batch "$BATCHES" --json "$out" ${BENCH_ARGS:-}
python3 scripts/bench_compare.py --anchors "$ANCHORS" --ours "$out" --batches "$BATCHES" ${COMPARE_ARGS:-}
rm -f "$out"
