#!/usr/bin/env bash
# docs/api.md is generated from the headers and every public function is documented (TAP).
src="$1"
echo "1..2"
if out=$(python3 "$src/scripts/gen_api_docs.py" --undocumented); then echo "ok 1 - every public function has a doc comment"
else echo "not ok 1 - undocumented public functions"; printf '%s\n' "$out" | sed 's/^/# /'; fi
if python3 "$src/scripts/gen_api_docs.py" --check >/dev/null; then echo "ok 2 - docs/api.md matches the headers"
else echo "not ok 2 - docs/api.md is stale (run python3 scripts/gen_api_docs.py)"; fi
