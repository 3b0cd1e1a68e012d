#!/usr/bin/env bash
# Creates .venv-triton: the clients we did not write, to drive replicad with in tests.
# Debian's /usr/bin/python3 with its system site-packages (python3-torch, numpy from
# scripts/install-deps.sh) plus, from PyPI, Triton's tritonclient (gRPC and HTTP),
# grpcio-health-checking, ONNX Runtime and the perf_analyzer load generator.
# Idempotent: a .venv-triton that already has every pinned version and the perf_analyzer
# binary is left alone (a quick check). Needs no stdin; apt-get runs only when libb64-0d
# is missing (needs root or sudo, as scripts/install-deps.sh does).
# Usage: bash scripts/triton-venv.sh
#   then: .venv-triton/bin/python (import tritonclient.grpc, tritonclient.http, grpc_health)
#         .venv-triton/bin/perf_analyzer -m MODEL -u localhost:8001 -i grpc
set -euo pipefail
cd "$(dirname "$0")/.."

venv=".venv-triton"
# tritonclient 2.73 is pure Python; its grpc extra wants grpcio >= 1.81.1 and protobuf 6.x.
tritonclient_version="2.73.0"
grpcio_version="1.85.3"
protobuf_version="6.33.6"
# The newest grpcio-health-checking that accepts protobuf 6.x: 1.82.1 and later want 7.x
# (1.82.0 allowed 6.x and was yanked for it, grpc/grpc#42906).
health_version="1.81.1"
# ONNX Runtime, the peer the protocol tests compare answers with (triton_half_float_test: the
# float16 and bfloat16 models), the version benchmarks/ measures against (scripts/bench-venv.sh).
ort_version="1.31.1"
# onnx: onnxruntime.quantization (tests/parity/quantize_models.py, the int8 tests) imports
# onnx.reference, which Debian's python3-onnx 1.12 lacks; 1.23.2 needs nothing the venv lacks.
onnx_version="1.23.2"
# perf_analyzer: the perf-analyzer wheels on PyPI need glibc 2.38 (Debian 12 has 2.36), so
# we take the binary shipped inside tritonclient 2.41.0's manylinux1_x86_64 wheel (glibc
# 2.34 at most); it needs libb64.so.0d (Debian's libb64-0d) and libcudart.so.12 (from
# nvidia-cuda-runtime-cu12, CUDA 12.3 as the binary was built with; no GPU needed). The venv
# keeps tritonclient 2.73: 2.41 is only downloaded, never installed.
pa_tritonclient_version="2.41.0"
pa_wheel="tritonclient-${pa_tritonclient_version}-py3-none-manylinux1_x86_64.whl"
pa_wheel_sha256="cf4ed5df836fa99937678a9fd852f86ba05c7b83656dd0a540e20afdb9ab4629"
pa_member="tritonclient-${pa_tritonclient_version}.data/data/bin/perf_analyzer"
pa_sha256="f1e1becf820f0b116d8d1745c50569e30d42ddace5a8bccf610914738bdacc8c"
cudart_version="12.3.101"

with_perf_analyzer=1
if [ "$(uname -m)" != "x86_64" ]; then
  echo "triton-venv: no perf_analyzer on $(uname -m) (the binary used here is x86-64 only)" >&2
  with_perf_analyzer=0
fi

changed=0

# libb64-0d for perf_analyzer (also listed in scripts/install-deps.sh).
if [ "$with_perf_analyzer" -eq 1 ] &&
   ! dpkg-query -W -f='${Status}' libb64-0d 2>/dev/null | grep -q "install ok installed"; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  echo "triton-venv: installing libb64-0d"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends libb64-0d
  changed=1
fi

if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  changed=1
fi
py="$venv/bin/python"

# Python packages: installed only when one of the pinned versions is missing or different.
pins=(
  "tritonclient[grpc,http]==$tritonclient_version"
  "grpcio==$grpcio_version"
  "protobuf==$protobuf_version"
  "grpcio-health-checking==$health_version"
  "onnxruntime==$ort_version"
  "onnx==$onnx_version"
)
[ "$with_perf_analyzer" -eq 0 ] || pins+=("nvidia-cuda-runtime-cu12==$cudart_version")
if ! "$py" - "${pins[@]}" <<'EOF' 2>/dev/null; then
import re, sys
from importlib.metadata import version
for pin in sys.argv[1:]:
    name, want = re.sub(r"\[.*\]", "", pin).split("==")
    if version(name) != want:
        sys.exit(1)
if int(version("numpy").split(".")[0]) >= 2:
    sys.exit(1)
EOF
  # "numpy<2" keeps the system numpy that torch was built against.
  "$py" -m pip install --disable-pip-version-check -q "${pins[@]}" "numpy<2"
  changed=1
fi

if [ "$with_perf_analyzer" -eq 1 ]; then
  pa_bin="$venv/bin/perf_analyzer.bin"
  if ! echo "$pa_sha256  $pa_bin" | sha256sum -c --status 2>/dev/null; then
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    "$py" -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: \
      --platform manylinux1_x86_64 "tritonclient==$pa_tritonclient_version" -d "$tmp"
    echo "$pa_wheel_sha256  $tmp/$pa_wheel" | sha256sum -c --quiet
    "$py" - "$tmp/$pa_wheel" "$pa_member" "$tmp/perf_analyzer" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as whl, whl.open(sys.argv[2]) as src, \
        open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
    echo "$pa_sha256  $tmp/perf_analyzer" | sha256sum -c --quiet
    chmod 755 "$tmp/perf_analyzer"
    mv -f "$tmp/perf_analyzer" "$pa_bin"
    changed=1
  fi

  # The wrapper finds libcudart.so.12 in the venv's nvidia-cuda-runtime-cu12.
  cudart_dir="$("$py" -c 'import os, sys; from importlib.metadata import distribution as d; \
print(os.path.relpath(d("nvidia-cuda-runtime-cu12").locate_file("nvidia/cuda_runtime/lib"), sys.prefix))')"
  wrapper="#!/usr/bin/env bash
# perf_analyzer from tritonclient $pa_tritonclient_version's wheel (written by scripts/triton-venv.sh).
venv=\"\$(dirname \"\$(dirname \"\$(readlink -f \"\$0\")\")\")\"
export LD_LIBRARY_PATH=\"\$venv/$cudart_dir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\"
exec -a \"\$0\" \"\$venv/bin/perf_analyzer.bin\" \"\$@\""
  if [ ! -x "$venv/bin/perf_analyzer" ] || [ "$(cat "$venv/bin/perf_analyzer")" != "$wrapper" ]; then
    printf '%s\n' "$wrapper" > "$venv/bin/perf_analyzer"
    chmod 755 "$venv/bin/perf_analyzer"
    changed=1
  fi
fi

if [ "$changed" -eq 0 ]; then
  echo "triton-venv: $venv has tritonclient $tritonclient_version, grpcio $grpcio_version," \
    "protobuf $protobuf_version, grpcio-health-checking $health_version" \
    "$([ "$with_perf_analyzer" -eq 0 ] || echo "and perf_analyzer from tritonclient $pa_tritonclient_version")"
  exit 0
fi
"$py" -c "import tritonclient.grpc, tritonclient.http, grpc, google.protobuf, grpc_health.v1.health_pb2, \
torch, numpy, onnxruntime; from importlib.metadata import version; \
print('triton-venv: tritonclient', version('tritonclient'), 'grpcio', grpc.__version__, \
'protobuf', google.protobuf.__version__, 'grpcio-health-checking', version('grpcio-health-checking'), \
'onnxruntime', onnxruntime.__version__, 'torch', torch.__version__, 'numpy', numpy.__version__)"
if [ "$with_perf_analyzer" -eq 1 ]; then
  pa_help="$("$venv/bin/perf_analyzer" --help 2>&1 || true)"
  if ! grep -q -- "--concurrency-range" <<<"$pa_help"; then
    printf '%s\n' "$pa_help" | head -5 >&2
    echo "triton-venv: $venv/bin/perf_analyzer does not run" >&2
    exit 1
  fi
  echo "triton-venv: perf_analyzer from tritonclient $pa_tritonclient_version," \
    "nvidia-cuda-runtime-cu12 $cudart_version"
fi
