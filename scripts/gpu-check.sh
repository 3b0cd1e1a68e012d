#!/usr/bin/env bash
# The GPU checks in one command, on a machine with an NVIDIA GPU: the
# gpu-labelled tests, then benchmarks/compare_gpu.py (resnet50 against
# PyTorch). Uses .gpu-bundle/bundle.tar.xz (scripts/gpu-bundle.sh) where the
# machine cannot build replicad, else the build tree. Logs and the benchmark
# table go to $OUT (default ./gpu-check-out).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$out"
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
python="$(command -v python3)"
if [ -f .gpu-bundle/bundle.tar.xz ]; then
  root=/tmp/replicad-gpu
  rm -rf "$root" && mkdir -p "$root" && tar -C "$root" -xJf .gpu-bundle/bundle.tar.xz
  # The tests read the ONNX backend data where Debian installs it.
  mkdir -p /usr/share/libonnx-testdata && rm -rf /usr/share/libonnx-testdata/data &&
    ln -s "$root/testdata/data" /usr/share/libonnx-testdata/data
  # cuDNN, cuBLAS, NCCL and the CUDA runtime from the pip packages next to PyTorch.
  nvidia_libs="$("$python" - <<'PY'
import glob, os, nvidia
roots = [os.path.dirname(p) for p in nvidia.__path__] if hasattr(nvidia, "__path__") else []
dirs = sorted({os.path.dirname(f) for r in roots for f in glob.glob(r + "/nvidia/**/lib*.so*", recursive=True)})
print(":".join(dirs))
PY
)"
  # Only replicad's processes get the bundled libraries: Python and PyTorch
  # keep the machine's own (e.g. its libcrypto).
  libs="$root/lib:$nvidia_libs"
  tests="$root/tests"
  bench_dir="$root"
else
  libs=""
  tests="${REPLICAD_BUILD_DIR:-build}/tests"
  bench_dir="${REPLICAD_BUILD_DIR:-build}"
fi
status=0
for test in "$tests"/*; do
  name="$(basename "$test")"
  echo "== $name"
  LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$test" 2>&1 |
    tee "$out/$name.log" | tail -15
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
echo "== compare_gpu.py"
REPLICAD_BENCH_LD_LIBRARY_PATH="$libs" PYTHONUNBUFFERED=1 "$python" benchmarks/compare_gpu.py --build-dir "$bench_dir" \
  --output "$out/gpu.md" 2>&1 | tail -40 || status=1
exit $status
