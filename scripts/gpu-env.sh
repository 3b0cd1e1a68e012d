# Sourced by the scripts that run replicad on a GPU machine (gpu-check.sh,
# gpu-profile-train.sh), from the repository root. Sets:
#   python     the python3 that holds PyTorch
#   libs       LD_LIBRARY_PATH for replicad's processes only ("" with a build tree)
#   tests      the folder of the gpu-labelled test binaries
#   bench_dir  the folder holding bin/ and benchmarks/ (compare_gpu.py --build-dir)
# Uses .gpu-bundle/bundle.tar.xz (scripts/gpu-bundle.sh), unpacked to
# /tmp/replicad-gpu, where the machine cannot build replicad; else the build tree.
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
