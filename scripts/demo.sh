#!/usr/bin/env bash
# scripts/demo.sh - the README's first command: builds libdltrain if needed and trains
# ResNet50 with the seed's recipe (examples/resnet50_cifar10): one epoch on the GPU when
# there is one, otherwise a few steps on the CPU at a small batch; real CIFAR-10 when ./data
# holds the binary release, otherwise synthetic data. Ends with the comparison table.
# Extra arguments go to the example (e.g. --epochs 3 --eval).
set -eu
cd "$(dirname "$0")/.."
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
need=()
command -v meson >/dev/null || need+=(meson)
command -v ninja >/dev/null || need+=(ninja-build)
command -v pkg-config >/dev/null || need+=(pkg-config)
pkg-config --exists libcjson 2>/dev/null || need+=(libcjson-dev)
pkg-config --exists openblas 2>/dev/null || need+=(libopenblas-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing build dependencies: ${need[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
gpu=0
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && gpu=1
build=build
if [ ! -f "$build/build.ninja" ]; then
  # Without a GPU the CUDA backend would only be compiled, not used: skip it to build faster.
  if [ "$gpu" = 1 ]; then cuda=auto; else cuda=disabled; build=build-demo; fi
  [ -f "$build/build.ninja" ] || meson setup "$build" -Dcuda=$cuda >/dev/null
fi
echo "== building ($build)"
ninja -C "$build" examples/resnet50_cifar10 >/dev/null
data=()
[ -f data/data_batch_1.bin ] && data=(--data data)
if [ "$gpu" = 1 ]; then
  exec "./$build/examples/resnet50_cifar10" --epochs 1 --log-every 20 "${data[@]}" "$@"
else
  exec "./$build/examples/resnet50_cifar10" --device cpu --batch 8 --steps 5 --epochs 1 "${data[@]}" "$@"
fi
