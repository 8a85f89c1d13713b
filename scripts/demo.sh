#!/usr/bin/env bash
# scripts/demo.sh - the README's first command: builds libdltrain if needed and trains
# ResNet50 with the seed's recipe (examples/resnet50_cifar10): one epoch on the GPU when
# there is one (fp16 autocast + GradScaler), otherwise 10 fp32 steps on the CPU at batch 16
# (fp16 autocast on the CPU is emulated: 2.5x slower than fp32). Real CIFAR-10 when
# ./data holds the binary release, otherwise synthetic data. Ends with the comparison table.
# Extra arguments go to the example (e.g. --epochs 3 --eval).
#
# On Debian/Ubuntu it installs what the build needs (apt-get: compiler, meson, ninja,
# pkg-config, OpenBLAS, cJSON). A failed configure or build prints the end of its log and
# the first error, and the script exits non-zero.
set -eu
cd "$(dirname "$0")/.."
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
have() { command -v "$1" >/dev/null 2>&1; }
need=()
have cc || need+=(gcc)
have meson || need+=(meson)
have ninja || need+=(ninja-build)
have pkg-config || need+=(pkg-config)
pkg-config --exists libcjson 2>/dev/null || need+=(libcjson-dev)
pkg-config --exists openblas 2>/dev/null || pkg-config --exists cblas 2>/dev/null || need+=(libopenblas-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing build dependencies: ${need[*]}"
  if ! have apt-get; then echo "missing ${need[*]} and no apt-get: install them and rerun" >&2; exit 2; fi
  SUDO=""; [ "$(id -u)" -ne 0 ] && have sudo && SUDO=sudo
  $SUDO apt-get update -qq >/dev/null 2>&1 || true
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >build-apt.log 2>&1; then
    echo "apt-get install ${need[*]} failed; its last lines:" >&2; tail -15 build-apt.log >&2; exit 2
  fi
  rm -f build-apt.log
fi

# A failed step: the end of its log and its first error lines, then exit 1.
fail() { # what log
  echo "== $1 FAILED; last lines of $2:" >&2
  tail -30 "$2" | sed 's/^/   /' >&2
  local cause
  cause=$(grep -m 5 -E 'ERROR:|error:|FAILED:|undefined reference' "$2" || true)
  [ -n "$cause" ] && { echo "== cause:" >&2; echo "$cause" | sed 's/^/   /' >&2; }
  exit 1
}

gpu=0
have nvidia-smi && nvidia-smi -L >/dev/null 2>&1 && gpu=1
build=build
if [ ! -f "$build/build.ninja" ]; then
  # Without a GPU the CUDA backend would only be compiled, not used: skip it to build faster.
  if [ "$gpu" = 1 ]; then cuda=auto; else cuda=disabled; build=build-demo; fi
  if [ ! -f "$build/build.ninja" ]; then
    echo "== configuring ($build)"
    meson setup "$build" -Dcuda=$cuda >"$build.setup.log" 2>&1 || fail "configure (meson setup $build)" "$build.setup.log"
  fi
fi
echo "== building ($build)"
ninja -C "$build" examples/resnet50_cifar10 >"$build.build.log" 2>&1 || fail "build (ninja -C $build)" "$build.build.log"
data=()
[ -f data/data_batch_1.bin ] && data=(--data data)
if [ "$gpu" = 1 ]; then
  exec "./$build/examples/resnet50_cifar10" --epochs 1 --log-every 20 "${data[@]}" "$@"
else
  exec "./$build/examples/resnet50_cifar10" --device cpu --amp off --batch 16 --steps 10 --epochs 1 "${data[@]}" "$@"
fi
