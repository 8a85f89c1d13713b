#!/usr/bin/env bash
# Every public header compiles alone as C11 (-Wall -Wextra -Wpedantic -Werror) and as C++;
# every fallible function (one that returns a dlt_status) is DLT_NODISCARD, so a caller
# that ignores a failure gets a warning (dlt_last_error_code, a getter, is the exception).
inc="$1"
cc=${CC:-cc}; cxx=${CXX:-c++}
hdrs=$(cd "$inc" && ls dltrain.h dltrain/*.h)
n=0; out=""
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for h in $hdrs; do
  n=$((n+1))
  printf '#include "%s"\nint main(void) { return 0; }\n' "$h" > "$tmp/t.c"
  if $cc -std=c11 -Wall -Wextra -Wpedantic -Werror -I"$inc" -c "$tmp/t.c" -o "$tmp/t.o" 2>"$tmp/err"; then
    out="$out\nok $n - $h compiles alone as C11"
  else out="$out\nnot ok $n - $h as C11\n$(sed 's/^/# /' "$tmp/err")"; fi
  n=$((n+1))
  printf '#include "%s"\nint main() { return 0; }\n' "$h" > "$tmp/t.cpp"
  if command -v "$cxx" >/dev/null && $cxx -std=c++17 -Wall -Wextra -Wpedantic -Werror -I"$inc" -c "$tmp/t.cpp" -o "$tmp/t.o" 2>"$tmp/err"; then
    out="$out\nok $n - $h compiles alone as C++17"
  else out="$out\nnot ok $n - $h as C++\n$(sed 's/^/# /' "$tmp/err" 2>/dev/null)"; fi
done
n=$((n+1))
bare=$(cd "$inc" && python3 - $hdrs <<'PY'
import re, sys
for h in sys.argv[1:]:
    for m in re.finditer(r"DLT_API\s+((?:DLT_NODISCARD\s+)?)(?:DLT_DEPRECATED\([^)]*\)\s+)?dlt_status\s+(\w+)\s*\(",
                         open(h).read()):
        if not m.group(1) and m.group(2) != "dlt_last_error_code":
            print("%s: %s" % (h, m.group(2)))
PY
)
if [ -z "$bare" ]; then out="$out\nok $n - every function returning dlt_status is DLT_NODISCARD"
else out="$out\nnot ok $n - fallible functions without DLT_NODISCARD\n$(printf '%s\n' "$bare" | sed 's/^/# /')"; fi
echo "1..$n"
printf "$out\n" | sed '/^$/d'
