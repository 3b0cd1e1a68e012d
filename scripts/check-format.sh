#!/usr/bin/env bash
# Checks that every C++ and CUDA source follows .clang-format (Debian's
# clang-format 14). Usage: scripts/check-format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
if ! clang-format --dry-run --Werror "${files[@]}" 2> /tmp/replicad-format.log; then
  grep -E '^[^ ].*: error:' /tmp/replicad-format.log | cut -d: -f1 | sort | uniq -c | sort -rn | head -20
  echo "clang-format: the files above differ from .clang-format; run scripts/check-format.sh --fix" >&2
  exit 1
fi
echo "clang-format: ${#files[@]} files follow .clang-format"
