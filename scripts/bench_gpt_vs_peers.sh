#!/usr/bin/env bash
# bench_gpt_vs_peers.sh - on a GPU machine, in one call: libdltrain's GPT-2 124M training step
# (examples/bench_gpt), PyTorch's (../shared/anchors/torch_gpt2.py: eager and torch.compile)
# and llm.c's (../shared/anchors/run_llmc.sh, which builds llm.c), then one table with the
# ratios (scripts/bench_gpt_compare.py). All at context 1024, bf16 (ours also fp16 + scaler).
#
#   env: BUILD (build)  ANCHORS (../shared/anchors, else .device/anchors)  BATCHES (16,32)
#        BENCH_ARGS (more bench_gpt options)  TORCH_VARIANTS ("eager_bf16 compile_bf16")
#        PEERS ("torch llmc")  OUTDIR (raw outputs kept there; default: a temporary folder)
# Roughly 6-8 minutes on an H200: ours ~1 min per batch size, torch.compile ~30 s of
# compilation per batch size, llm.c ~2 min to build.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ANCHORS=${ANCHORS:-../shared/anchors}
[ -d "$ANCHORS" ] || ANCHORS=.device/anchors
BATCHES=${BATCHES:-16,32}
TORCH_VARIANTS=${TORCH_VARIANTS:-"eager_bf16 compile_bf16"}
PEERS=${PEERS:-"torch llmc"}
dir=${OUTDIR:-$(mktemp -d)}
mkdir -p "$dir"
has_peer() { case " $PEERS " in *" $1 "*) return 0;; esac; return 1; }

echo "== libdltrain bench_gpt (batches $BATCHES)"
"$BUILD/examples/bench_gpt" --batch "$BATCHES" --context 1024 --json "$dir/ours.json" ${BENCH_ARGS:-} \
  2>&1 | tee "$dir/ours.txt"
[ -f "$dir/ours.json" ] || { echo "bench_gpt wrote no record"; exit 1; }
args=(--ours "$dir/ours.json")
if has_peer torch; then
  echo "== PyTorch (torch_gpt2.py: $TORCH_VARIANTS)"
  : >"$dir/torch.txt"
  for b in ${BATCHES//,/ }; do
    for v in $TORCH_VARIANTS; do
      B=$b T=1024 ONLY=$v python3 "$ANCHORS/torch_gpt2.py" 2>&1 | tee -a "$dir/torch.txt"
    done
  done
  args+=(--torch "$dir/torch.txt")
fi
if has_peer llmc; then
  echo "== llm.c (run_llmc.sh)"
  bash "$ANCHORS/run_llmc.sh" ${BATCHES//,/ } 2>&1 | tee "$dir/llmc.txt"
  args+=(--llmc "$dir/llmc.txt")
fi
echo
python3 scripts/bench_gpt_compare.py "${args[@]}"
