#!/usr/bin/env bash
# scripts/check_format.sh [CLANG_FORMAT]: every tracked C++ file is formatted as .clang-format
# says (clang-format 14, the version the style was checked with). Lists the files that differ
# and exits 1 if any does. The meson test `clang_format` runs it; to fix a file:
# clang-format -i FILE.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
clang_format=${1:-clang-format}
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.cc')
if ((${#files[@]} == 0)); then
    echo "check_format: no tracked C++ files (not a git checkout?)" >&2
    exit 1
fi
bad=()
for f in "${files[@]}"; do
    "$clang_format" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]} > 0)); then
    echo "check_format: ${#bad[@]} of ${#files[@]} files differ from .clang-format:"
    printf '  %s\n' "${bad[@]}"
    echo "fix with: $clang_format -i FILE"
    exit 1
fi
echo "check_format: ${#files[@]} files formatted"
