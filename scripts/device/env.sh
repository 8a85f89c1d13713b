# scripts/device/env.sh - sourced on a lent GPU machine (see docs/performance.md): puts the
# build's dependencies in place when the machine lacks them. The machine cannot download,
# so Debian packages carried in .device/debs (git-ignored; fetched on a dev machine with
#   apt-get download libcjson1 libcjson-dev libopenblas0-pthread libopenblas-pthread-dev \
#     libopenblas-dev libgfortran5 libquadmath0 pkgconf pkgconf-bin libpkgconf3)
# are unpacked into /tmp/dltdeps and exposed through PKG_CONFIG_PATH and LD_LIBRARY_PATH.
_dlt_root=$(pwd)
export PATH="/usr/local/cuda/bin:$PATH"
_dlt_need=0
command -v pkg-config >/dev/null 2>&1 || _dlt_need=1
pkg-config --exists libcjson 2>/dev/null || _dlt_need=1
pkg-config --exists openblas 2>/dev/null || _dlt_need=1
if [ "$_dlt_need" = 1 ] && [ -d "$_dlt_root/.device/debs" ]; then
  D=/tmp/dltdeps
  mkdir -p "$D"
  for f in "$_dlt_root"/.device/debs/*.deb; do dpkg -x "$f" "$D"; done
  # point the .pc files at the unpacked tree
  for pc in $(find "$D" -name '*.pc'); do
    [ -L "$pc" ] && continue
    sed -i "s|=/usr|=$D/usr|g" "$pc"
  done
  mkdir -p "$D/pc"
  ln -sf "$D/usr/lib/x86_64-linux-gnu/pkgconfig/libcjson.pc" "$D/pc/libcjson.pc"
  ln -sf "$D/usr/lib/x86_64-linux-gnu/openblas-pthread/pkgconfig/openblas.pc" "$D/pc/openblas.pc"
  export PKG_CONFIG_PATH="$D/pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$D/usr/lib/x86_64-linux-gnu:$D/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # libopenblas.so.0 is reached through Debian's alternatives at install time; link it here
  ( cd "$D/usr/lib/x86_64-linux-gnu/openblas-pthread" && [ -e libopenblas.so ] || ln -sf libopenblas.so.0 libopenblas.so )
  if ! command -v pkg-config >/dev/null 2>&1; then
    ln -sf "$D/usr/bin/pkgconf" "$D/usr/bin/pkg-config"
    export PATH="$D/usr/bin:$PATH"
  fi
  echo "device env: dependencies unpacked into $D"
fi
unset _dlt_need _dlt_root
