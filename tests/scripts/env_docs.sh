#!/usr/bin/env bash
# docs/environment.md lists every DLT_* / DLTRAIN_* environment variable the sources read,
# and nothing they do not read (TAP).
src="$1"
read_vars=$(cd "$src" && grep -rhoE \
    'getenv\("DLT[A-Z0-9_]*"\)|_from_env\("DLT[A-Z0-9_]*"|env_count\("DLT[A-Z0-9_]*"|os\.environ(\.get\(|\[)"DLT[A-Z0-9_]*"' \
    lib cuda examples tests bindings/python --include='*.c' --include='*.h' --include='*.cu' \
    --include='*.cuh' --include='*.py' | grep -oE 'DLT[A-Z0-9_]*' | sort -u)
doc_vars=$(grep -oE '^\| `DLT[A-Z0-9_]*`' "$src/docs/environment.md" | grep -oE 'DLT[A-Z0-9_]*' | sort -u)
echo "1..2"
missing=$(comm -23 <(printf '%s\n' "$read_vars") <(printf '%s\n' "$doc_vars"))
stale=$(comm -13 <(printf '%s\n' "$read_vars") <(printf '%s\n' "$doc_vars"))
if [ -n "$read_vars" ] && [ -z "$missing" ]; then
  echo "ok 1 - every environment variable the sources read is in docs/environment.md ($(printf '%s\n' "$read_vars" | wc -l) variables)"
else
  echo "not ok 1 - read but not documented in docs/environment.md"; printf '# %s\n' $missing
fi
if [ -n "$doc_vars" ] && [ -z "$stale" ]; then echo "ok 2 - every variable in docs/environment.md is read somewhere"
else echo "not ok 2 - documented but read nowhere"; printf '# %s\n' $stale; fi
