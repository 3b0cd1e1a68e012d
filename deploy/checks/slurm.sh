#!/usr/bin/env bash
# Checks deploy/slurm offline (no cluster), run by deploy/check.sh: shellcheck on every script,
# and that each `replicad serve` and `replicactl` flag the scripts pass is one the binaries
# take (their --help, from $REPLICAD_BIN_DIR or build/bin). Exits non-zero on a failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="${REPLICAD_BIN_DIR:-build/bin}"
failures=0
scripts=(deploy/slurm/*.sbatch)
shellcheck --shell=bash "${scripts[@]}"
serve_help="$("$bin/replicad" serve --help)"
ctl_help="$("$bin/replicactl" --help; for c in train save-checkpoint models; do
  "$bin/replicactl" "$c" --help; done)"
for script in "${scripts[@]}"; do
  # Flags on the lines of a replicad serve command (through its continuation lines) and of
  # replicactl commands.
  serve_flags=$(awk '/REPLICAD" serve|replicad serve/ {on = 1} on {print} on && !/\\$/ {on = 0}' \
    "$script" | grep -oE -- '--[a-z][a-z0-9-]+' | sort -u)
  ctl_flags=$(awk '/REPLICACTL"|replicactl / {on = 1} on {print} on && !/\\$/ {on = 0}' \
    "$script" | grep -oE -- '--[a-z][a-z0-9-]+' | sort -u)
  for flag in $serve_flags; do
    case "$flag" in --mpi|--kill-on-bad-exit|--ntasks) continue ;; esac  # srun's own
    grep -qE -- "(^|[ ,])$flag([ =,]|$)" <<<"$serve_help" ||
      { echo "slurm check: $script: replicad serve has no $flag" >&2; failures=$((failures + 1)); }
  done
  for flag in $ctl_flags; do
    grep -qE -- "(^|[ ,])$flag([ =,]|$)" <<<"$ctl_help" ||
      { echo "slurm check: $script: replicactl has no $flag" >&2; failures=$((failures + 1)); }
  done
  echo "ok   $script: shellcheck clean; $(wc -w <<<"$serve_flags") replicad serve and" \
    "$(wc -w <<<"$ctl_flags") replicactl flags known"
done
[ "$failures" -eq 0 ] || exit 1
echo "slurm: every check passed"
