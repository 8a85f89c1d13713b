#!/usr/bin/env bash
# The training examples on the CPU (TAP): 3 steps at batch 4 on synthetic data and on the
# real CIFAR-10 subset (skipped when absent), finite losses and the closing table; a bad flag
# exits 2 with the usage; a corrupt data directory exits 1 naming the file.
bin="$1"; src="$2"
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
for ex in resnet50_cifar10 grad_accum; do
  check_run "$ex: 3 CPU steps at batch 4, synthetic" "$bin/$ex" --device cpu --batch 4 --steps 3 --epochs 1
  if [ -f "$data/data_batch_1.bin" ]; then
    check_run "$ex: 3 CPU steps at batch 4, CIFAR-10 subset" "$bin/$ex" --device cpu --batch 4 --steps 3 --epochs 1 --data "$data"
  else skip "$ex: CIFAR-10 subset" "no data at $data"; fi
  "$bin/$ex" --bogus >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q '^usage:' "$tmp/out"; then ok "$ex: bad flag exits 2 with the usage"; else notok "$ex: bad flag (rc=$rc)"; fi
  "$bin/$ex" --batch 0 >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ]; then ok "$ex: bad value exits 2"; else notok "$ex: bad value (rc=$rc)"; fi
  mkdir -p "$tmp/bad"; head -c 3074 /dev/zero > "$tmp/bad/data_batch_1.bin"
  "$bin/$ex" --device cpu --batch 4 --steps 1 --data "$tmp/bad" >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 1 ] && grep -q 'data_batch_1.bin' "$tmp/out"; then ok "$ex: corrupt data directory exits 1 naming the file"
  else notok "$ex: corrupt data (rc=$rc)"; fi
done
echo "1..$n"
