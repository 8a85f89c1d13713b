#!/usr/bin/env bash
# scripts/device/ddp_check.sh - data parallel on a lent machine with several GPUs, in one
# call (nvidia-h200-x2 / -x4 / -x8): build, the parameter-equality check, then throughput of
# libdltrain's examples beside PyTorch DDP (torchrun) on 1, 2, 4, 8 GPUs as the machine has
# them. Logs under $OUT (one archive), a table at the end.
#
#   carry: .device (debs, anchors)       run from the repository root
#   env:   GPUS="2 4 8" (counts above the machine's are left out; 1 is always measured)
#          STAGES="build equal resnet50 gpt2"  STEPS=60 (timed steps)  BATCH=256 (ResNet50,
#          per GPU)  GPT_BATCH=16 GPT_T=1024 (per GPU)  EQUAL_GPUS (default: the largest count)
#
# What each stage shows (issue 21's "must show" on several GPUs):
#   equal     build-gpu/tests/cuda_dist under dltrain-run: a GPT without BatchNorm, 20 SGD
#             steps on N ranks x 8 sequences against one process x 8N on rank 0's GPU (worst
#             relative parameter difference), replicas bitwise equal
#   resnet50  examples/resnet50_cifar10 --gpus N, batch 256 per GPU, fp16 + GradScaler,
#             channels-last, synthetic data: images/s after the first step, against
#             torchrun scripts/device/torch_ddp.py resnet50 (the same recipe in PyTorch DDP);
#             targets: >= 1.9x one GPU on 2, >= 7.2x on 8
#   gpt2      examples/gpt_train --preset gpt2 --gpus N, bf16, GPT_BATCH x GPT_T per GPU,
#             synthetic tokens, captured steps: tokens/s of the whole run (its table's column,
#             steady iterations) against torch_ddp.py gpt2 (the anchor's GPT-2 124M, B x T per GPU)
set -u
FINAL_OUT=${OUT:-/tmp/out}
OUT=/tmp/ddplogs
rm -rf "$OUT"; mkdir -p "$OUT" "$FINAL_OUT"
. scripts/device/env.sh
STAGES=${STAGES:-"build equal resnet50 gpt2"}
has() { case " $STAGES " in *" $1 "*) return 0;; esac; return 1; }
summary=()
note() { summary+=("$1"); echo "== $1"; }
t0=$(date +%s)
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
counts="1"
for n in ${GPUS:-2 4 8}; do [ "$n" -le "$ngpu" ] && counts="$counts $n"; done
note "GPUs: $ngpu; measuring on: $counts"
STEPS=${STEPS:-60}
BATCH=${BATCH:-256}
# NCCL: the library loads libnccl.so.2 by name; point it at the toolkit's copy when the
# loader's path does not have it
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 '; then
  for f in /usr/local/cuda/lib64/libnccl.so.2 /usr/local/cuda/lib/libnccl.so.2 /usr/lib/x86_64-linux-gnu/libnccl.so.2; do
    [ -f "$f" ] && { export DLT_NCCL_LIBRARY=$f; break; }
  done
fi
export DLT_DIST_TIMEOUT=${DLT_DIST_TIMEOUT:-600}
RUN=build-gpu/examples/dltrain-run

if has build; then
  if [ ! -x build-gpu/tests/cuda_dist ]; then
    rm -rf build-gpu
    if meson setup build-gpu -Dcuda=enabled -Dwerror=false >"$OUT/setup.log" 2>&1 &&
       ninja -C build-gpu -j$(nproc) >"$OUT/build.log" 2>&1; then
      note "build: ok ($(( $(date +%s) - t0 )) s)"
    else
      tail -40 "$OUT/setup.log" "$OUT/build.log"; note "build: FAILED"
      printf '%s\n' "${summary[@]}"; tar czf "$FINAL_OUT/logs.tgz" -C "$OUT" .; exit 1
    fi
  else
    note "build: reusing build-gpu"
  fi
fi

if has equal; then
  eq=${EQUAL_GPUS:-${counts##* }}
  if [ "$eq" -lt 2 ]; then
    note "equal: skipped (one GPU)"
  else
    t=$(date +%s)
    timeout 900 $RUN -n "$eq" build-gpu/tests/cuda_dist >"$OUT/equal.txt" 2>&1
    note "equal on $eq GPUs rc=$? ($(( $(date +%s) - t )) s): $(grep -E '^# [0-9]+ ranks' "$OUT/equal.txt" | head -1) $(grep -cE '^not ok' "$OUT/equal.txt") failed"
  fi
fi

# images/s after the first step, from the example's epoch line
steady() { sed -nE 's/.*after the first step: [0-9]+ steps in [0-9.]+ s, ([0-9]+) images\/s.*/\1/p' "$1" | head -1; }

rows=()
if has resnet50; then
  base_ours=""; base_torch=""
  for n in $counts; do
    t=$(date +%s)
    log="$OUT/resnet50-ours-$n.txt"
    timeout 900 build-gpu/examples/resnet50_cifar10 --gpus "$n" --batch "$BATCH" --steps $((STEPS + 1)) --epochs 1 \
      --log-every 0 --amp fp16 --format nhwc >"$log" 2>&1
    rc=$?
    ours=$(steady "$log")
    tlog="$OUT/resnet50-torch-$n.txt"
    B=$BATCH STEPS=$STEPS timeout 900 torchrun --standalone --nproc-per-node "$n" scripts/device/torch_ddp.py resnet50 \
      >"$tlog" 2>&1
    trc=$?
    torch=$(grep -o '"per_s_all_gpus": [0-9.]*' "$tlog" | awk '{print $2}' | head -1)
    [ "$n" = 1 ] && { base_ours=$ours; base_torch=$torch; }
    sp_o=$(awk -v a="${ours:-0}" -v b="${base_ours:-0}" 'BEGIN{if (b>0) printf "%.2fx", a/b; else print "-"}')
    sp_t=$(awk -v a="${torch:-0}" -v b="${base_torch:-0}" 'BEGIN{if (b>0) printf "%.2fx", a/b; else print "-"}')
    rows+=("| resnet50 | $n | $BATCH | ${ours:-rc=$rc} | $sp_o | ${torch:-rc=$trc} | $sp_t |")
    note "resnet50 on $n GPU(s): ours ${ours:-failed rc=$rc} img/s, PyTorch DDP ${torch:-failed rc=$trc} img/s ($(( $(date +%s) - t )) s)"
  done
fi

if has gpt2; then
  gex=build-gpu/examples/gpt_train
  declare -A gours
  if [ -x "$gex" ] && "$gex" --help 2>&1 | grep -q -- '--gpus'; then
    for n in $counts; do
      log="$OUT/gpt2-ours-$n.txt"
      timeout 900 "$gex" --preset gpt2 --gpus "$n" --batch "${GPT_BATCH:-16}" --context "${GPT_T:-1024}" \
        --iters $((STEPS + 2)) --eval-interval 0 --log-interval 10 --amp bf16 >"$log" 2>&1
      rc=$?
      gours[$n]=$(grep '^| gpt2 ' "$log" | awk -F'|' '{gsub(/ /, "", $6); print $6}' | tail -1)
      note "gpt2 ours on $n GPU(s) rc=$rc: ${gours[$n]:-no table} tokens/s"
    done
  else
    note "gpt2 ours: skipped (examples/gpt_train missing or without --gpus; docs/distributed.md says how it takes it)"
  fi
  base_torch=""
  for n in $counts; do
    tlog="$OUT/gpt2-torch-$n.txt"
    ANCHORS=.device/anchors CONFIG=gpt2 B=${GPT_BATCH:-16} T=${GPT_T:-1024} STEPS=$STEPS timeout 900 \
      torchrun --standalone --nproc-per-node "$n" scripts/device/torch_ddp.py gpt2 >"$tlog" 2>&1
    trc=$?
    torch=$(grep -o '"per_s_all_gpus": [0-9.]*' "$tlog" | awk '{print $2}' | head -1)
    [ "$n" = 1 ] && base_torch=$torch
    sp_t=$(awk -v a="${torch:-0}" -v b="${base_torch:-0}" 'BEGIN{if (b>0) printf "%.2fx", a/b; else print "-"}')
    sp_o=$(awk -v a="${gours[$n]:-0}" -v b="${gours[1]:-0}" 'BEGIN{if (b>0) printf "%.2fx", a/b; else print "-"}')
    rows+=("| gpt2 (tokens/s) | $n | ${GPT_BATCH:-16}x${GPT_T:-1024} | ${gours[$n]:-see log} | $sp_o | ${torch:-rc=$trc} | $sp_t |")
  done
fi

{
  echo "| model | GPUs | batch/GPU | ours /s | ours vs 1 GPU | PyTorch DDP /s | PyTorch vs 1 GPU |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$OUT/table.md"
echo; echo "==== summary ($(( $(date +%s) - t0 )) s) ===="
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
tar czf "$FINAL_OUT/logs.tgz" -C "$OUT" .
