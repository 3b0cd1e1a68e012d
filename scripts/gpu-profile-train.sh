#!/usr/bin/env bash
# Per-kernel GPU time of one resnet50 training step, replicad next to PyTorch
# (benchmarks/profile_gpu_train.py: ncu for replicad, torch.profiler for
# PyTorch), on a machine with an NVIDIA GPU, TF32 off then on. Uses the
# bundle or the build tree as gpu-check.sh does; the report and ncu's raw CSV
# go to $OUT (default ./gpu-check-out). Arguments go to profile_gpu_train.py.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$out"
# Sets python, libs, tests and bench_dir.
source scripts/gpu-env.sh
status=0
for tf32 in "" --tf32; do
  name="train-profile${tf32:+-tf32}"
  REPLICAD_BENCH_LD_LIBRARY_PATH="$libs" PYTHONUNBUFFERED=1 "$python" benchmarks/profile_gpu_train.py \
    --build-dir "$bench_dir" --output "$out/$name.md" --raw-dir "$out/$name-raw" $tf32 "$@" \
    2>"$out/$name.log" || status=1
  tail -5 "$out/$name.log"
  [ -d "$out/$name-raw" ] && gzip -f "$out/$name-raw"/*.csv 2>/dev/null
done
exit $status
