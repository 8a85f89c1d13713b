#!/usr/bin/env bash
# tests/flash_emu/run.sh - runs cuda/attention_flash.cu's kernels on the CPU (flash_emu.cpp):
# cuts the kernels out of the .cu (the inline-asm mma is replaced by the emulation), builds
# with g++ -std=c++20 against the CUDA toolkit's fp16/bf16 headers, runs the shapes of the
# op table's "tiles" rows. Needs g++ 11+ and /usr/local/cuda/include; about a minute.
#   bash tests/flash_emu/run.sh        (from the repository root)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$root/cuda/attention_flash.cu" "$work/kernels.inc" <<'PY'
import sys
src = open(sys.argv[1]).read()
body = src[src.index('namespace {'):src.index('float keep_scale_of')]
a, b = body.index('/* c += a b for one 16x8 tile */'), body.index('/* Fragment loads')
body = body[:a] + body[b:]
body = body.replace('#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n#define DLT_FLASH_BODY 1\n#endif',
                    '#define DLT_FLASH_BODY 1')
body = body.replace('extern __shared__ uint4 smem[];', '')
open(sys.argv[2], 'w').write(body + '} // namespace\n')
PY
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
g++ -std=c++20 -O1 -w -I"$CUDA_INC" -I"$root" -I"$root/include" -DKERNELS="\"$work/kernels.inc\"" \
  "$root/tests/flash_emu/flash_emu.cpp" -o "$work/flash_emu" -pthread
"$work/flash_emu"
