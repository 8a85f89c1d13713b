#!/usr/bin/env bash
# The examples' run records (--json FILE) on the CPU (TAP): each example writes a record that
# scripts/check_record.py accepts, holding the numbers of the closing table it printed;
# an existing file is replaced whole and no temporary file is left; an unwritable path fails
# before the run; --json without a file is a usage error; the CPU records render into a
# report (scripts/report.py, where /usr/bin/python3 has matplotlib).
bin="$1"; src="$2"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
py=python3; [ -x /usr/bin/python3 ] && py=/usr/bin/python3
check="$src/scripts/check_record.py"
n=0
ok() { n=$((n+1)); echo "ok $n - $1${2:+ # $2}"; }
notok() { n=$((n+1)); echo "not ok $n - $1"; sed 's/^/# /' "$tmp/out" | tail -20; }
skip() { n=$((n+1)); echo "ok $n - $1 # SKIP $2"; }
mkdir -p "$tmp/runs"

# record_matches NAME RECORD PYTHON-CHECKS: the record is valid and the checks (Python
# expressions over r = the record and out = the program's output) hold.
record_matches() {
  local name=$1 rec=$2 checks=$3
  if "$py" "$check" "$rec" >>"$tmp/out" 2>&1 && "$py" - "$rec" "$tmp/out" "$checks" >>"$tmp/out" 2>&1 <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))
out = open(sys.argv[2]).read()
row = next((l for l in out.splitlines() if l.startswith("| ") and "----" not in l and not l.startswith("| model")
            and not l.startswith("| batch")), "")
cells = [c.strip() for c in row.strip("|").split("|")]
for expr in sys.argv[3].split(";;"):
    expr = expr.strip()
    if expr and not eval(expr):
        print("failed:", expr, "| table row:", cells)
        sys.exit(1)
PY
  then ok "$name"; else notok "$name"; fi
}

# 1-2: the training examples; the record's numbers are the closing table's
common='r["schema_version"] == 1;; r["devices"][0]["kind"] == "cpu";; r["devices"][0]["monitor"] is None;;
  r["software"]["cuda_runtime"] is None;; r["workload"]["parameters"] == 23528522;; r["workload"]["model"] == "resnet50";;
  r["results"]["kind"] == "training";; r["results"]["epoch_time_estimated"] is True;;
  cells[3] == "%.2f (est.)" % r["results"]["epoch_time_s"];; cells[4] == "%.0f" % r["results"]["throughput_per_s"];;
  cells[6] == "%.0f" % (r["results"]["peak_memory_bytes"] / 1048576.0);;
  len(r["results"]["epochs"]) == 1 and r["results"]["epochs"][0]["steps"] == 2;;
  0 <= r["results"]["epochs"][0]["t_start_s"] < r["results"]["epochs"][0]["t_end_s"] <= r["duration_s"];;
  "first step after start: %.2f s" % r["results"]["first_step_s"] in out;; r["program"]["argv"][-1].endswith(".json")'
"$bin/resnet50_cifar10" --device cpu --batch 2 --steps 2 --epochs 1 --json "$tmp/runs/resnet50.json" >"$tmp/out" 2>&1
record_matches "resnet50_cifar10 --json: a valid record with the closing table's numbers" "$tmp/runs/resnet50.json" \
  "$common;; r['workload']['precision'] == 'fp16';; r['workload']['grad_scaler'] is True;; r['workload']['batch'] == 2;;
   r['workload']['accumulation'] == 1;; r['program']['name'] == 'resnet50_cifar10';; 'fp16+scaler, batch 2' in cells[2];;
   r['workload']['mode'] == 'eager' and ', mode: eager, ' in out"
"$bin/grad_accum" --device cpu --batch 2 --steps 2 --epochs 1 --accum 2 --amp bf16 --json "$tmp/runs/accum.json" >"$tmp/out" 2>&1
record_matches "grad_accum --json: accumulation and precision recorded" "$tmp/runs/accum.json" \
  "$common;; r['workload']['precision'] == 'bf16';; r['workload']['grad_scaler'] is False;;
   r['workload']['accumulation'] == 2;; 'bf16, batch 2, accum 2' in cells[2];; r['workload']['mode'] == 'eager'"

# 3: the bench: each configuration's row
"$bin/bench" --device cpu --batch 2 --amp bf16 --mode eager --steps 1 --blocks 1 --warmup 1 --classes 10 \
  --json "$tmp/runs/bench.json" >"$tmp/out" 2>&1
record_matches "bench --json: every configuration with the table's ms/step" "$tmp/runs/bench.json" \
  "r['results']['kind'] == 'bench';; len(r['results']['configs']) == 1;; r['results']['configs'][0]['status'] == 'ok';;
   cells[4] == '%.3f' % r['results']['configs'][0]['ms_per_step'];; cells[7] == '%.0f' % (r['results']['configs'][0]['peak_memory_bytes'] / 1048576.0);;
   r['results']['configs'][0]['precision'] == 'bf16' and r['results']['configs'][0]['batch'] == 2;;
   r['workload']['classes'] == 10 and r['workload']['parameters'] > 0;; r['devices'][0]['monitor'] is None"

# 4: gpu_report: the table as before, plus a record (no GPU here: no devices, and why)
"$bin/gpu_report" --json "$tmp/runs/gpu.json" >"$tmp/out" 2>&1
if grep -q 'nothing to report' "$tmp/out"; then
  record_matches "gpu_report --json without a GPU: a record of no devices saying why" "$tmp/runs/gpu.json" \
    "r['devices'] == [];; r['results']['gpus'] == 0;; r['results']['note'] in out;; r['workload'] is None"
else
  record_matches "gpu_report --json: every GPU with its measurements" "$tmp/runs/gpu.json" \
    "len(r['devices']) == r['results']['gpus'] > 0;; all('measured' in d for d in r['devices'])"
fi

# 5: an existing file is replaced whole, nothing is left beside it
echo 'not json, and longer than nothing' >"$tmp/over.json"
"$bin/gpu_report" --json "$tmp/over.json" >"$tmp/out" 2>&1; rc=$?
left=$(ls "$tmp" | grep -c '\.tmp\.' || true)
if [ $rc = 0 ] && "$py" "$check" "$tmp/over.json" >>"$tmp/out" 2>&1 && [ "$left" = 0 ]; then
  ok "an existing record is replaced whole, no temporary file left"
else notok "replacing a record (rc=$rc, $left temporary files)"; fi

# 6: an unwritable place fails at once, before the run
start=$(date +%s)
"$bin/resnet50_cifar10" --device cpu --batch 2 --steps 50 --json "$tmp/no/such/dir/r.json" >"$tmp/out" 2>&1; rc=$?
took=$(( $(date +%s) - start ))
if [ $rc = 1 ] && grep -q 'no/such/dir' "$tmp/out" && ! grep -q 'Loss:' "$tmp/out" && [ ! -e "$tmp/no" ]; then
  ok "an unwritable record path fails before training (${took} s)"
else notok "unwritable path (rc=$rc)"; fi
"$bin/bench" --json "$tmp" >"$tmp/out" 2>&1; rc=$?
if [ $rc = 1 ] && grep -q 'is a directory' "$tmp/out"; then ok "a directory as the record path is refused"
else notok "directory as path (rc=$rc)"; fi

# 7: --json needs a file
bad=0
for ex in resnet50_cifar10 grad_accum bench gpu_report; do
  "$bin/$ex" --json >"$tmp/out" 2>&1; rc=$?
  if [ $rc != 2 ] || ! grep -q -- '--json' "$tmp/out"; then bad=1; echo "# $ex --json: rc=$rc"; fi
done
if [ $bad = 0 ]; then ok "--json without a file is a usage error (exit 2) in every example"
else n=$((n+1)); echo "not ok $n - --json without a file"; fi

# 8: the CPU records make a report
if "$py" -c 'import matplotlib' 2>/dev/null; then
  "$py" "$src/scripts/report.py" "$tmp/runs/resnet50.json" "$tmp/runs/accum.json" "$tmp/runs/bench.json" \
    "$tmp/runs/gpu.json" --out "$tmp/report" >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 0 ] && grep -q 'resnet50 (fp16, batch 2, 50,000 images/epoch) | .* (est.) | n/a (CPU) |' "$tmp/report/report.md" \
     && [ -f "$tmp/report/charts/epoch_time.png" ] && grep -q 'report-status' "$tmp/report/report.html"; then
    ok "the CPU records render into a report (epoch times est., GPU columns n/a)"
  else cat "$tmp/report/report.md" >>"$tmp/out" 2>/dev/null; notok "report from the CPU records (rc=$rc)"; fi
else skip "report from the CPU records" "no matplotlib for $py (apt-get install python3-matplotlib)"; fi
echo "1..$n"
