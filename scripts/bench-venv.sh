#!/usr/bin/env bash
# Creates .venv for benchmarks/compare_peers.py: Debian's /usr/bin/python3 with its
# system site-packages (python3-torch, python3-torchvision, python3-onnx, numpy from
# scripts/install-deps.sh) plus ONNX Runtime from PyPI, the peer engine.
# Idempotent: an existing .venv that already imports the pinned onnxruntime is left alone.
# Usage: bash scripts/bench-venv.sh     then: .venv/bin/python benchmarks/compare_peers.py
set -euo pipefail
cd "$(dirname "$0")/.."

# 1.20.1 has CPython 3.11 wheels for x86-64 and aarch64 and accepts Debian 12's numpy 1.24
# (torch 1.13 is built against numpy 1.x, so numpy must not be upgraded to 2.x here).
ort_version="1.31.1"
venv=".venv"

if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
if "$venv/bin/python" -c "import onnxruntime, sys; sys.exit(onnxruntime.__version__ != '$ort_version')" \
    2>/dev/null; then
  echo "bench-venv: $venv has onnxruntime $ort_version"
  exit 0
fi
# "numpy<2" keeps the system numpy that torch was built against.
"$venv/bin/python" -m pip install --disable-pip-version-check -q \
  "onnxruntime==$ort_version" "numpy<2"
"$venv/bin/python" -c "import onnxruntime, torch, numpy; \
print('bench-venv: onnxruntime', onnxruntime.__version__, 'torch', torch.__version__, \
'numpy', numpy.__version__)"
