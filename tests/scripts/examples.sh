#!/usr/bin/env bash
# The training examples on the CPU (TAP): 3 steps at batch 4 on synthetic data and on the
# real CIFAR-10 subset (skipped when absent), finite losses and the closing table; a bad flag
# exits 2 with the usage; a corrupt data directory exits 1 naming the file. Issue 20: every
# numeric flag out of range exits 2 (item 13); a batch file that exists but cannot be read
# (symlink loop, dangling link, no permission, unsearchable directory) exits 1 naming it,
# never trains on synthetic data (item 10); a resumed checkpoint's position is checked
# (item 6: past --epochs, finished, a step counter that would overflow, a negative step).
# --log-every 0 prints every epoch's loss; --mode graph takes --mode eager's steps, and the
# default (graph on CUDA) is eager on the CPU, as is --eager, which contradicts --mode graph;
# the Python twin runs, its modes match too, and its --log-every prints those steps' losses.
bin="$1"; src="$2"; lib="${3:--}"; sanitize="${4:-none}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
data=${DLT_CIFAR10_DIR:-$src/../shared/data/cifar10-subset}
n=0
ok() { n=$((n+1)); echo "ok $n - $1${2:+ # $2}"; }
notok() { n=$((n+1)); echo "not ok $n - $1"; sed 's/^/# /' "$tmp/out" | tail -15; }
skip() { n=$((n+1)); echo "ok $n - $1 # SKIP $2"; }
check_run() { # name args...
  local name=$1; shift
  if "$@" >"$tmp/out" 2>&1 && grep -q '^| resnet50' "$tmp/out" && grep -q '^parameters: 23528522$' "$tmp/out" \
     && [ "$(grep -c 'Loss: ' "$tmp/out")" -ge 3 ] && ! grep -E 'Loss: .*(nan|inf)' "$tmp/out" >/dev/null; then
    ok "$name" "$(grep 'Loss: ' "$tmp/out" | tail -1)"
  else notok "$name"; fi
}
# N random CIFAR-10 records (label byte, 3072 pixels) from seed S: tiny_cifar N S
tiny_cifar() {
  python3 -c "import sys,random; r=random.Random($2); sys.stdout.buffer.write(bytes(r.randrange(256) if i % 3073 else r.randrange(10) for i in range($1*3073)))"
}
# a checkpoint with one entry replaced: patch SRC NAME INT64 DST
patch() {
  python3 - "$@" <<'PY'
import json, struct, sys
src, name, value, dst = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
b = bytearray(open(src, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
s, e = json.loads(b[8:8 + n])[name]["data_offsets"]
b[8 + n + s:8 + n + e] = struct.pack("<q", value)
open(dst, "wb").write(b)
PY
}
# as nobody when running as root (for the permission cases), else as ourselves
as_user() { if [ "$(id -u)" = 0 ]; then setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; else "$@"; fi; }
can_drop() { [ "$(id -u)" != 0 ] || command -v setpriv >/dev/null 2>&1; }

for ex in resnet50_cifar10 grad_accum; do
  save=()
  [ $ex = resnet50_cifar10 ] && save=(--save "$tmp/ck.safetensors")
  check_run "$ex: 3 CPU steps at batch 4, synthetic" "$bin/$ex" --device cpu --batch 4 --steps 3 --epochs 1 "${save[@]}"
  if [ -f "$data/data_batch_1.bin" ]; then
    check_run "$ex: 3 CPU steps at batch 4, CIFAR-10 subset" "$bin/$ex" --device cpu --batch 4 --steps 3 --epochs 1 --data "$data"
  else skip "$ex: CIFAR-10 subset" "no data at $data"; fi
  # --log-every 0 prints each epoch's last loss (it printed nan from the second epoch on)
  mkdir -p "$tmp/tiny"
  tiny_cifar 16 3 >"$tmp/tiny/data_batch_1.bin"
  "$bin/$ex" --device cpu --batch 8 --epochs 3 --log-every 0 --data "$tmp/tiny" >"$tmp/out" 2>&1; rc=$?
  losses=$(grep -cE '^Epoch [0-2], Loss: [0-9]+\.[0-9]+$' "$tmp/out")
  if [ $rc = 0 ] && [ "$losses" = 3 ]; then ok "$ex: --log-every 0 prints each epoch's loss" "$(grep 'Loss: ' "$tmp/out" | tail -1)"
  else notok "$ex: --log-every 0, 3 epochs of 16 images (rc=$rc, $losses finite epoch losses)"; fi
  # --mode graph takes the same steps as --mode eager: on the CPU the graph's step runs as
  # plain calls, so the epoch losses must agree to the digit (10 images at batch 4: two full
  # batches and one of 2; grad_accum's group of 2 left unfinished carries into the next epoch).
  # The default is graph mode on CUDA only: here it runs --mode eager's steps and says eager.
  tiny_cifar 10 5 >"$tmp/tiny/data_batch_1.bin"
  acc=(); [ $ex = grad_accum ] && acc=(--accum 2)
  for m in eager graph default; do
    mode=(--mode $m); [ $m = default ] && mode=()
    "$bin/$ex" --device cpu --batch 4 "${acc[@]}" --epochs 2 --log-every 0 --data "$tmp/tiny" "${mode[@]}" >"$tmp/out-$m" 2>&1
    echo "rc=$?" >>"$tmp/out-$m"
  done
  if grep -q '^rc=0$' "$tmp/out-graph" && [ "$(grep -c '^Epoch .*Loss' "$tmp/out-eager")" = 2 ] &&
     [ "$(grep -E '^Epoch|^rc=' "$tmp/out-eager")" = "$(grep -E '^Epoch|^rc=' "$tmp/out-graph")" ] &&
     grep -q '^model: .*, mode: eager (no CUDA graphs on the CPU), data' "$tmp/out-graph"; then
    ok "$ex: --mode graph's epoch losses equal --mode eager's" "$(grep '^Epoch 1' "$tmp/out-graph")"
  else cat "$tmp/out-eager" "$tmp/out-graph" >"$tmp/out"; notok "$ex: --mode graph against --mode eager"; fi
  if [ "$(grep -E '^Epoch|^rc=' "$tmp/out-eager")" = "$(grep -E '^Epoch|^rc=' "$tmp/out-default")" ] &&
     grep -q '^model: .*, mode: eager, data' "$tmp/out-default" && grep -q '^model: .*, mode: eager, data' "$tmp/out-eager"; then
    ok "$ex: the default on the CPU is eager, with --mode eager's epoch losses"
  else cat "$tmp/out-eager" "$tmp/out-default" >"$tmp/out"; notok "$ex: the default on the CPU against --mode eager"; fi
  # --eager is --mode eager (its first epoch suffices), and contradicts --mode graph
  "$bin/$ex" --device cpu --batch 4 "${acc[@]}" --epochs 1 --log-every 0 --data "$tmp/tiny" --eager >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 0 ] && grep -q '^model: .*, mode: eager, data' "$tmp/out" &&
     [ "$(grep '^Epoch' "$tmp/out")" = "$(grep '^Epoch 0' "$tmp/out-eager")" ]; then ok "$ex: --eager runs --mode eager's steps"
  else notok "$ex: --eager (rc=$rc)"; fi
  "$bin/$ex" --eager --mode graph >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q 'contradict' "$tmp/out" && grep -q '^usage:' "$tmp/out"; then
    ok "$ex: --eager with --mode graph exits 2 with the usage"
  else notok "$ex: --eager with --mode graph (rc=$rc)"; fi
  "$bin/$ex" --bogus >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q '^usage:' "$tmp/out"; then ok "$ex: bad flag exits 2 with the usage"; else notok "$ex: bad flag (rc=$rc)"; fi
  "$bin/$ex" --batch 0 >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ]; then ok "$ex: bad value exits 2"; else notok "$ex: bad value (rc=$rc)"; fi
  mkdir -p "$tmp/bad"; head -c 3074 /dev/zero > "$tmp/bad/data_batch_1.bin"
  "$bin/$ex" --device cpu --batch 4 --steps 1 --data "$tmp/bad" >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 1 ] && grep -q 'data_batch_1.bin' "$tmp/out"; then ok "$ex: corrupt data directory exits 1 naming the file"
  else notok "$ex: corrupt data (rc=$rc)"; fi
  # item 13: every numeric flag bounded in the parser (before: --batch 99999999999 exited 1
  # with the library's message, --lr 1e308 trained with an infinite lr)
  bad_values=(--epochs 0 --epochs 1000001 --steps -1 --batch 0 --batch 99999999999 --batch 65537
              --lr -1 --lr 1e308 --lr nan --lr 0.1x --momentum -0.5 --momentum 2 --classes 0
              --classes 100001 --log-every -1 --seed -1 --seed 99999999999999999999)
  [ $ex = grad_accum ] && bad_values+=(--accum 0 --accum 65537)
  bad=""
  for ((i = 0; i < ${#bad_values[@]}; i += 2)); do
    "$bin/$ex" "${bad_values[i]}" "${bad_values[i+1]}" >"$tmp/out" 2>&1; rc=$?
    if [ $rc != 2 ] || ! grep -q '^usage:' "$tmp/out" || ! grep -q "bad value for ${bad_values[i]}" "$tmp/out"; then
      bad="$bad ${bad_values[i]} ${bad_values[i+1]} (rc=$rc)"
    fi
  done
  if [ -z "$bad" ]; then ok "$ex: $(( ${#bad_values[@]} / 2 )) out-of-range numeric values exit 2 with the usage"
  else echo "# failed:$bad" >"$tmp/out"; notok "$ex: out-of-range values"; fi
  # item 10: a batch name that exists but cannot be read is an error naming it, exit 1
  # (before: "no CIFAR-10 binary batches in --data", synthetic data, exit 0)
  for kind in loop dangling noperm unsearchable; do
    d="$tmp/unreadable-$kind"; rm -rf "$d"; mkdir -p "$d"; chmod 755 "$d" "$tmp"
    f="$d/data_batch_1.bin"; runner=()
    case $kind in
      loop) ln -s "$f.2" "$f"; ln -s "$f" "$f.2" ;;
      dangling) ln -s "$d/missing" "$f" ;;
      noperm) head -c 3073 /dev/zero >"$f"; chmod 000 "$f"; runner=(as_user) ;;
      unsearchable) head -c 3073 /dev/zero >"$f"; chmod 644 "$f"; chmod 600 "$d"; runner=(as_user) ;;
    esac
    if [ ${#runner[@]} -gt 0 ] && ! can_drop; then skip "$ex: unreadable batch ($kind)" "root without setpriv"; continue; fi
    "${runner[@]}" "$bin/$ex" --device cpu --batch 4 --steps 1 --data "$d" >"$tmp/out" 2>&1; rc=$?
    chmod 755 "$d"
    if [ $rc = 1 ] && grep -q 'data_batch_1.bin' "$tmp/out" && ! grep -q synthetic "$tmp/out"; then
      ok "$ex: unreadable batch ($kind) exits 1 naming it"
    else notok "$ex: unreadable batch ($kind) (rc=$rc)"; fi
  done
done

# item 6: a resumed position the run cannot continue from (resnet50_cifar10's checkpoint of
# its 3 synthetic steps above: train.epoch 1, train.step 3)
ck="$tmp/ck.safetensors"
if [ -f "$ck" ]; then
  resume() { # name expected-rc pattern entry value args...
    local name=$1 want=$2 pat=$3 entry=$4 value=$5; shift 5
    patch "$ck" "$entry" "$value" "$tmp/ck2.safetensors"
    "$bin/resnet50_cifar10" --device cpu --batch 4 --resume "$tmp/ck2.safetensors" "$@" >"$tmp/out" 2>&1; rc=$?
    if [ $rc = "$want" ] && grep -q "$pat" "$tmp/out"; then ok "resume: $name"; else notok "resume: $name (rc=$rc)"; fi
  }
  resume "an epoch past --epochs exits 1" 1 "past --epochs 2" train.epoch 5 --epochs 2
  resume "a finished run trains nothing, says so and exits 0" 0 "nothing to train" train.epoch 1 --epochs 1
  resume "a step counter that would overflow exits 1" 1 "overflow" train.step 9223372036854775807 --epochs 2
  resume "a negative step is refused by the loader, exit 1" 1 "'train.step' .* is negative" train.step -5 --epochs 2
else
  for i in 1 2 3 4; do skip "resume case $i" "no checkpoint was saved"; done
fi
# the Python twin (examples/python/resnet50_cifar10.py): runs, and its --mode graph prints
# --mode eager's losses (10 synthetic images at batch 4: two full batches and one of 2); its
# default is eager on the CPU, --eager is --mode eager and contradicts --mode graph
py=python3; [ -x /usr/bin/python3 ] && py=/usr/bin/python3
if [ "$sanitize" != none ]; then skip "the Python twin" "a sanitized library cannot be loaded into Python"
elif [ "$lib" = - ] || [ ! -f "$lib" ]; then skip "the Python twin" "no shared library"
else
  pyex() { DLTRAIN_LIBRARY="$lib" PYTHONPATH="$src/bindings/python" PYTHONDONTWRITEBYTECODE=1 "$py" \
    "$src/examples/python/resnet50_cifar10.py" "$@"; }
  for m in eager graph default; do
    mode=(--mode $m); [ $m = default ] && mode=()
    pyex --device cpu --batch 4 --epochs 2 --synthetic-size 10 "${mode[@]}" >"$tmp/py-$m" 2>&1
    echo "rc=$?" >>"$tmp/py-$m"
  done
  if grep -q '^rc=0$' "$tmp/py-eager" && [ "$(grep -c '^Epoch [01], Loss: ' "$tmp/py-eager")" = 6 ] &&
     [ "$(grep -E '^Epoch|^rc=' "$tmp/py-eager")" = "$(grep -E '^Epoch|^rc=' "$tmp/py-graph")" ] &&
     grep -q 'batches/epoch, mode eager (no CUDA graphs on the CPU)$' "$tmp/py-graph"; then
    ok "examples/python/resnet50_cifar10.py: 6 steps; --mode graph prints --mode eager's losses"
  else cat "$tmp/py-eager" "$tmp/py-graph" >"$tmp/out"; notok "examples/python/resnet50_cifar10.py eager/graph"; fi
  if [ "$(grep -E '^Epoch|^rc=' "$tmp/py-eager")" = "$(grep -E '^Epoch|^rc=' "$tmp/py-default")" ] &&
     grep -q 'batches/epoch, mode eager$' "$tmp/py-default" && grep -q 'batches/epoch, mode eager$' "$tmp/py-eager"; then
    ok "examples/python/resnet50_cifar10.py: the default on the CPU is eager, with --mode eager's losses"
  else cat "$tmp/py-eager" "$tmp/py-default" >"$tmp/out"; notok "examples/python/resnet50_cifar10.py default"; fi
  pyex --device cpu --batch 4 --epochs 1 --steps 1 --synthetic-size 10 --eager >"$tmp/out" 2>&1; rc=$?
  pyex --eager --mode graph >>"$tmp/out" 2>&1; rc2=$?
  if [ $rc = 0 ] && grep -q 'batches/epoch, mode eager$' "$tmp/out" &&
     [ "$(grep '^Epoch' "$tmp/out")" = "$(grep '^Epoch' "$tmp/py-eager" | head -1)" ] &&
     [ $rc2 = 2 ] && grep -q 'contradict' "$tmp/out"; then
    ok "examples/python/resnet50_cifar10.py: --eager is --mode eager, and contradicts --mode graph (exit 2)"
  else notok "examples/python/resnet50_cifar10.py --eager (rc=$rc, rc2=$rc2)"; fi
  # --log-every reads (and prints) only some steps' losses: 2 prints steps 0, 2 and 4, 0 each
  # epoch's last (here in graph mode: a replay's loss and a plain call's)
  pyex --device cpu --batch 4 --epochs 2 --synthetic-size 10 --mode graph --log-every 2 >"$tmp/py-le2" 2>&1; rc=$?
  pyex --device cpu --batch 4 --epochs 2 --synthetic-size 10 --mode graph --log-every 0 >"$tmp/py-le0" 2>&1; rc2=$?
  if [ $rc = 0 ] && [ $rc2 = 0 ] && [ "$(grep '^Epoch' "$tmp/py-le2")" = "$(grep '^Epoch' "$tmp/py-eager" | sed -n '1p;3p;5p')" ] &&
     [ "$(grep '^Epoch' "$tmp/py-le0")" = "$(grep '^Epoch' "$tmp/py-eager" | sed -n '3p;6p')" ]; then
    ok "examples/python/resnet50_cifar10.py: --log-every 2 and 0 print those steps' losses"
  else cat "$tmp/py-le2" "$tmp/py-le0" >"$tmp/out"; notok "examples/python/resnet50_cifar10.py --log-every (rc=$rc, rc2=$rc2)"; fi
fi
echo "1..$n"
