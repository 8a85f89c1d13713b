#!/usr/bin/env bash
# meson install into a temporary prefix (DESTDIR), then build a small consumer against the
# installed library both ways and run it:
#   - pkg-config: with only dltrain.pc visible (no openblas/cjson .pc), as on a machine
#     without those dev packages, the shared-library consumer still gets its flags;
#   - CMake: find_package(dltrain) with the shared target dltrain::dltrain, and the static
#     target dltrain::dltrain_static (libdltrain.a plus what it links to).
# The .pc must name no placeholder URL and list each flag once.
build="$1"; src="$2"
echo "1..9"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if DESTDIR="$tmp/dest" meson install -C "$build" --no-rebuild >"$tmp/log" 2>&1; then
  echo "ok 1 - meson install into a temporary prefix"
else echo "not ok 1 - meson install"; sed 's/^/# /' "$tmp/log" | tail -20; exit 0; fi
opt() { meson introspect "$build" --buildoptions | python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]==sys.argv[1]][0])' "$1"; }
prefix=$(opt prefix)
root="$tmp/dest$prefix"
pc=$(find "$root" -name dltrain.pc | head -1)
# The .pc names the real prefix; point it at the staged copy.
sed -i "s|^prefix=.*|prefix=$root|" "$pc"

dups=$(grep -E '^Libs' "$pc" | tr ' ' '\n' | grep -v '^$' | grep -v '^Libs' | sort | uniq -d)
if [ -n "$pc" ] && ! grep -qE 'example\.invalid|^URL: *$|^Requires' "$pc" && [ -z "$dups" ]; then
  echo "ok 2 - dltrain.pc: no placeholder URL, no Requires, each flag once"
else echo "not ok 2 - dltrain.pc"; sed 's/^/# /' "$pc"; [ -n "$dups" ] && echo "# repeated: $dups"; fi

cat > "$tmp/app.c" <<'APP'
#include <dltrain.h>
#include <stdio.h>
int main(void) {
    dlt_ctx *ctx; dlt_tensor *t; double v;
    int64_t shape[2] = {2, 2};
    if (dlt_ctx_create(DLT_DEVICE_CPU, 0, DLT_ABI_VERSION, &ctx)) return 1;
    if (dlt_tensor_zeros(ctx, DLT_F32, shape, 2, DLT_FORMAT_CONTIGUOUS, &t)) return 2;
    if (dlt_tensor_fill(t, 2.5) || dlt_tensor_get(t, 3, &v) || v != 2.5) return 3;
    printf("consumer ok: libdltrain %s\n", dlt_version_string());
    dlt_tensor_release(t); dlt_ctx_destroy(ctx); return 0;
}
APP
# only our .pc is visible: what a machine without the OpenBLAS/cJSON dev packages sees
export PKG_CONFIG_LIBDIR=$(dirname "$pc") PKG_CONFIG_PATH=
libdir=$(pkg-config --variable=libdir dltrain)
if flags=$(pkg-config --cflags --libs dltrain 2>"$tmp/err") &&
   ${CC:-cc} "$tmp/app.c" -o "$tmp/app" $flags 2>>"$tmp/err"; then
  echo "ok 3 - consumer builds with pkg-config --cflags --libs dltrain (no other .pc needed)"
else echo "not ok 3 - consumer build with pkg-config"; sed 's/^/# /' "$tmp/err"; fi
if out=$(LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/app" 2>&1); then
  echo "ok 4 - pkg-config consumer runs against the installed library # $out"
else echo "not ok 4 - pkg-config consumer run"; echo "# $out"; fi

if ! command -v cmake >/dev/null 2>&1; then
  for i in 5 6 7 8 9; do echo "ok $i - cmake consumer # SKIP cmake is not installed"; done; exit 0
fi
cfg=$(find "$root" -name dltrainConfig.cmake | head -1)
ver=$(find "$root" -name dltrainConfigVersion.cmake | head -1)
if [ -n "$cfg" ] && [ -n "$ver" ] && [ "$(dirname "$cfg")" = "$libdir/cmake/dltrain" ]; then
  echo "ok 5 - dltrainConfig.cmake and dltrainConfigVersion.cmake in <libdir>/cmake/dltrain"
else echo "not ok 5 - CMake package files: '$cfg' '$ver' (libdir $libdir)"; fi
mkdir -p "$tmp/cm"
cp "$tmp/app.c" "$tmp/cm/app.c"
cat > "$tmp/cm/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.13)
project(dltrain_consumer C)
find_package(dltrain 0.1 REQUIRED)
add_executable(app app.c)
target_link_libraries(app PRIVATE dltrain::dltrain)
if(TARGET dltrain::dltrain_static)
  add_executable(app_static app.c)
  target_link_libraries(app_static PRIVATE dltrain::dltrain_static)
endif()
CM
if cmake -S "$tmp/cm" -B "$tmp/cm/b" -DCMAKE_PREFIX_PATH="$root" >"$tmp/cmlog" 2>&1 &&
   cmake --build "$tmp/cm/b" >>"$tmp/cmlog" 2>&1; then
  echo "ok 6 - find_package(dltrain 0.1) and both targets build"
else echo "not ok 6 - CMake consumer"; sed 's/^/# /' "$tmp/cmlog" | tail -30; fi
if out=$("$tmp/cm/b/app" 2>&1) && ldd "$tmp/cm/b/app" | grep -q "libdltrain.so.1 => $libdir"; then
  echo "ok 7 - CMake consumer runs on the installed shared library # $out"
else echo "not ok 7 - CMake consumer run"; echo "# $out"; ldd "$tmp/cm/b/app" | sed 's/^/# /'; fi
if [ ! -f "$libdir/libdltrain.a" ]; then
  echo "ok 8 - static consumer # SKIP no libdltrain.a installed"
elif out=$("$tmp/cm/b/app_static" 2>&1) && ! ldd "$tmp/cm/b/app_static" | grep -q libdltrain; then
  echo "ok 8 - CMake static consumer (dltrain::dltrain_static) runs # $out"
else echo "not ok 8 - CMake static consumer"; echo "# $out"; fi
# a version the package does not satisfy is refused
sed -i 's/find_package(dltrain 0.1 REQUIRED)/find_package(dltrain 1.0 REQUIRED)/' "$tmp/cm/CMakeLists.txt"
if ! cmake -S "$tmp/cm" -B "$tmp/cm/b2" -DCMAKE_PREFIX_PATH="$root" >"$tmp/cmlog2" 2>&1 &&
   grep -q "not accepted" "$tmp/cmlog2"; then
  echo "ok 9 - find_package(dltrain 1.0) is refused by the version file"
else echo "not ok 9 - version check"; sed 's/^/# /' "$tmp/cmlog2" | tail -10; fi
