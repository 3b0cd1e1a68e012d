#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ into build-fuzz/ (clang, ASan+UBSan,
# CUDA off, no tests or benchmarks) and runs each for a bounded time over a
# copy of its seed corpus, fuzz/corpus/<fuzzer>/ (nothing is written back).
# Fails when any fuzzer finds a crash, a leak, a timeout or runs out of memory;
# the inputs that did it are kept in build-fuzz/fuzz-artifacts/.
#
# Usage: scripts/fuzz.sh [SECONDS [FUZZER...]]
#   SECONDS   per fuzzer (default $FUZZ_SECONDS, else 20)
#   FUZZER    names from fuzz/CMakeLists.txt (default: all of them)
# Environment: FUZZ_SECONDS, FUZZ_RUNS (stop each fuzzer after that many inputs,
# SECONDS still capping it), FUZZ_BUILD_DIR (build-fuzz), REPLICAD_JOBS.
# Reproduce a finding: build-fuzz/fuzz/<fuzzer> build-fuzz/fuzz-artifacts/<file>
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-${FUZZ_SECONDS:-20}}"
[ $# -gt 0 ] && shift
build_dir="${FUZZ_BUILD_DIR:-build-fuzz}"
jobs="${REPLICAD_JOBS:-$(nproc)}"

if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
    -DREPLICAD_WITH_CUDA=OFF -DREPLICAD_BUILD_TESTS=OFF -DREPLICAD_BUILD_BENCHMARKS=OFF \
    -DREPLICAD_BUILD_FUZZERS=ON -DCMAKE_UNITY_BUILD="${REPLICAD_UNITY_BUILD:-ON}" >/dev/null
fi
build_start=$SECONDS
ninja -C "$build_dir" -j "$jobs" fuzzers
echo "fuzz: built in $((SECONDS - build_start)) s"

if [ $# -gt 0 ]; then
  fuzzers=("$@")
else
  fuzzers=()
  for dir in fuzz/corpus/*/; do fuzzers+=("$(basename "$dir")"); done
fi

# In memory where there is a tmpfs: the file-reading fuzzers write each input.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then work="$(mktemp -d -p /dev/shm)"; else work="$(mktemp -d)"; fi
trap 'rm -rf "$work"' EXIT
artifacts="$build_dir/fuzz-artifacts"
mkdir -p "$artifacts" "$work/tmp"
# A finding aborts at once with a whole stack; UBSan's too.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

failed=()
printf '%-28s %10s %8s %8s %8s  %s\n' fuzzer executions exec/s corpus rss_mb result
for fuzzer in "${fuzzers[@]}"; do
  corpus="$work/corpus/$fuzzer"
  mkdir -p "$corpus"
  cp fuzz/corpus/"$fuzzer"/* "$corpus"/
  log="$work/$fuzzer.log"
  status=0
  # Temporary files of the fuzzers (model files, IDX pairs) go under $work.
  TMPDIR="$work/tmp" "$build_dir/fuzz/$fuzzer" -max_total_time="$seconds" -timeout=25 \
    -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 -runs="${FUZZ_RUNS:--1}" \
    -artifact_prefix="$artifacts/$fuzzer-" "$corpus" >"$log" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  result=ok
  if [ "$status" -ne 0 ]; then
    result="FAILED (exit $status)"
    failed+=("$fuzzer")
  fi
  printf '%-28s %10s %8s %8s %8s  %s\n' "$fuzzer" "${runs:--}" "${rate:--}" \
    "$(find "$corpus" -type f | wc -l)" "${rss:--}" "$result"
  if [ "$status" -ne 0 ]; then
    tail -n 60 "$log"
    echo "fuzz: $fuzzer: reproduce with $build_dir/fuzz/$fuzzer $artifacts/$fuzzer-*"
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}"
  exit 1
fi
echo "fuzz: ${#fuzzers[@]} fuzzers, ${seconds} s each, no findings"
