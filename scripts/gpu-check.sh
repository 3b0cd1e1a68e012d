#!/usr/bin/env bash
# The GPU checks in one command, on a machine with an NVIDIA GPU: the
# gpu-labelled tests, then benchmarks/compare_gpu.py (resnet50 against
# PyTorch). Uses .gpu-bundle/bundle.tar.xz (scripts/gpu-bundle.sh) where the
# machine cannot build replicad, else the build tree. Logs and the benchmark
# table go to $OUT (default ./gpu-check-out), with the figures as JSON
# (gpu-latest.json, to commit as benchmarks/results/gpu-latest.json).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$out"
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
# Sets python, libs, tests and bench_dir.
source scripts/gpu-env.sh
# Each test runs under a time limit (a hang must not eat a lent machine's
# few minutes), REPLICAD_GPU_JOBS at a time on the one GPU (3 by default: 18
# test binaries one after another would take most of a lent machine's 10
# minutes a call; REPLICAD_GPU_JOBS=1 reruns them alone); full logs go to
# $out/gpu-check-logs.tar.gz (the device tool returns few files), the
# summary and the failing tests' tails to stdout. Arguments are passed on to
# compare_gpu.py.
test_timeout="${REPLICAD_GPU_TEST_TIMEOUT:-300}"
jobs="${REPLICAD_GPU_JOBS:-3}"
logs="$out/logs"
mkdir -p "$logs"
export libs logs test_timeout
run_one() {
  local name
  name="$(basename "$1")"
  LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout -k 5 "$test_timeout" "$1" \
    >"$logs/$name.log" 2>&1
  echo "$?" >"$logs/$name.rc"
}
export -f run_one
# A lent machine's call runs at most 10 minutes: REPLICAD_GPU_PARTS=tests
# or bench runs one half per call (default: both, one after the other).
parts="${REPLICAD_GPU_PARTS:-tests,bench}"
status=0
if [[ ",$parts," == *,tests,* ]]; then
  ls -d "$tests"/* | xargs -P "$jobs" -I{} bash -c 'run_one "$1"' _ {}
  for test in "$tests"/*; do
    name="$(basename "$test")"
    rc="$(cat "$logs/$name.rc" 2>/dev/null || echo missing)"
    summary="$(grep -E '^\[  (PASSED|SKIPPED|FAILED)  \]' "$logs/$name.log" | tr '\n' ' ')"
    echo "== $name rc=$rc $summary"
    if [ "$rc" != 0 ]; then
      status=1
      [ "$rc" = 124 ] && echo "   (timed out after ${test_timeout}s)"
      grep -E '^\[  FAILED  \]|Failure|error|Error' "$logs/$name.log" | head -20
      tail -15 "$logs/$name.log"
    fi
  done
fi
if [[ ",$parts," == *,bench,* ]]; then
  echo "== compare_gpu.py"
  REPLICAD_BENCH_LD_LIBRARY_PATH="$libs" PYTHONUNBUFFERED=1 timeout -k 5 "${REPLICAD_GPU_BENCH_TIMEOUT:-1800}" \
    "$python" benchmarks/compare_gpu.py --build-dir "$bench_dir" --output "$out/gpu.md" "$@" \
    >"$logs/compare_gpu.log" 2>&1 || status=1
  tail -60 "$logs/compare_gpu.log"
  # The figures as JSON (benchmarks/gpu_summary.py), to commit as
  # benchmarks/results/gpu-latest.json.
  cp benchmarks/results/gpu-latest.json "$out/" 2>/dev/null || echo "== no gpu-latest.json written"
fi
tar -C "$out" -czf "$out/gpu-check-logs.tar.gz" logs && rm -rf "$logs"
exit $status
