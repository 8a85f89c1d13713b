#!/usr/bin/env bash
# The GPT examples (issue 17) on the CPU (TAP): examples/gpt_train learns tiny Shakespeare
# (tests/fixtures/shakespeare_6k.txt) with the tiny preset; a resumed run is bitwise the
# uninterrupted one (checkpoint bytes and every logged loss; dropout and accumulation on);
# the graph loop (eager on the CPU) and --eager agree bitwise; --json gives a record
# scripts/check_record.py accepts, with the closing table's numbers; token files in both
# formats; bad input (a missing file, a token >= --vocab, a corrupt llm.c header, bad
# options, no checkpoint to resume) exits 1 or 2 with a message naming it; --recipe sets
# nanoGPT's shakespeare_char values and later options override it; the Python twin
# (examples/python/gpt_train.py) prints the same losses and writes the same checkpoint bytes;
# examples/bench_gpt and bench_attention run on the CPU; the GPU-side scripts parse, and the peers' comparison
# reads canned outputs. On a CUDA build with a GPU: graph vs eager and a deterministic
# resume on the GPU (skipped elsewhere).
#   usage: gpt_examples.sh BUILD/examples SOURCE_ROOT [LIBDLTRAIN_SO|-] [SANITIZE]
bin="$1"; src="$2"; lib="${3:--}"; sanitize="${4:-none}"
# One thread: the tiny model's kernels are too small to share, and on a loaded machine
# OpenMP's waiting threads make them ~20x slower (results do not depend on the count).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
text="$src/tests/fixtures/shakespeare_6k.txt"
py=python3; [ -x /usr/bin/python3 ] && py=/usr/bin/python3
n=0
ok() { n=$((n+1)); echo "ok $n - $1${2:+ # $2}"; }
notok() { n=$((n+1)); echo "not ok $n - $1"; sed 's/^/# /' "$tmp/out" | tail -25; }
skip() { n=$((n+1)); echo "ok $n - $1 # SKIP $2"; }
G="$bin/gpt_train"
# the tiny model on the fixture: small enough for an ASan build
tiny=(--preset tiny --device cpu --text "$text" --batch 8 --context 32 --lr 3e-3 --eval-iters 4 --log-interval 5)
losses() { grep -E '^(iter|step) ' "$1" | sed 's/, time.*//'; }

# 1: it learns, prints the table and a sample in the text's characters
"$G" "${tiny[@]}" --iters 40 --eval-interval 20 --sample 40 >"$tmp/out" 2>&1; rc=$?
first=$(sed -nE 's/^step 0: train loss ([0-9.]+),.*/\1/p' "$tmp/out")
last=$(sed -nE 's/^step 40: train loss ([0-9.]+),.*/\1/p' "$tmp/out")
sample=$(sed -n '/^--- sample/,/^---$/p' "$tmp/out" | sed '1d;$d')
if [ $rc = 0 ] && [ -n "$first" ] && [ -n "$last" ] && awk -v a="$first" -v b="$last" 'BEGIN{exit !(b < 0.85 * a)}' \
   && grep -q '^| tiny ' "$tmp/out" && grep -q 'bf16, 8x32' "$tmp/out" && [ ${#sample} -ge 20 ]; then
  ok "gpt_train learns tiny Shakespeare on the CPU (bf16)" "eval train loss $first -> $last"
else notok "gpt_train learns (rc=$rc, losses '$first' -> '$last')"; fi

# 2: resume == uninterrupted, bitwise (dropout draws and accumulation included)
R=("${tiny[@]}" --dropout 0.1 --accum 2 --eval-interval 10 --lr-decay-iters 30 --warmup-iters 5)
"$G" "${R[@]}" --iters 30 --out "$tmp/full" --save-every 30 >"$tmp/full.log" 2>&1; r1=$?
"$G" "${R[@]}" --iters 15 --out "$tmp/part" --save-every 15 >"$tmp/part1.log" 2>&1; r2=$?
"$G" "${R[@]}" --iters 30 --out "$tmp/part" --save-every 15 --resume >"$tmp/part2.log" 2>&1; r3=$?
cat "$tmp/full.log" "$tmp/part1.log" "$tmp/part2.log" >"$tmp/out"
if [ "$r1$r2$r3" = 000 ] && cmp -s "$tmp/full/ckpt.safetensors" "$tmp/part/ckpt.safetensors" \
   && diff <(losses "$tmp/full.log") <(losses "$tmp/part1.log"; losses "$tmp/part2.log") >/dev/null \
   && grep -q 'resumed from .* at iteration 15' "$tmp/part2.log"; then
  ok "--resume continues bitwise as the uninterrupted run (checkpoint bytes and every loss)"
else notok "resume (rc $r1/$r2/$r3)"; fi

# 3: the graph loop (the CPU runs it eagerly) and --eager: the same bytes
"$G" "${R[@]}" --iters 30 --out "$tmp/eager" --save-every 30 --eager >"$tmp/out" 2>&1; rc=$?
if [ $rc = 0 ] && cmp -s "$tmp/full/ckpt.safetensors" "$tmp/eager/ckpt.safetensors"; then
  ok "--eager and the captured-graph loop train the same weights"
else notok "--eager (rc=$rc)"; fi

# 4: --json: a valid record with the closing table's numbers
"$G" "${tiny[@]}" --iters 12 --eval-interval 6 --amp fp32 --json "$tmp/run.json" >"$tmp/out" 2>&1; rc=$?
if [ $rc = 0 ] && "$py" "$src/scripts/check_record.py" "$tmp/run.json" >>"$tmp/out" 2>&1 && "$py" - "$tmp/run.json" "$tmp/out" >>"$tmp/out" 2>&1 <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); out = open(sys.argv[2]).read()
row = [c.strip() for c in next(l for l in out.splitlines() if l.startswith("| tiny")).strip("|").split("|")]
w, res = r["workload"], r["results"]
assert r["program"]["name"] == "gpt_train" and r["devices"][0]["kind"] == "cpu", r["program"]
assert w["model"] == "tiny" and w["sequence_length"] == 32 and w["batch"] == 8 and w["precision"] == "fp32", w
assert w["dataset"]["sample_unit"] == "tokens" and w["dataset"]["train_samples"] > 5000, w["dataset"]
assert res["kind"] == "training" and res["sample_unit"] == "tokens" and res["iterations"] == 12, res
assert row[3] == "%.2f" % res["epoch_time_s"] and row[4] == "%.0f" % res["throughput_per_s"], (row, res)
assert row[6] == "%.0f" % (res["peak_memory_bytes"] / 1048576.0), row
assert sum(e["steps"] for e in res["epochs"]) == 12 and res["best_val_iter"] == 12, res["epochs"]
PY
then ok "--json writes a record check_record.py accepts, with the table's numbers"
else notok "--json (rc=$rc)"; fi

# 5-6: token files (nanoGPT's raw and llm.c's header) and sampling in ids
"$py" - "$tmp" <<'PY'
import struct, sys
d = sys.argv[1]
toks = [(i * 7 + i // 13) % 50 for i in range(3000)]
open(d + "/train.bin", "wb").write(struct.pack("<%dH" % len(toks), *toks))
open(d + "/val.bin", "wb").write(struct.pack("<%dH" % 500, *toks[:500]))
hdr = [20240520, 1, len(toks)] + [0] * 253
open(d + "/train_llmc.bin", "wb").write(struct.pack("<256i", *hdr) + struct.pack("<%dH" % len(toks), *toks))
bad = list(toks); bad[1234] = 70
open(d + "/bad.bin", "wb").write(struct.pack("<%dH" % len(bad), *bad))
hdr[0] = 12345
open(d + "/badmagic.bin", "wb").write(struct.pack("<256i", *hdr) + struct.pack("<%dH" % len(toks), *toks))
PY
T=(--preset tiny --device cpu --batch 4 --iters 3 --eval-interval 3 --eval-iters 2 --log-interval 1 --vocab 65)
"$G" "${T[@]}" --tokens "$tmp/train.bin,$tmp/val.bin" --format raw --sample 6 --prompt 1,2 >"$tmp/out" 2>&1; rc=$?
ids=$(sed -n '/^--- sample/{n;p}' "$tmp/out")
if [ $rc = 0 ] && [[ "$ids" =~ ^1,2(,[0-9]+){6}$ ]] && grep -q '^step 3: train loss [0-9.]*, val loss [0-9.]*' "$tmp/out"; then
  ok "--tokens TRAIN,VAL --format raw trains and samples token ids" "$ids"
else notok "--tokens raw (rc=$rc, sample '$ids')"; fi
"$G" "${T[@]}" --tokens "$tmp/train_llmc.bin" >"$tmp/out" 2>&1; rc=$?
if [ $rc = 0 ] && grep -q 'val loss nan' "$tmp/out" && grep -q 'no split' "$tmp/out"; then
  ok "--tokens TRAIN (llm.c header) without a validation split"
else notok "--tokens llmc (rc=$rc)"; fi

# 7-10: runtime errors exit 1 naming the file
fails() { # name pattern args...
  local name=$1 pat=$2; shift 2
  "$G" "$@" >"$tmp/out" 2>&1; local rc=$?
  if [ $rc = 1 ] && grep -q -- "$pat" "$tmp/out" && ! grep -q '^usage:' "$tmp/out"; then ok "$name exits 1 naming it"
  else notok "$name (rc=$rc)"; fi
}
fails "a token >= --vocab" "bad.bin" "${T[@]}" --tokens "$tmp/bad.bin" --format raw
fails "a corrupt llm.c header" "badmagic.bin" "${T[@]}" --tokens "$tmp/badmagic.bin"
fails "a missing --text file" "no-such.txt" "${T[@]}" --text "$tmp/no-such.txt"
fails "--resume without a checkpoint" "no checkpoint" "${T[@]}" --text "$text" --out "$tmp/empty" --resume

# 11: usage errors exit 2 with the usage
bad=""
for args in "--bogus" "--batch 0" "--batch 65537" "--preset gpt5" "--amp fp8" "--lr -1" "--lr nan" "--dropout 1" \
            "--seed -1" "--top-k -1" "--text a --tokens b" "--resume" "--recipe shakespeare-char" \
            "--recipe gpt9 --text x" "--iters 10 --warmup-iters 10" "--bias maybe"; do
  # shellcheck disable=SC2086
  "$G" $args >"$tmp/out" 2>&1; rc=$?
  { [ $rc = 2 ] && grep -q '^usage:' "$tmp/out"; } || bad="$bad [$args: rc=$rc]"
done
if [ -z "$bad" ]; then ok "16 bad command lines exit 2 with the usage"
else echo "# $bad" >"$tmp/out"; notok "usage errors"; fi

# 12: --recipe shakespeare-char: nanoGPT's values; options after it override it, before it not
recipe() { "$G" "$@" --iters 0 >"$tmp/out" 2>&1; }
recipe --text "$text" --recipe shakespeare-char --out "$tmp/r"; rc=$?
if [ $rc = 0 ] && grep -q '6 layers, 6 heads, 384 wide, vocabulary [0-9]*, context 256, bias off, dropout 0.2' "$tmp/out" \
   && grep -q 'lr 0.001 -> 0.0001 (warm-up 100, decay to 5000), betas 0.9/0.99, clip 1' "$tmp/out" \
   && grep -q 'weight decay 0.1' "$tmp/out" \
   && grep -q 'bf16, .*batch 64 x 256 x accum 1, .*eval every 250 on 200 batches, log every 10' "$tmp/out" \
   && recipe --text "$text" --recipe shakespeare-char --out "$tmp/r" --batch 2 --dropout 0 && grep -q 'batch 2 x 256' "$tmp/out" \
   && grep -q 'dropout 0)' "$tmp/out" \
   && recipe --text "$text" --batch 2 --recipe shakespeare-char --out "$tmp/r" && grep -q 'batch 64 x 256' "$tmp/out"; then
  ok "--recipe shakespeare-char sets nanoGPT's config; later options override it"
else notok "--recipe (rc=$rc)"; fi

# 13: the Python twin: the same losses and the same checkpoint bytes
if [ "$sanitize" != none ]; then skip "the Python twin" "a sanitized library cannot be loaded into Python"
elif [ "$lib" = - ] || [ ! -f "$lib" ]; then skip "the Python twin" "no shared library"
else
  DLTRAIN_LIBRARY="$lib" PYTHONPATH="$src/bindings/python" PYTHONDONTWRITEBYTECODE=1 \
    "$py" "$src/examples/python/gpt_train.py" "${R[@]}" --iters 30 --out "$tmp/twin" --save-every 30 >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 0 ] && cmp -s "$tmp/full/ckpt.safetensors" "$tmp/twin/ckpt.safetensors" \
     && diff <(losses "$tmp/full.log") <(losses "$tmp/out") >/dev/null && [ "$(losses "$tmp/out" | wc -l)" -ge 9 ]; then
    ok "examples/python/gpt_train.py prints the C program's losses and writes its checkpoint bytes"
  else diff <(losses "$tmp/full.log") <(losses "$tmp/out") >>"$tmp/out"; notok "Python twin (rc=$rc)"; fi
fi

# 14: bench_gpt on the CPU: every configuration, and a valid record
"$bin/bench_gpt" --device cpu --preset tiny --batch 2 --context 16 --steps 1 --blocks 1 --warmup 1 \
  --json "$tmp/bench.json" >"$tmp/out" 2>&1; rc=$?
rows=$(grep -cE '^\| 2 +\| 16 ' "$tmp/out")
if [ $rc = 0 ] && [ "$rows" = 4 ] && "$py" "$src/scripts/check_record.py" "$tmp/bench.json" >>"$tmp/out" 2>&1; then
  ok "bench_gpt --device cpu --preset tiny: 4 configurations and a valid record"
else notok "bench_gpt (rc=$rc, $rows rows)"; fi

# bench_attention on the CPU: one row per path asked for, usage errors for a bad path
"$bin/bench_attention" --device cpu --batch 1 --heads 2 --context 16 --head-dim 8 --steps 2 --warmup 1 \
  >"$tmp/out" 2>&1; rc=$?
rows=$(grep -cE '^\| libdltrain \| (cudnn|flash|math) \| [0-9.]+ \| [0-9.]+ \|' "$tmp/out")
"$bin/bench_attention" --device cpu --sdp flash,bogus >>"$tmp/out" 2>&1; rc_bad=$?
if [ $rc = 0 ] && [ "$rows" = 3 ] && [ $rc_bad = 2 ]; then
  ok "bench_attention --device cpu: a row per attention path; a bad --sdp is a usage error"
else notok "bench_attention (rc=$rc, $rows rows, bad --sdp rc=$rc_bad)"; fi

# 15: the peers' comparison on canned outputs (the formats of torch_gpt2.py and run_llmc.sh)
cat >"$tmp/torch.txt" <<'EOF'
{"torch": "2.11.0", "gpu": "NVIDIA H200"}
{"variant": "eager_bf16", "config": "gpt2", "batch": 2, "seq": 16, "params": 1, "ms_per_step": 4.0, "tokens_per_s": 8000, "mfu": 0.3, "peak_mib": 100, "first_step_s": 2.4, "loss": 10.9}
{"variant": "compile_bf16", "config": "gpt2", "batch": 2, "seq": 16, "params": 1, "ms_per_step": 2.0, "tokens_per_s": 16000, "mfu": 0.45, "peak_mib": 50, "first_step_s": 29.2, "loss": 10.9}
EOF
cat >"$tmp/llmc.txt" <<'EOF'
llm.c batch 2 x 16:
step   29/30 | loss 7.001 (+0.01z)| norm 1.0000 (+0.00z)| lr 6.00e-04 | 1.00 ms | -100.0% bf16 MFU | 31000 tok/s
step   30/30 | loss 7.000 (+0.01z)| norm 1.0000 (+0.00z)| lr 6.00e-04 | 3.00 ms | -100.0% bf16 MFU | 31000 tok/s
device memory usage: 7800 MiB / 143000 MiB
EOF
"$py" "$src/scripts/bench_gpt_compare.py" --ours "$tmp/bench.json" --torch "$tmp/torch.txt" --llmc "$tmp/llmc.txt" >"$tmp/out" 2>&1; rc=$?
if [ $rc = 0 ] && grep -qE '^\| 2 x 16 \| llm.c .* \| 2.00 \| 16,000 \|' "$tmp/out" \
   && grep -qE '^\| 2 x 16 \| PyTorch compile_bf16 \| 2.00 \| 16,000 \| 45.0% \| 50 \| 29.2 \|' "$tmp/out" \
   && grep -qE 'best peer: (llm.c|PyTorch compile_bf16)[^|]*: 2.00 ms, 16,000 tok/s \| [0-9.]+ \((met|missed)\)' "$tmp/out" \
   && grep -q '7800 (device)' "$tmp/out"; then
  ok "bench_gpt_compare.py reads bench_gpt's record, torch_gpt2.py's and llm.c's output"
else notok "bench_gpt_compare.py (rc=$rc)"; fi

# 16: the GPU-side scripts parse
bad=""
for f in scripts/bench_gpt_vs_peers.sh scripts/bench_attention_vs_torch.sh scripts/device/gpu_check.sh; do bash -n "$src/$f" 2>>"$tmp/out" || bad="$bad $f"; done
for f in scripts/hf_gpt2_interop.py scripts/bench_gpt_compare.py scripts/bench_attention_torch.py examples/python/gpt_train.py; do
  "$py" -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$src/$f" 2>>"$tmp/out" || bad="$bad $f"
done
if [ -z "$bad" ]; then ok "the GPU-side scripts parse (bash -n, Python syntax)"; else notok "syntax:$bad"; fi

# 18-20: on a GPU (CUDA build): the captured graph against --eager and --eager-eval, a
# deterministic resume, and fp32 on CUDA against the CPU (the same batches and init: the
# same losses to 1e-3) (evaluation batches as captured graphs too, the default, except
# where --eager or --eager-eval)
C=(--preset tiny --device cuda --text "$text" --batch 8 --eval-iters 4 --log-interval 5 --eval-interval 10 --lr-decay-iters 20 --warmup-iters 2)
"$G" "${C[@]}" --iters 20 --out "$tmp/cg" --save-every 20 --deterministic >"$tmp/cg.log" 2>&1; rc=$?
if [ $rc != 0 ]; then
  why=$(grep -m1 "$(basename "$G")" "$tmp/cg.log" | cut -c1-120)
  skip "CUDA: the captured graph against --eager" "${why:-no GPU}"
  skip "CUDA: a deterministic resume is bitwise" "${why:-no GPU}"
  skip "CUDA: fp32 training matches the CPU's" "${why:-no GPU}"
else
  "$G" "${C[@]}" --iters 20 --eager --deterministic >"$tmp/ce.log" 2>&1
  "$G" "${C[@]}" --iters 20 --eager-eval --deterministic >"$tmp/cv.log" 2>&1
  cp "$tmp/cg.log" "$tmp/out"
  if grep -q ', graph,' "$tmp/cg.log" && "$py" - "$tmp/cg.log" "$tmp/ce.log" "$tmp/cv.log" >>"$tmp/out" 2>&1 <<'PY'
import re, sys
get = lambda p: [float(m) for m in re.findall(r"^iter \d+: loss ([0-9.]+)", open(p).read(), re.M)]
g, e, v = get(sys.argv[1]), get(sys.argv[2]), get(sys.argv[3])
assert len(g) == len(e) == 4 and all(abs(a - b) <= 2e-3 * abs(b) for a, b in zip(g, e)), (g, e)
assert v == g, ("--eager-eval changes only the evaluations", v, g)
# evaluations: captured batch graphs summing on the device against eager batches summed on the host
ev = lambda p: [float(x) for m in re.findall(r"^step \d+: train loss ([0-9.]+), val loss ([0-9.]+)", open(p).read(), re.M) for x in m]
g, e, v = ev(sys.argv[1]), ev(sys.argv[2]), ev(sys.argv[3])
assert len(g) == len(e) == len(v) == 6, (g, e, v)
assert all(abs(a - b) <= 2e-3 * abs(b) for a, b in zip(g, e)), (g, e)
assert all(abs(a - b) <= 2e-3 * abs(b) for a, b in zip(g, v)), (g, v)
PY
  then ok "CUDA: the captured graph trains and evaluates as --eager and --eager-eval do"; else notok "CUDA: graph vs eager"; fi
  "$G" "${C[@]}" --iters 10 --out "$tmp/cp" --save-every 10 --deterministic >"$tmp/out" 2>&1 &&
    "$G" "${C[@]}" --iters 20 --out "$tmp/cp" --save-every 10 --deterministic --resume >>"$tmp/out" 2>&1
  if cmp -s "$tmp/cg/ckpt.safetensors" "$tmp/cp/ckpt.safetensors"; then ok "CUDA: a deterministic resume is bitwise"
  else notok "CUDA: resume"; fi
  F=("${C[@]}" --iters 20 --amp fp32 --eager)
  "$G" "${F[@]}" >"$tmp/cf.log" 2>&1; "$G" "${F[@]}" --device cpu >"$tmp/cc.log" 2>&1
  cat "$tmp/cf.log" >"$tmp/out"
  if "$py" - "$tmp/cf.log" "$tmp/cc.log" >>"$tmp/out" 2>&1 <<'PY'
import re, sys
get = lambda p: [float(m) for m in re.findall(r"^(?:iter \d+: loss|step \d+: train loss) ([0-9.]+)", open(p).read(), re.M)]
g, c = get(sys.argv[1]), get(sys.argv[2])
assert len(g) == len(c) >= 6 and all(abs(a - b) <= 1e-3 * abs(b) for a, b in zip(g, c)), (g, c)
PY
  then ok "CUDA: fp32 training matches the CPU's"; else notok "CUDA: fp32 against the CPU"; fi
fi
echo "1..$n"
