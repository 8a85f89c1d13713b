#!/usr/bin/env bash
# meson install into a temporary prefix, then build a consumer with pkg-config only and run it.
build="$1"; src="$2"
echo "1..3"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if DESTDIR="$tmp/dest" meson install -C "$build" --no-rebuild >"$tmp/log" 2>&1; then
  echo "ok 1 - meson install into a temporary prefix"
else echo "not ok 1 - meson install"; sed 's/^/# /' "$tmp/log" | tail -20; exit 0; fi
prefix=$(meson introspect "$build" --buildoptions | python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"][0])')
libdir=$(meson introspect "$build" --buildoptions | python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="libdir"][0])')
root="$tmp/dest$prefix"
pc=$(find "$root" -name dltrain.pc | head -1)
# The .pc names the real prefix; point it at the staged copy.
sed -i "s|^prefix=.*|prefix=$root|" "$pc"
export PKG_CONFIG_PATH=$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
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
if ${CC:-cc} "$tmp/app.c" -o "$tmp/app" $(pkg-config --cflags --libs dltrain) 2>"$tmp/err"; then
  echo "ok 2 - consumer builds with pkg-config --cflags --libs dltrain"
else echo "not ok 2 - consumer build"; sed 's/^/# /' "$tmp/err"; exit 0; fi
if out=$(LD_LIBRARY_PATH="$(pkg-config --variable=libdir dltrain)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/app" 2>&1); then
  echo "ok 3 - consumer runs against the installed library # $out"
else echo "not ok 3 - consumer run"; echo "# $out"; fi
