#!/usr/bin/env bash
# tests/embedding_emu/run.sh - runs cuda/embedding.cu's backward kernels on the CPU
# (embedding_emu.cpp): cuts the backward out of the .cu and the helpers it uses out of
# cuda/common.cuh and cuda/nd.cuh, builds with g++ -std=c++20 and AddressSanitizer against
# the CUDA toolkit's fp16/bf16 headers, runs the cases (the vector kernel and the launcher's
# choice bit for bit against the scalar kernel and a host sum in the documented order). Needs
# g++ 11+ and /usr/local/cuda/include; about a minute.
#   bash tests/embedding_emu/run.sh        (from the repository root)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$root" "$work" <<'PY'
import sys
root, work = sys.argv[1], sys.argv[2]
def cut(path, start, end, last=False):
    src = open(root + '/' + path).read()
    a = src.index(start)
    b = src.rindex(end) if last else src.index(end, a)
    return src[a:b]
open(work + '/kernels.inc', 'w').write(cut('cuda/embedding.cu', '/* ---- backward', '} // namespace', last=True))
open(work + '/helpers.inc', 'w').write(
    cut('cuda/common.cuh', 'template <typename T> __device__ __forceinline__ float to_f', '/* Shape of a 4-D tensor')
    + cut('cuda/common.cuh', 'template <typename T> struct Vec16', '#define DLT_GRID_STRIDE')
    + cut('cuda/nd.cuh', '__device__ __forceinline__ float ld_dt', '/* integers exactly in int64'))
PY
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
g++ -std=c++20 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -I"$CUDA_INC" -I"$root/include" \
  -DKERNELS="\"$work/kernels.inc\"" -DHELPERS="\"$work/helpers.inc\"" \
  "$root/tests/embedding_emu/embedding_emu.cpp" -o "$work/embedding_emu" -pthread
"$work/embedding_emu"
