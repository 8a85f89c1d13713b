#!/usr/bin/env bash
# scripts/device/gpu_check.sh - one call on a lent GPU machine: build with CUDA, run the
# suite (CUDA tests included), compute-sanitizer memcheck over the CUDA test programs, the
# ResNet50 example, and the PyTorch-side scripts; logs under $OUT, a short table at the end.
#
#   carry: .device (debs, cifar10 subset, anchors)      run from the repository root
#   env:   STAGES="build test memcheck nccl example fixtures interop" (default: those; also
#          sanitize longrun detcost startup bnimpl memcap bench profile autotune parity
#          convgemm: bench at CONVGEMM_BATCHES (64,256,1024) with DLT_CONV_GEMM=0, 1, 2;
#          bnone: bench at BNONE_BATCHES (64,256,1024) with DLT_BN_ONE_KERNEL=0, 1;
#          convpad: bench at CONVPAD_BATCHES (64,256,1024) with DLT_CONV_PAD_CHANNELS=0, 4, 8,
#          the stem's padded channels: 4 was best on the H200, other GPUs may differ)
#          nccl (dist, issue 21): tests/cuda_dist on one GPU (a one-rank NCCL communicator,
#          DDP's side stream, NCCL all-reduce and found-inf reduction inside a captured step),
#          then again under compute-sanitizer memcheck; several GPUs: scripts/device/ddp_check.sh
#          MEMCAP="-/- 8388608/4194304 -/-/0" (DLT_GRAD_QUEUE_MAX/DLT_WORKSPACE_MAX[/DLT_GRAPH_ARENA],
#          - = unset)
#          MEMCAP_AMP=fp16,bf16
#          autotune: bench at AUTOTUNE_BATCHES (64,256) with DLT_CUDNN_AUTOTUNE=0, 1
#          BNIMPL_MAX="0 default 1000000000 0/4194304" (DLT_BN_NATIVE_MAX values, F/B for
#          forward/backward apart)  BNIMPL_AMP=fp16
#          MEMCHECK_TESTS="cuda_tensor cuda_optim test_harden:cuda ..."  (prog[:DLT_TEST_GROUPS])
#          SANITIZE_TOOLS="racecheck initcheck"  LONGRUN_EPOCHS=10
#          DLT_GPU_ARCH=90 (meson's gpu_arch for build-gpu; auto: the fat binary)
#   gpt_profile: Nsight Compute's kernel times of one GPT-2 step (GPT_PROFILE_ARGS, bench_gpt's
#          options; default batch 16 bf16 eager), summed per kernel by scripts/device/ncu_summary.py.
#   timeline: Nsight Systems over the replayed step (graph nodes as rows) of ResNet50
#          (TIMELINE_BATCH, default 256, fp16 channels-last) and GPT-2 (16 x 1024 bf16): the
#          step's busy and idle time and the time per kind (scripts/device/nsys_timeline.py);
#          about 1-2 minutes. Not yet run: the lent H200 has no nsys (2026-12-02); the stage
#          then says so and skips.
#   GPT (issue 17): STAGES="build gpt" runs every GPT stage (gpt = gpt_tests gpt_bench
#          gpt_recipe gpt_fp16 gpt_hf); each can be named alone. They need build-gpu (the
#          build stage, or a warm machine's earlier call), .device/anchors with torch_gpt2.py,
#          run_llmc.sh + llmc-f1e2ace.tar.xz, run_nanogpt.sh + nanogpt-3adf61e.tar.xz, and
#          .device/data/tinyshakespeare/input.txt (cp -r ../shared/anchors ../shared/data
#          .device/); PyTorch and transformers on the machine. Rough H200 times: build 3-4
#          min, gpt_tests 2 min, gpt_bench 6-8 min, gpt_recipe 3-4 min (ours ~1, nanoGPT eager
#          2+), gpt_fp16 1 min, gpt_hf 1 min: over one call's 10 minutes together, so split
#          them, e.g. STAGES="build gpt_tests gpt_recipe gpt_fp16 gpt_hf", then STAGES=gpt_bench.
#          GPT_NANOGPT_COMPILE="False" ("True False": also nanoGPT with torch.compile).
#          GPT_RECIPE_TIMEOUT=270 (s, each side of gpt_recipe), GPT_RECIPE_ARGS (e.g. "--sdp flash").
#   flash (issue 18): STAGES="build flash" (needs build-gpu): cuda_op_table's group "flash"
#          (the attention rows with dlt_ctx_set_flash_sdp on, f16/bf16, against the CPU, and
#          the check that the flash kernels served the call), the same under compute-sanitizer
#          memcheck and racecheck, then bench_gpt --sdp math beside --sdp flash (FLASH_BATCHES,
#          default 16, context 1024, bf16, eager and graph), and the Shakespeare recipe's first
#          500 iterations with each (the loss curves must agree). About 4-6 minutes on an H200.
set -u
# Logs go to a scratch folder and come back as one archive (the tool returns few files).
FINAL_OUT=${OUT:-/tmp/out}
OUT=/tmp/gpulogs
rm -rf "$OUT"; mkdir -p "$OUT" "$FINAL_OUT"
. scripts/device/env.sh
STAGES=${STAGES:-"build test memcheck nccl example fixtures interop"}
# gptex: "gpt" names every GPT stage
case " $STAGES " in *" gpt "*) STAGES="$STAGES gpt_tests gpt_bench gpt_recipe gpt_fp16 gpt_hf";; esac
has() { case " $STAGES " in *" $1 "*) return 0;; esac; return 1; }
export DLT_CIFAR10_DIR=$(pwd)/.device/cifar10
# the CUDA test programs, split so compute-sanitizer runs them as parallel processes
CUDA_TEST_SPECS="cuda_tensor cuda_ops cuda_conv_pad cuda_elementwise cuda_op_table cuda_op_table:cudnn cuda_optim cuda_graph cuda_data cuda_nn cuda_side cuda_train cuda_conv_bn:cudnn cuda_conv_bn:native cuda_conv_bn:native-two cuda_conv_bn:autotune cuda_conv_bn:cudnn-running cuda_conv_bn:async cuda_conv_bn:workspace0 cuda_conv_bn:cudnn-only cuda_conv_bn:gemm1 test_harden:cuda"
summary=()
note() { summary+=("$1"); echo "== $1"; }
t0=$(date +%s)

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  nvcc --version | tail -1
  meson --version
  for h in /usr/include/x86_64-linux-gnu/cudnn_version.h /usr/include/cudnn_version.h /usr/local/cuda/include/cudnn_version.h; do
    [ -f "$h" ] && echo "$h: $(grep -E '#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ' "$h" | awk '{print $3}' | tr '\n' '.')"
  done
  python3 -c 'import torch; print("torch", torch.__version__, torch.backends.cudnn.version())' 2>/dev/null
} 2>&1 | tee "$OUT/env.txt"

if has build; then
  rm -rf build-gpu
  # build: the lent GPU's architecture only (the default fat binary compiles ~4x longer);
  # DLT_GPU_ARCH=auto checks the fat binary on the device
  if meson setup build-gpu -Dcuda=enabled -Dwerror=false -Dgpu_arch="${DLT_GPU_ARCH:-90}" >"$OUT/setup.log" 2>&1 &&
     ninja -C build-gpu -j16 >"$OUT/build.log" 2>&1; then
    note "build: ok ($(( $(date +%s) - t0 )) s)"
  else
    tail -40 "$OUT/setup.log" "$OUT/build.log"; note "build: FAILED"
    printf '%s\n' "${summary[@]}"; tar czf "$FINAL_OUT/logs.tgz" -C "$OUT" .; exit 1
  fi
fi

if has test; then
  t=$(date +%s)
  meson test -C build-gpu --num-processes 4 --timeout-multiplier ${TEST_TIMEOUT_MULT:-1} \
    --print-errorlogs ${TEST_ARGS:-} >"$OUT/test.log" 2>&1
  cp build-gpu/meson-logs/testlog.txt "$OUT/testlog.txt" 2>/dev/null
  grep -E '^ *[0-9]+/[0-9]+ ' "$OUT/test.log" | sed 's/^ *//' > "$OUT/test-summary.txt"
  python3 - build-gpu <<'PY' | tee "$OUT/counts.txt"
import json, re, sys
p=f=s=0
for line in open(sys.argv[1]+"/meson-logs/testlog.json"):
    r=json.loads(line)
    for l in (r.get("stdout") or "").splitlines():
        m=re.match(r"^(not ok|ok)\b.*?(#\s*SKIP.*)?$", l)
        if not m: continue
        if m.group(1)=="not ok": f+=1; print("FAILED", r["name"], l)
        elif m.group(2): s+=1
        else: p+=1
print(f"{p} passed, {f} failed, {s} skipped")
PY
  note "tests: $(tail -1 "$OUT/counts.txt") ($(( $(date +%s) - t )) s)"
fi

# compute-sanitizer: sanitize_run TOOL LIMIT_S "SPECS" [tool options] starts one process per
# spec (prog[:DLT_TEST_GROUPS]) in the background, each with its own log; after `wait`,
# sanitize_notes TOOL adds a summary line per log.
sanitize_run() {
  local tool=$1 limit=$2 specs=$3 spec tname group log
  shift 3
  for spec in $specs; do
    tname=${spec%%:*}; group=""; [ "$spec" != "$tname" ] && group=${spec#*:}
    [ -x build-gpu/tests/$tname ] || continue
    log="$OUT/$tool-$tname${group:+-$group}.log"
    ( DLT_TEST_GROUPS=$group DLT_SOURCE_ROOT=$(pwd) timeout "$limit" compute-sanitizer --tool "$tool" \
        "$@" --error-exitcode 99 build-gpu/tests/$tname >"$log" 2>&1
      echo "rc=$?" >>"$log" ) &
  done
}
sanitize_notes() {
  local f
  for f in "$OUT"/$1-*.log; do
    [ -f "$f" ] || continue
    note "$(basename "$f" .log): $(tail -1 "$f"), $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tail -1 | sed 's/=* *//'), $(grep -cE '^(ok|not ok)' "$f") cases, $(grep -c '^not ok' "$f") failed"
  done
}

if has memcheck; then
  # in parallel: the GPU has room for all of them, and memcheck is CPU-bound
  t=$(date +%s)
  sanitize_run memcheck ${MEMCHECK_TIMEOUT:-240} "${MEMCHECK_TESTS:-$CUDA_TEST_SPECS}" \
    --leak-check full --report-api-errors no
  wait
  sanitize_notes memcheck
  note "memcheck time: $(( $(date +%s) - t )) s"
fi

if has nccl; then
  # libnccl.so.2 by name; the toolkit's copy when the loader's path lacks it
  if ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 '; then
    for f in /usr/local/cuda/lib64/libnccl.so.2 /usr/local/cuda/lib/libnccl.so.2; do
      [ -f "$f" ] && { export DLT_NCCL_LIBRARY=$f; break; }
    done
  fi
  t=$(date +%s)
  timeout 300 build-gpu/tests/cuda_dist >"$OUT/nccl.txt" 2>&1
  note "cuda_dist rc=$?: $(grep -cE '^ok' "$OUT/nccl.txt") ok, $(grep -cE '^not ok' "$OUT/nccl.txt") failed, $(grep -E '^# captured' "$OUT/nccl.txt")"
  timeout 600 compute-sanitizer --tool memcheck --leak-check full --report-api-errors no --error-exitcode 99 \
    build-gpu/tests/cuda_dist >"$OUT/nccl-memcheck.txt" 2>&1
  note "cuda_dist under memcheck rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/nccl-memcheck.txt" | tail -1 | sed 's/=* *//'), $(grep -cE '^not ok' "$OUT/nccl-memcheck.txt") failed ($(( $(date +%s) - t )) s)"
fi

if has sanitize; then
  # racecheck (shared-memory hazards) and initcheck (reads of uninitialised device memory)
  t=$(date +%s)
  for tool in ${SANITIZE_TOOLS:-racecheck initcheck}; do
    sanitize_run $tool ${SANITIZE_TIMEOUT:-300} "${SANITIZE_TESTS:-$CUDA_TEST_SPECS}"
  done
  wait
  for tool in ${SANITIZE_TOOLS:-racecheck initcheck}; do sanitize_notes $tool; done
  note "sanitize time: $(( $(date +%s) - t )) s"
fi

if has longrun; then
  # memory over a long run: the library's own counters after each epoch, and the device's
  # used memory as nvidia-smi sees it (cuDNN/cuBLAS internals included), once a second
  t=$(date +%s)
  nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader -lms 1000 >"$OUT/longrun-smi.csv" 2>&1 &
  smi=$!
  ./build-gpu/examples/resnet50_cifar10 --epochs ${LONGRUN_EPOCHS:-10} --log-every 0 >"$OUT/longrun.txt" 2>&1
  rc=$?
  kill $smi 2>/dev/null; wait $smi 2>/dev/null
  note "longrun ${LONGRUN_EPOCHS:-10} epochs rc=$rc ($(( $(date +%s) - t )) s)"
  grep -E '^(epoch|memory after)' "$OUT/longrun.txt" | sed 's/^/   /'
  awk -F', ' '{gsub(/ MiB/,"",$2); v[NR]=$2+0} END {n=NR; if (n<3) exit; min=v[int(n/4)+1]; max=min;
    for (i=int(n/4)+1;i<n;i++){if(v[i]<min)min=v[i]; if(v[i]>max)max=v[i]}
    printf "   nvidia-smi memory.used over the last 3/4 of the run (%d samples): min %d MiB, max %d MiB\n", n-1-int(n/4), min, max}' \
    "$OUT/longrun-smi.csv" | tee -a "$OUT/longrun.txt"
fi

if has detcost; then
  t=$(date +%s)
  build-gpu/examples/bench --batch 256 --amp fp16 --format nhwc --mode eager,graph >"$OUT/detcost.txt" 2>&1
  build-gpu/examples/bench --batch 256 --amp fp16 --format nhwc --mode eager,graph --deterministic >>"$OUT/detcost.txt" 2>&1
  note "determinism cost ($(( $(date +%s) - t )) s):"
  grep -E '^(#|\| 256)' "$OUT/detcost.txt" | sed 's/^/   /'
fi

if has startup; then
  # time to the first step: BatchNorm plans built in the background (the default) or in the
  # calling thread, with the driver's JIT cache off (a fresh machine) and as it is; then the
  # example's first two epochs (the short last batch of epoch 0 is a new BN shape)
  t=$(date +%s)
  B="build-gpu/examples/bench --batch 256 --amp fp16 --format nhwc --mode eager,graph --warmup 3 --blocks 3 --log"
  { echo "## in the calling thread (DLT_BN_ASYNC_PLANS=0), CUDA_CACHE_DISABLE=1"; DLT_BN_ASYNC_PLANS=0 CUDA_CACHE_DISABLE=1 $B
    echo "## background (default), CUDA_CACHE_DISABLE=1"; CUDA_CACHE_DISABLE=1 $B
    echo "## background (default), JIT cache as it is"; $B; } >"$OUT/startup.txt" 2>&1
  note "startup ($(( $(date +%s) - t )) s):"
  grep -E '^(##|\| 256)|plans built' "$OUT/startup.txt" | sed 's/^/   /'
  t=$(date +%s)
  ./build-gpu/examples/resnet50_cifar10 --epochs 2 --log-every 0 >"$OUT/startup-example.txt" 2>&1
  note "resnet50_cifar10 2 epochs synthetic rc=$? ($(( $(date +%s) - t )) s)"
  grep -E '^(epoch|first step)' "$OUT/startup-example.txt" | sed 's/^/   /'
fi

if has bnimpl; then
  # BatchNorm implementation by size: cuDNN for every BN (DLT_BN_NATIVE_MAX=0), the default
  # threshold, our single-pass kernels for every channels-last BN
  t=$(date +%s)
  B="build-gpu/examples/bench --batch ${BENCH_BATCHES:-64,256,1024} --amp ${BNIMPL_AMP:-fp16} --format nhwc --mode graph"
  for m in ${BNIMPL_MAX:-0 default 1000000000}; do
    # "F/B": forward and backward thresholds apart (DLT_BN_NATIVE_MAX, DLT_BN_NATIVE_MAX_BWD)
    echo "## DLT_BN_NATIVE_MAX=$m"
    case "$m" in
      default) $B;;
      */*) DLT_BN_NATIVE_MAX=${m%/*} DLT_BN_NATIVE_MAX_BWD=${m#*/} $B;;
      *) DLT_BN_NATIVE_MAX=$m $B;;
    esac
  done >"$OUT/bnimpl.txt" 2>&1
  note "BN implementation by size ($(( $(date +%s) - t )) s):"
  grep -E '^(##|\| [0-9])' "$OUT/bnimpl.txt" | sed 's/^/   /'
fi

if has memcap; then
  # peak memory against speed at batch 256: the fp16 gradient queue limit and the workspace
  # limit, alone and together ("Q/W" bytes, "-" for unset)
  t=$(date +%s)
  for m in ${MEMCAP:-"-/-" "8388608/-" "-/4194304" "8388608/4194304" "4194304/4194304"}; do
    IFS=/ read -r q w a <<<"$m"; a=${a:--}
    echo "## DLT_GRAD_QUEUE_MAX=$q DLT_WORKSPACE_MAX=$w DLT_GRAPH_ARENA=$a"
    e=()
    [ "$q" != - ] && e+=("DLT_GRAD_QUEUE_MAX=$q")
    [ "$w" != - ] && e+=("DLT_WORKSPACE_MAX=$w")
    [ "$a" != - ] && e+=("DLT_GRAPH_ARENA=$a")
    env "${e[@]}" build-gpu/examples/bench --batch ${MEMCAP_BATCHES:-256} --amp ${MEMCAP_AMP:-fp16,bf16} --format nhwc --mode graph --log
  done >"$OUT/memcap.txt" 2>&1
  note "memory caps ($(( $(date +%s) - t )) s):"
  grep -E '^(##|\| [0-9])|graph memory' "$OUT/memcap.txt" | sed 's/^/   /'
fi

if has bench; then
  t=$(date +%s)
  BUILD=build-gpu ANCHORS=.device/anchors BATCHES=${BENCH_BATCHES:-256} BENCH_ARGS="${BENCH_ARGS:-}" \
    COMPARE_ARGS="${COMPARE_ARGS:-}" bash scripts/bench_vs_torch.sh >"$OUT/bench.txt" 2>&1
  note "bench rc=$? ($(( $(date +%s) - t )) s)"
  grep -E '^\|' "$OUT/bench.txt" | tail -20
fi

if has example; then
  t=$(date +%s)
  ./build-gpu/examples/gpu_report --quick >"$OUT/gpu_report.txt" 2>&1; note "gpu_report rc=$?"
  ./build-gpu/examples/resnet50_cifar10 --epochs 1 --log-every 49 >"$OUT/example-resnet50.txt" 2>&1
  note "resnet50_cifar10 1 epoch synthetic rc=$?: $(grep -E '^epoch 0' "$OUT/example-resnet50.txt" | head -1)"
  ./build-gpu/examples/grad_accum --epochs 1 --log-every 49 >"$OUT/example-grad-accum.txt" 2>&1
  note "grad_accum 1 epoch synthetic rc=$?: $(grep -E '^epoch 0' "$OUT/example-grad-accum.txt" | head -1)"
  ./build-gpu/examples/resnet50_cifar10 --data .device/cifar10 --epochs 3 --eval --log-every 20 >"$OUT/example-real.txt" 2>&1
  # --mode graph (one captured step, replayed) beside eager: same seed, the losses should track
  for m in eager graph; do
    ./build-gpu/examples/resnet50_cifar10 --data .device/cifar10 --epochs 3 --eval --log-every 0 --mode $m \
      >"$OUT/example-mode-$m.txt" 2>&1
    note "resnet50_cifar10 --mode $m rc=$?: $(grep -E '^Epoch|^epoch [0-9]' "$OUT/example-mode-$m.txt" | tr '\n' ' ' | cut -c1-400)"
  done
  note "resnet50_cifar10 3 epochs real subset rc=$?: $(grep -E '^epoch 2' "$OUT/example-real.txt" | head -1)"
  DLTRAIN_LIBRARY=$(pwd)/build-gpu/libdltrain.so PYTHONPATH=$(pwd)/bindings/python \
    python3 examples/python/resnet50_cifar10.py --device cuda --steps 20 >"$OUT/example-python.txt" 2>&1
  note "python resnet50 20 steps cuda rc=$?: $(tail -2 "$OUT/example-python.txt" | tr '\n' ' ')"
  note "examples: $(( $(date +%s) - t )) s"
fi

if has profile; then
  # per-kernel device time of one training step (kernels inside the "profile_step" range)
  t=$(date +%s)
  DLT_BENCH_PROFILE=1 timeout ${PROFILE_TIMEOUT:-200} ncu --nvtx --nvtx-include "profile_step/" \
    --metrics gpu__time_duration.sum --csv --print-units base --clock-control none \
    build-gpu/examples/bench ${PROFILE_ARGS:---batch 256 --amp fp16 --format nhwc --mode eager --steps 1 --blocks 1 --warmup 3} \
    >"$OUT/ncu.csv" 2>"$OUT/ncu.err"
  note "profile rc=$? ($(( $(date +%s) - t )) s)"
  python3 scripts/device/ncu_summary.py "$OUT/ncu.csv" | tee "$OUT/ncu-summary.txt" | head -45
fi

if has gpt_profile; then
  # per-kernel device time of one GPT-2 training step (bench_gpt marks it "profile_step";
  # GPT_PROFILE_ARGS: bench_gpt options). ncu's stderr comes back in the logs: a run that
  # profiled nothing says why there.
  t=$(date +%s)
  DLT_BENCH_PROFILE=1 timeout ${PROFILE_TIMEOUT:-200} ncu --nvtx --nvtx-include "profile_step/" \
    --metrics gpu__time_duration.sum --csv --print-units base --clock-control none \
    build-gpu/examples/bench_gpt ${GPT_PROFILE_ARGS:---batch 16 --amp bf16 --mode eager --steps 1 --blocks 1 --warmup 2} \
    >"$OUT/ncu-gpt.csv" 2>"$OUT/ncu-gpt.err"
  note "gpt_profile rc=$? ($(( $(date +%s) - t )) s)"
  python3 scripts/device/ncu_summary.py "$OUT/ncu-gpt.csv" | tee "$OUT/ncu-gpt-summary.txt" | head -45
  [ -s "$OUT/ncu-gpt-summary.txt" ] || tail -15 "$OUT/ncu-gpt.err"
fi

if has timeline; then
  # the replayed step on the GPU's timeline (Nsight Systems, every graph node a row): busy
  # against idle time and the time per kind (scripts/device/nsys_timeline.py); ResNet50 at
  # TIMELINE_BATCH (256) fp16 channels-last, then GPT-2 at 16 x 1024 bf16; one step per block
  if command -v nsys >/dev/null; then
    for w in "resnet50:bench --batch ${TIMELINE_BATCH:-256} --amp fp16 --format nhwc" "gpt2:bench_gpt --batch 16 --context 1024 --amp bf16"; do
      t=$(date +%s)
      timeout ${TIMELINE_TIMEOUT:-120} nsys profile --cuda-graph-trace=node -o "/tmp/tl-${w%%:*}" --force-overwrite true \
        build-gpu/examples/${w#*:} --mode graph --steps 1 --blocks 3 --warmup 3 >"$OUT/timeline-${w%%:*}.txt" 2>&1
      rc=$?
      nsys stats -r cuda_gpu_trace -f csv -o "/tmp/tl-${w%%:*}" "/tmp/tl-${w%%:*}.nsys-rep" >/dev/null 2>&1
      note "timeline ${w%%:*} rc=$rc ($(( $(date +%s) - t )) s)"
      python3 scripts/device/nsys_timeline.py "/tmp/tl-${w%%:*}_cuda_gpu_trace.csv" | tee "$OUT/timeline-${w%%:*}-summary.txt" | sed 's/^/   /'
    done
  else
    note "timeline: no nsys on this machine"
  fi
fi

# bench_ab STAGE VAR BATCHES VALUES...: the graph bench (fp16, bf16, channels-last) once per
# value of the environment variable VAR, same binary, one table each
bench_ab() {
  local stage=$1 var=$2 batches=$3 v t
  shift 3
  t=$(date +%s)
  for v in "$@"; do
    env "$var=$v" build-gpu/examples/bench --batch "$batches" --amp fp16,bf16 --format nhwc --mode graph \
      >"$OUT/bench-$stage-$v.txt" 2>&1
    note "bench with $var=$v rc=$?:"
    grep -E '^\| [0-9]' "$OUT/bench-$stage-$v.txt" | tr -s ' ' | sed 's/^/   /'
  done
  note "$stage: $(( $(date +%s) - t )) s"
}
# which convolutions run as cuBLASLt GEMMs (DLT_CONV_GEMM 0/1/2, docs/ops.md)
has convgemm && bench_ab convgemm DLT_CONV_GEMM "${CONVGEMM_BATCHES:-64,256,1024}" 0 1 2
# BatchNorm as one kernel per direction or two launches (DLT_BN_ONE_KERNEL, docs/ops.md)
has bnone && bench_ab bnone DLT_BN_ONE_KERNEL "${BNONE_BATCHES:-64,256,1024}" 0 1
# the stem's input channels padded for cuDNN (DLT_CONV_PAD_CHANNELS, docs/ops.md)
has convpad && bench_ab convpad DLT_CONV_PAD_CHANNELS "${CONVPAD_BATCHES:-64,256,1024}" 0 4 8
# cuDNN's engines timed per convolution shape or the heuristic's first choice (at batch 64
# the stem's weight gradient is 4x slower than at 256 with the heuristic: performance.md)
has autotune && bench_ab autotune DLT_CUDNN_AUTOTUNE "${AUTOTUNE_BATCHES:-64,256}" 0 1

if has parity && [ -f tests/interop/torch_train_parity.py ]; then
  t=$(date +%s)
  timeout ${PARITY_TIMEOUT:-300} python3 tests/interop/torch_train_parity.py --lib build-gpu/libdltrain.so \
    --data .device/cifar10 --device cuda >"$OUT/parity.txt" 2>&1
  note "parity rc=$? ($(( $(date +%s) - t )) s)"
  tail -40 "$OUT/parity.txt"
fi

if has fixtures && [ -f tests/fixtures/gen_resnet_fixture.py ]; then
  (cd tests/fixtures && python3 gen_resnet_fixture.py) >"$OUT/fixtures.log" 2>&1
  note "fixtures rc=$?"
  mkdir -p "$OUT/fixtures"; cp tests/fixtures/*.txt "$OUT/fixtures/" 2>/dev/null
fi

if has interop && [ -f tests/interop/torch_interop.py ]; then
  timeout 300 python3 tests/interop/torch_interop.py --exe build-gpu/tests/resnet_io >"$OUT/interop.log" 2>&1
  note "interop rc=$?: $(tail -3 "$OUT/interop.log" | tr '\n' ' ')"
fi

# ---- gptex (issue 17): the GPT example, bench, recipe, fp16 run and Hugging Face interop ----
SHK=.device/data/tinyshakespeare/input.txt
[ -f "$SHK" ] || SHK=../shared/data/tinyshakespeare/input.txt
GPT_ANCHORS=.device/anchors
[ -d "$GPT_ANCHORS" ] || GPT_ANCHORS=../shared/anchors
if has gpt_tests; then
  t=$(date +%s)
  meson test -C build-gpu --print-errorlogs cuda_op_table cuda_nn cuda_optim cuda_graph cuda_data test_gpt test_resume \
    gpt_examples >"$OUT/gpt-tests.txt" 2>&1
  note "gpt tests rc=$? ($(( $(date +%s) - t )) s): $(grep -cE '^ *[0-9]+/[0-9]+ .* OK ' "$OUT/gpt-tests.txt") OK, $(grep -cE '^ *[0-9]+/[0-9]+ .* FAIL ' "$OUT/gpt-tests.txt") FAIL"
  grep -hE '^(not ok|ok .*SKIP)' build-gpu/meson-logs/testlog.txt 2>/dev/null | head -20
fi
if has gpt_bench; then
  t=$(date +%s)
  BUILD=build-gpu ANCHORS=$GPT_ANCHORS OUTDIR="$OUT/gpt-bench" BATCHES=${GPT_BATCHES:-16,32} \
    bash scripts/bench_gpt_vs_peers.sh >"$OUT/gpt-bench.txt" 2>&1
  note "gpt bench beside PyTorch and llm.c rc=$? ($(( $(date +%s) - t )) s):"
  sed -n '/^# GPT-2 training step/,$p' "$OUT/gpt-bench.txt" | sed 's/^/   /'
fi
if has gpt_recipe; then
  # nanoGPT's Shakespeare recipe: ours, then nanoGPT itself (wall time of the whole run each)
  t=$(date +%s)
  rm -rf /tmp/gpt-recipe
  # each run bounded (GPT_RECIPE_TIMEOUT s) so one slow side cannot take the call's whole
  # 10 minutes (2026-12-01: ours at 96 ms/iteration needed ~8 min and nanoGPT never ran)
  timeout ${GPT_RECIPE_TIMEOUT:-270} ./build-gpu/examples/gpt_train --text "$SHK" --recipe shakespeare-char \
    --out /tmp/gpt-recipe --sample 300 ${GPT_RECIPE_ARGS:-} \
    --json "$OUT/gpt-recipe.json" >"$OUT/gpt-recipe.txt" 2>&1
  rc=$?; ours_s=$(( $(date +%s) - t ))
  note "gpt_train --recipe shakespeare-char rc=$rc: $ours_s s for the whole run; best: $(grep '^step' "$OUT/gpt-recipe.txt" | sort -t' ' -k8 -n | head -1)"
  grep -E '^\| shakespeare|^epoch =|^first step' "$OUT/gpt-recipe.txt" | sed 's/^/   /'
  t=$(date +%s)
  NANOGPT_WORK=/tmp/nanogpt-anchor timeout ${GPT_RECIPE_TIMEOUT:-270} bash "$GPT_ANCHORS/run_nanogpt.sh" ${GPT_NANOGPT_COMPILE:-False} \
    >"$OUT/gpt-recipe-nanogpt.txt" 2>&1
  note "nanoGPT recipe rc=$? ($(( $(date +%s) - t )) s): $(grep -E 'for the whole run' "$OUT/gpt-recipe-nanogpt.txt" | tr '\n' ' ')"
  sed 's/^/   /' "$OUT/gpt-recipe-nanogpt.txt" | tail -12
fi
if has gpt_fp16; then
  # GPT-2 124M on the Shakespeare characters, 200 steps: fp16 + GradScaler beside bf16
  t=$(date +%s)
  for amp in fp16 bf16; do
    ./build-gpu/examples/gpt_train --preset gpt2 --text "$SHK" --amp $amp --batch 16 --context 1024 --iters 200 \
      --eval-interval 50 --eval-iters 20 --log-interval 10 --json "$OUT/gpt-$amp.json" >"$OUT/gpt-$amp.txt" 2>&1
    note "gpt2 200 steps $amp rc=$?: $(grep '^step 200' "$OUT/gpt-$amp.txt")"
  done
  paste <(sed -nE 's/^iter ([0-9]+): loss ([^,]+),.*/\1 \2/p' "$OUT/gpt-fp16.txt") \
        <(sed -nE 's/^iter [0-9]+: loss ([^,]+),.*/\1/p' "$OUT/gpt-bf16.txt") \
    | awk '{printf "   iter %s: loss fp16 %s, bf16 %s\n", $1, $2, $3}'
  note "gpt fp16/bf16 ($(( $(date +%s) - t )) s)"
fi
if has gpt_hf; then
  t=$(date +%s)
  DLTRAIN_LIBRARY=$(pwd)/build-gpu/libdltrain.so PYTHONPATH=$(pwd)/bindings/python timeout 600 \
    python3 scripts/hf_gpt2_interop.py --device cuda >"$OUT/gpt-hf.txt" 2>&1
  note "Hugging Face GPT-2 interop rc=$? ($(( $(date +%s) - t )) s):"
  grep -E '^(ok|FAILED)' "$OUT/gpt-hf.txt" | sed 's/^/   /'
fi

# ---- flash (issue 18): the tensor-core attention kernels (cuda/attention_flash.cu) ----
if has flash; then
  t=$(date +%s)
  DLT_TEST_GROUPS=flash build-gpu/tests/cuda_op_table >"$OUT/flash-table.txt" 2>&1
  note "flash op table rc=$?: $(grep -c '^ok' "$OUT/flash-table.txt") ok, $(grep -c '^not ok' "$OUT/flash-table.txt") not ok, $(grep -c 'SKIP' "$OUT/flash-table.txt") skipped"
  grep -E '^not ok|^# flash engaged|SKIP' "$OUT/flash-table.txt" | head -20 | sed 's/^/   /'
  for tool in memcheck racecheck; do
    extra=""; [ $tool = memcheck ] && extra="--leak-check full --report-api-errors no"
    DLT_TEST_GROUPS=flash timeout ${FLASH_SANITIZE_TIMEOUT:-300} compute-sanitizer --tool $tool $extra \
      --error-exitcode 99 build-gpu/tests/cuda_op_table >"$OUT/flash-$tool.txt" 2>&1
    note "flash $tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/flash-$tool.txt" | tail -1 | sed 's/=* *//'), $(grep -c '^not ok' "$OUT/flash-$tool.txt") failed"
  done
  for sdp in math flash; do
    build-gpu/examples/bench_gpt --batch ${FLASH_BATCHES:-16} --context 1024 --amp bf16 --mode eager,graph \
      --sdp $sdp --json "$OUT/flash-bench-$sdp.json" >"$OUT/flash-bench-$sdp.txt" 2>&1
    note "bench_gpt --sdp $sdp rc=$?:"
    grep -E '^\| [0-9]' "$OUT/flash-bench-$sdp.txt" | sed 's/^/   /'
  done
  for sdp in math flash; do
    timeout 300 ./build-gpu/examples/gpt_train --text "$SHK" --recipe shakespeare-char --iters 500 \
      --eval-interval 250 --sdp $sdp >"$OUT/flash-recipe-$sdp.txt" 2>&1
    note "gpt_train --recipe shakespeare-char --iters 500 --sdp $sdp rc=$?: $(grep '^step' "$OUT/flash-recipe-$sdp.txt" | tail -1)"
  done
  note "flash ($(( $(date +%s) - t )) s)"
fi

echo; echo "==== summary ($(( $(date +%s) - t0 )) s) ===="
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
tar czf "$FINAL_OUT/logs.tgz" -C "$OUT" .
