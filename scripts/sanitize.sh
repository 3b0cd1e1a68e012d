#!/usr/bin/env bash
# Builds replicad with sanitizers and runs its tests there; exits non-zero on a failing test
# or on any sanitizer report, including one from a daemon a test started.
# Usage: scripts/sanitize.sh [address|thread]...   (none: both)
#   address: ASan+UBSan (and LeakSanitizer) in build-asan/
#   thread:  TSan in build-tsan/ (scripts/sanitizers/tsan.supp says what is suppressed, why)
# ASan runs every test, the daemon's e2e and protocol tests included (GPU tests skip); the
# TSan build leaves out the tests labelled no_threads (tests/CMakeLists.txt says why).
# Needs what scripts/test.sh installs (scripts/install-deps.sh, scripts/triton-venv.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
jobs="${REPLICAD_JOBS:-$(nproc)}"
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(address thread)

status=0
for kind in "${kinds[@]}"; do
  case "$kind" in
    address)
      dir=build-asan
      sanitize=address,undefined
      ;;
    thread)
      dir=build-tsan
      sanitize=thread
      ;;
    *)
      echo "usage: $0 [address|thread]..." >&2
      exit 2
      ;;
  esac
  start=$SECONDS
  if [ ! -f "$dir/build.ninja" ]; then
    # -O1 as the sanitizers' manuals advise (fast enough, exact stacks); -g1 keeps line
    # numbers in reports and links fast. No CUDA (nvcc objects are not instrumented), no MPI
    # (Open MPI's own threads and allocations are not instrumented either: TSan and LSan
    # report inside it) and no benchmarks (not run here).
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
      -DREPLICAD_WITH_CUDA=OFF -DREPLICAD_WITH_MPI=OFF -DREPLICAD_BUILD_BENCHMARKS=OFF \
      -DREPLICAD_SANITIZE="$sanitize" -DCMAKE_UNITY_BUILD="${REPLICAD_UNITY_BUILD:-ON}"
  fi
  ninja -C "$dir" -j "$jobs"
  built=$SECONDS

  # Every instrumented process writes its reports to logs/report.PID: a daemon's report
  # fails the run even when the test that started it only looks at its answers.
  logs="$root/$dir/sanitizer-logs"
  rm -rf "$logs"
  mkdir -p "$logs"
  # allocator_may_return_null: a huge malloc answers NULL as glibc's does (our code turns it
  # into RESOURCE_EXHAUSTED) instead of ending the process.
  common="log_path=$logs/report:print_stacktrace=1:allocator_may_return_null=1"
  export UBSAN_OPTIONS="$common:halt_on_error=1"
  export ASAN_OPTIONS="$common:detect_leaks=1:strict_init_order=1:detect_stack_use_after_return=1"
  # TSan goes on after a report so that one run shows them all; any report fails the run.
  # history_size=7 (the most): long tests (activation_pass_test's OpenMP passes over large
  # tensors) otherwise lose the other thread's stack ("failed to restore the stack"), and a
  # report without it cannot match the suppressions that explain it.
  export TSAN_OPTIONS="$common:second_deadlock_stack=1:history_size=7:suppressions=$root/scripts/sanitizers/tsan.supp"
  # The parity tests' PyTorch exports are made once, by the plain build's run (scripts/test.sh
  # runs it first; the export script caches them by its own hash): exporting them again into
  # each sanitizer tree cost every run minutes of CI's time and checked nothing new.
  plain_fixtures="$root/${REPLICAD_BUILD_DIR:-build}/parity_fixtures"
  if [ -d "$plain_fixtures" ]; then
    export REPLICAD_PARITY_FIXTURES="$plain_fixtures"
  fi
  failed=0
  (cd "$dir" && ctest --output-on-failure -j "$jobs") || failed=1
  reports=("$logs"/report.*)
  if [ -e "${reports[0]}" ]; then
    failed=1
    for r in "${reports[@]}"; do
      echo "=== $kind sanitizer report: $r"
      cat "$r"
    done
  fi
  # GCC's UBSan ignores log_path when it runs beside ASan: its reports are in the tests'
  # output (and halt the process, which fails the test or the daemon under it).
  if grep -n "runtime error:" "$dir/Testing/Temporary/LastTest.log"; then
    failed=1
  fi
  echo "sanitize: $kind built in $((built - start)) s, tested in $((SECONDS - built)) s," \
    "$([ $failed -eq 0 ] && echo clean || echo FAILED)"
  [ $failed -eq 0 ] || status=1
done
exit $status
