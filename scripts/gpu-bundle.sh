#!/usr/bin/env bash
# Packs what the GPU checks need to run on a GPU machine that cannot build
# replicad (the lent device machines have CUDA, PyTorch and cuDNN/cuBLAS/NCCL
# through pip, but none of replicad's other dependencies and no network):
# the gpu-labelled test binaries, replicad, replicactl, model_forward_bench and train_step_bench,
# the shared libraries they load that are not CUDA's, the ONNX backend
# test data and an int8 resnet18, into .gpu-bundle/bundle.tar.xz (git-ignored). On the GPU machine,
# from the repository root:
#   bash scripts/gpu-check.sh          # unpacks, runs ctest -L gpu, compare_gpu.py
# Build first (bash scripts/build.sh); CUDA must be enabled (nvcc found).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${REPLICAD_BUILD_DIR:-build}"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/tests" "$stage/benchmarks" "$stage/lib" "$stage/testdata"

binaries=("$build/bin/replicad" "$build/bin/replicactl" "$build/benchmarks/model_forward_bench"
          "$build/benchmarks/train_step_bench")
# perf_analyzer from tritonclient 2.41.0's wheel (scripts/triton-venv.sh), for the batching
# gain; its libcudart comes from the GPU machine's nvidia pip packages (gpu-env.sh).
if [ -x .venv-triton/bin/perf_analyzer.bin ]; then
  cp .venv-triton/bin/perf_analyzer.bin "$stage/bin/perf_analyzer"
  binaries+=(.venv-triton/bin/perf_analyzer.bin)
else
  echo "gpu-bundle: no .venv-triton/bin/perf_analyzer.bin (bash scripts/triton-venv.sh): the batching gain will not be measured" >&2
fi
for test in $(cd "$build" && ctest -L gpu -N | awk '/Test +#/ {print $3}'); do
  binaries+=("$build/tests/$test")
done
for b in "${binaries[@]}"; do
  case "$b" in
    */perf_analyzer.bin) ;;  # Copied above as bin/perf_analyzer.
    */tests/*) cp "$b" "$stage/tests/" ;;
    */benchmarks/*) cp "$b" "$stage/benchmarks/" ;;
    *) cp "$b" "$stage/bin/" ;;
  esac
done
# Every shared library they load except the C and C++ runtimes (the GPU
# machine's are newer, and compatible) and CUDA's (its driver and pip
# packages provide those).
ldd "${binaries[@]}" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/usr/local/cuda' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
# Debug information is most of a RelWithDebInfo binary; the carry is limited.
strip --strip-debug "$stage"/bin/* "$stage"/tests/* "$stage"/benchmarks/* "$stage"/lib/*
cp -r /usr/share/libonnx-testdata/data "$stage/testdata/"
# resnet18 as onnxruntime's quantize_static writes it (QDQ), for compare_gpu.py's int8 row: the
# GPU machine has no onnxruntime to quantize with. int8_bench.py's files, made here if missing.
if [ -x .venv-triton/bin/python ]; then
  models="$build/bench_models"
  if [ ! -f "$models/resnet18_qdq/model.onnx" ]; then
    /usr/bin/python3 tests/parity/export_torch_models.py "$models" --models resnet18
    .venv-triton/bin/python tests/parity/quantize_models.py "$models" "$models" --models resnet18
  fi
  mkdir -p "$stage/models"
  cp "$models/resnet18_qdq/model.onnx" "$stage/models/resnet18_qdq.onnx"
else
  echo "gpu-bundle: no .venv-triton (bash scripts/triton-venv.sh): the int8 row will be skipped" >&2
fi
mkdir -p .gpu-bundle
# xz -9: its 64 MiB dictionary spans several test binaries, which share most
# of their code (each links the libraries statically): the carry is 64 MiB.
XZ_OPT="-9" tar -C "$stage" -cJf .gpu-bundle/bundle.tar.xz .
echo "wrote .gpu-bundle/bundle.tar.xz ($(du -h .gpu-bundle/bundle.tar.xz | cut -f1)); carry .gpu-bundle"
