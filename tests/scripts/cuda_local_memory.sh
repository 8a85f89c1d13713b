#!/usr/bin/env bash
# Local memory in the CUDA kernels (TAP), no GPU needed: every cuda/*.cu is compiled for sm_90
# with `-Xptxas -v`, one test per file, ok when each kernel (and each function ptxas keeps
# apart) has a 0-byte stack frame or is allowlisted below within its size. A stack frame is
# per-thread local memory: a run-time index into a kernel-argument struct once copied the
# struct there in every thread (nd_offset, 224 bytes, a bf16 copy 33x under bandwidth on an
# H200) and nothing failed. Device code only (-cubin): no host compile, a third of the time.
#   cuda_local_memory.sh SRC [NVCC [EXTRA_NVCC_ARGS...]]   (meson passes the build's nvcc and
#   its -I of toolkit_root; SRC may be a scratch copy of the tree)
src="$1"
nvcc="${2:-nvcc}"
shift
[ $# -gt 0 ] && shift
extra=("$@")
# One architecture: the sizes below are ptxas's for it; Hopper is what the figures came from.
arch=sm_90

# file|kernel identifier (all its template instances)|largest allowed frame, bytes|why
allowlist() {
    cat <<'EOF'
adamw.cu|adamw_kernel|40|the epilogue evaluates the lr schedule in double (lib/kernel/optim.h, cos); CUDA's Payne-Hanek reduction for huge cos arguments keeps 40 bytes in local memory, and pi*[0,1] never takes it
sgd.cu|sgd_kernel|40|the same lr schedule epilogue as adamw_kernel (double cos slow path, never taken)
sgd.cu|sgd_state_kernel|40|the schedule evaluated when the state is advanced (double cos slow path, never taken)
elementwise.cu|rand_kernel|40|Box-Muller in double (lib/kernel/philox.h: sin/cos of 2*pi*u); the same slow path, never taken for arguments under 2*pi
data.cu|gather_image_kernel|24|register spills of ptxas (8-24 bytes, spill stores in its report; the PTX has no local array, so no argument copy); one image per block, far from the step's time
EOF
}

if ! command -v "$nvcc" >/dev/null 2>&1; then
    echo "1..0 # SKIP nvcc not found ($nvcc)"
    exit 0
fi
if command -v c++filt >/dev/null 2>&1; then demangle() { c++filt; }; else demangle() { cat; }; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Largest first: attention_flash.cu alone takes a third of the time, so it must not start last.
mapfile -t files < <(cd "$src/cuda" && ls -S -- *.cu)
if [ "${#files[@]}" -eq 0 ]; then
    echo "1..1"
    echo "not ok 1 - no cuda/*.cu under $src"
    exit 0
fi
jobs=$(nproc 2>/dev/null || echo 2)
export nvcc src arch tmp
# xargs appends the file after the extra arguments
printf '%s\n' "${files[@]}" | xargs -P "$jobs" -n1 bash -c '
    f="${!#}"
    "$nvcc" -std=c++17 -I"$src/include" -I"$src" --expt-relaxed-constexpr "${@:1:$#-1}" \
        -arch=$arch -cubin -Xptxas -v -o /dev/null "$src/cuda/$f" >"$tmp/$f.log" 2>&1
    echo $? >"$tmp/$f.rc"' _ "${extra[@]}"

n=0
used=()
echo "1..$((${#files[@]} + 1))"
for f in "${files[@]}"; do
    n=$((n + 1))
    log="$tmp/$f.log"
    if [ "$(cat "$tmp/$f.rc" 2>/dev/null)" != 0 ]; then
        echo "not ok $n - $f: does not compile"
        err=$(grep -m1 -E 'error|Error' "$log")
        echo "# ${err:-$(head -n1 "$log")}"
        continue
    fi
    # "Function properties for NAME" is followed by "N bytes stack frame, ..." for that NAME
    mapfile -t frames < <(awk '/Function properties for/ { name = $NF }
                               /bytes stack frame/ { print $1, name }' "$log")
    if [ "${#frames[@]}" -eq 0 ] && grep -q '__global__' "$src/cuda/$f"; then
        # a kernel compiled but nothing parsed: ptxas's report changed, and this test with it
        echo "not ok $n - $f: no stack frame sizes in ptxas's report"
        head -n3 "$log" | sed 's/^/# /'
        continue
    fi
    bad=()
    checked=0
    for fr in "${frames[@]}"; do
        size=${fr%% *}
        name=${fr#* }
        checked=$((checked + 1))
        [ "$size" = 0 ] && continue
        allowed=
        while IFS='|' read -r af id max _; do
            # mangled names spell an identifier as <length><name>, so gather_kernel does not
            # match gather_image_kernel; unmangled (extern "C") names match whole
            [ "$af" = "$f" ] || continue
            if [ "$name" = "$id" ] || [[ "$name" == *"${#id}$id"* ]]; then
                if [ "$size" -le "$max" ]; then allowed=y; else allowed="allowlisted up to $max"; fi
                break
            fi
        done < <(allowlist)
        [ "$allowed" = y ] && continue
        bad+=("$size bytes: $(printf '%s\n' "$name" | demangle)${allowed:+ ($allowed)}")
    done
    if [ "${#bad[@]}" -eq 0 ]; then
        echo "ok $n - $f: $checked functions, no stack frame beyond the allowlist"
    else
        echo "not ok $n - $f: ${#bad[@]} of $checked functions with a stack frame (local memory)"
        printf '# %s\n' "${bad[@]}"
    fi
done

# An entry whose kernel is gone (renamed, moved) would allow its successor nothing and only
# mislead; sizes that dropped to 0 may stay (another toolkit may spill again).
n=$((n + 1))
stale=()
while IFS='|' read -r af id _ _; do
    [ -f "$tmp/$af.log" ] || { stale+=("$af: no such file in cuda/"); continue; }
    [ "$(cat "$tmp/$af.rc")" = 0 ] || continue
    grep -q -E "Function properties for (.*${#id}$id|$id\$)" "$tmp/$af.log" ||
        stale+=("$af: no function $id")
done < <(allowlist)
if [ "${#stale[@]}" -eq 0 ]; then
    echo "ok $n - every allowlist entry names a kernel of its file"
else
    echo "not ok $n - allowlist entries that name no kernel"
    printf '# %s\n' "${stale[@]}"
fi
