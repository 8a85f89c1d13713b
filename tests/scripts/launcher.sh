#!/usr/bin/env bash
# The launcher and the environments it and mpirun set up (TAP): dltrain-run starts N ranks
# that meet and all-reduce; a failing rank ends the run at once with its exit status and the
# others are stopped; a signal to the launcher reaches the ranks; bad usage exits 2; ranks
# started by hand with mpirun's OMPI_COMM_WORLD_* variables meet too; the ResNet50 example
# trains with --gpus 2 on the CPU and rank 0 alone writes the checkpoint; the GPT example
# on 2 ranks x batch b trains the parameters of one process x batch 2b (accumulation with
# no_sync included), and a 2-rank run resumes bitwise (each rank's dropout stream restored).
run="$1"; prog="$2"; examples="$3"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
n=0
ok() { n=$((n+1)); echo "ok $n - $1${2:+ # $2}"; }
notok() { n=$((n+1)); echo "not ok $n - $1"; sed 's/^/# /' "$tmp/out" | tail -15; }
export DLT_DIST_TIMEOUT=60

for w in 1 2 4; do
  if timeout 120 "$run" -n $w "$prog" sum >"$tmp/out" 2>&1 && grep -q "^world $w sum $((w * (w + 1) / 2)) local 0$" "$tmp/out"; then
    ok "dltrain-run -n $w: the ranks meet and all-reduce"
  else notok "dltrain-run -n $w"; fi
done

start=$(date +%s)
timeout 120 "$run" -n 3 --grace 2 "$prog" fail 1 7 >"$tmp/out" 2>&1; rc=$?
took=$(( $(date +%s) - start ))
if [ $rc = 7 ] && [ $took -lt 30 ] && grep -q "rank 1 (pid [0-9]*) exited with status 7; stopping the other ranks" "$tmp/out"; then
  ok "a failing rank ends the run with its status, the others are stopped" "${took} s"
else notok "failing rank (rc=$rc, ${took} s)"; fi

"$run" -n 2 "$prog" sleep >"$tmp/out" 2>&1 &
pid=$!
sleep 2; kill -TERM $pid
wait $pid; rc=$?
if [ $rc = $((128 + 15)) ] && ! pgrep -f "$prog sleep" >/dev/null; then ok "SIGTERM to the launcher reaches every rank"
else notok "signal forwarding (rc=$rc)"; fi

"$run" "$prog" >"$tmp/out" 2>&1; rc1=$?
"$run" -n 0 "$prog" >"$tmp/out" 2>&1; rc2=$?
"$run" -n 2 >"$tmp/out" 2>&1; rc3=$?
"$run" -n 2 --bogus "$prog" >"$tmp/out" 2>&1; rc4=$?
if [ $rc1 = 2 ] && [ $rc2 = 2 ] && [ $rc3 = 2 ] && [ $rc4 = 2 ] && grep -q '^usage:' "$tmp/out"; then ok "bad usage exits 2"
else notok "bad usage ($rc1 $rc2 $rc3 $rc4)"; fi
timeout 60 "$run" -n 2 /nonexistent/program >"$tmp/out" 2>&1; rc=$?
if [ $rc = 127 ] && grep -q "cannot run /nonexistent/program" "$tmp/out"; then ok "a program that cannot run exits 127"
else notok "missing program (rc=$rc)"; fi

# mpirun's environment (what Open MPI sets), started by hand
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for r in 0 1 2; do
  env -u RANK -u WORLD_SIZE -u LOCAL_RANK OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=3 OMPI_COMM_WORLD_LOCAL_RANK=$r \
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 60 "$prog" sum >"$tmp/mpi$r" 2>&1 &
done
wait
if grep -q "^world 3 sum 6 local 0$" "$tmp/mpi0" && [ ! -s "$tmp/mpi1" ] && [ ! -s "$tmp/mpi2" ]; then ok "mpirun's OMPI_COMM_WORLD_* variables"
else cat "$tmp"/mpi* > "$tmp/out"; notok "mpirun environment"; fi

# the ResNet50 example, data parallel on the CPU
ex="$examples/resnet50_cifar10"
if timeout 600 "$ex" --device cpu --amp off --batch 2 --steps 2 --epochs 1 --gpus 2 --save "$tmp/ck.safetensors" \
     >"$tmp/out" 2>&1 && grep -q '^data parallel: 2 processes (tcp) x batch 2 = global batch 4$' "$tmp/out" \
     && [ "$(grep -c 'Loss: ' "$tmp/out")" = 2 ] && [ "$(grep -c '^saved ' "$tmp/out")" = 1 ] && [ -s "$tmp/ck.safetensors" ] \
     && [ "$(ls "$tmp" | grep -c safetensors)" = 1 ]; then
  ok "resnet50_cifar10 --gpus 2 on the CPU: rank 0 reports and saves" "$(grep 'Loss: ' "$tmp/out" | tail -1)"
else notok "resnet50_cifar10 --gpus 2"; fi

# the GPT example, data parallel on the CPU (dropout 0: each rank draws its own dropout)
G="$examples/gpt_train"
# max |a - b| over the model's float32 tensors of two checkpoints (standard library only)
maxdiff() {
  python3 - "$1" "$2" <<'PY'
import array, json, struct, sys
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); out = {}
    for k, v in h.items():
        if k.split('.')[0] in ('transformer', 'lm_head') and v['dtype'] == 'F32':
            s, e = v['data_offsets']; out[k] = array.array('f', b[8 + n + s:8 + n + e])
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a and sorted(a) == sorted(b)
print(max(abs(x - y) for k in a for x, y in zip(a[k], b[k])))
PY
}
GA=(--device cpu --preset tiny --amp fp32 --dropout 0 --context 16 --iters 6 --accum 2 --eval-interval 0 --log-interval 0
    --synthetic-tokens 20000 --save-every 6)
timeout 300 "$G" "${GA[@]}" --batch 4 --out "$tmp/g1" >"$tmp/out" 2>&1; r1=$?
timeout 300 "$G" "${GA[@]}" --batch 2 --out "$tmp/gh" >>"$tmp/out" 2>&1; r2=$?
timeout 300 "$G" "${GA[@]}" --batch 2 --gpus 2 --out "$tmp/g2" >"$tmp/g2.log" 2>&1; r3=$?
cat "$tmp/g2.log" >>"$tmp/out"
d=$(maxdiff "$tmp/g1/ckpt.safetensors" "$tmp/g2/ckpt.safetensors" 2>>"$tmp/out")
dc=$(maxdiff "$tmp/g1/ckpt.safetensors" "$tmp/gh/ckpt.safetensors" 2>>"$tmp/out")
if [ "$r1$r2$r3" = 000 ] && grep -q '^data parallel: 2 processes (tcp) x batch 2 = global batch 4$' "$tmp/g2.log" \
   && [ "$(grep -c '^saved ' "$tmp/g2.log")" = 1 ] && [ -n "$d" ] && [ -n "$dc" ] \
   && awk -v d="$d" -v c="$dc" 'BEGIN{exit !(d < 1e-6 && c > 1e-4)}'; then
  ok "gpt_train --gpus 2 x batch 2 (accum 2) trains one process's parameters at batch 4" "max diff $d; batch 2 alone: $dc"
else notok "gpt_train --gpus 2 equivalence (rc $r1/$r2/$r3, diff '$d', control '$dc')"; fi

GR=(--device cpu --preset tiny --amp fp32 --dropout 0.2 --context 16 --accum 2 --batch 2 --gpus 2 --eval-interval 0
    --log-interval 0 --synthetic-tokens 20000 --lr-decay-iters 6 --warmup-iters 1 --save-every 3)
timeout 300 "$G" "${GR[@]}" --iters 6 --out "$tmp/rf" >"$tmp/out" 2>&1; r1=$?
timeout 300 "$G" "${GR[@]}" --iters 3 --out "$tmp/rp" >>"$tmp/out" 2>&1; r2=$?
timeout 300 "$G" "${GR[@]}" --iters 6 --out "$tmp/rp" --resume >>"$tmp/out" 2>&1; r3=$?
if [ "$r1$r2$r3" = 000 ] && cmp -s "$tmp/rf/ckpt.safetensors" "$tmp/rp/ckpt.safetensors" \
   && grep -q 'resumed from .* at iteration 3' "$tmp/out"; then
  ok "gpt_train --gpus 2 --resume continues bitwise (dropout 0.2: every rank's stream restored)"
else notok "gpt_train --gpus 2 resume (rc $r1/$r2/$r3)"; fi
echo "1..$n"
