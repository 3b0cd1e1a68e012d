#!/usr/bin/env bash
# Configures and builds replicad into build/ (or $REPLICAD_BUILD_DIR).
# Usage: scripts/build.sh [ninja targets...]   (no targets: everything)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${REPLICAD_BUILD_DIR:-build}"
jobs="${REPLICAD_JOBS:-$(nproc)}"
# Unity sources (CMake's UNITY_BUILD: a library's .cc files compiled a few at a time) halve the
# library code's compile time, where headers (Abseil, protobuf, gRPC, Boost.Asio) are most of
# the work: CI builds four trees on two cores. REPLICAD_UNITY_BUILD=OFF compiles file by file,
# for quicker rebuilds of one changed file. -g1: line tables (a backtrace's files and lines)
# without the full debug information, which cost a third of the compile of the heaviest files.
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    -DCMAKE_UNITY_BUILD="${REPLICAD_UNITY_BUILD:-ON}"
fi
ninja -C "$build_dir" -j "$jobs" "$@"
