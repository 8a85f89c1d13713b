#!/usr/bin/env bash
# scripts/demo.sh - the README's first command: builds libdltrain if needed and runs the
# main example on the best device present.
set -eu
cd "$(dirname "$0")/.."
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
if ! command -v meson >/dev/null || ! pkg-config --exists libcjson || ! pkg-config --exists openblas; then
  echo "== installing build dependencies"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
    meson ninja-build pkg-config libopenblas-dev libcjson-dev >/dev/null
fi
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
exec ./build/examples/hello_tensors "$@"
