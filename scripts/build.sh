#!/usr/bin/env bash
# Configures and builds replicad into build/ (or $REPLICAD_BUILD_DIR).
# Usage: scripts/build.sh [ninja targets...]   (no targets: everything)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${REPLICAD_BUILD_DIR:-build}"
jobs="${REPLICAD_JOBS:-$(nproc)}"
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
ninja -C "$build_dir" -j "$jobs" "$@"
