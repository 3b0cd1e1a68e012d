#!/usr/bin/env bash
# Installs every Debian package that building, testing and running replicad needs.
# Idempotent: packages already present are left as they are. Needs root (or sudo).
# Only Debian's package registry is contacted; nothing is downloaded at build time.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  # gRPC and Protobuf for the service and the client.
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libabsl-dev
  # zlib: replicactl reads the gzipped IDX files of (Fashion-)MNIST.
  zlib1g-dev
  # oneDNN; its CMake config needs the OpenCL ICD loader.
  libdnnl-dev ocl-icd-opencl-dev
  # ONNX import/export (checker, shape inference) and the backend conformance data.
  libonnx-dev libonnx-testdata
  # Boost.Asio/Beast for the metrics endpoint; CLI and logging.
  libboost-dev libcli11-dev libspdlog-dev nlohmann-json3-dev
  # Tests and benchmarks.
  libgtest-dev libgmock-dev libbenchmark-dev
  # promtool checks our Prometheus exposition; numpy and onnx write test fixtures.
  prometheus python3-numpy python3-onnx
  # PyTorch and torchvision: reference outputs of tests/parity (models built with weights=None).
  python3-torch python3-torchvision
  # venv for scripts/bench-venv.sh (ONNX Runtime from PyPI next to Debian's PyTorch).
  python3-venv
  # libb64.so.0d for perf_analyzer in scripts/triton-venv.sh (Triton's load generator).
  libb64-0d
  # Fashion-MNIST: the images the main job predicts (scripts/demo.sh).
  dataset-fashion-mnist
  # TLS for the HTTP listeners and token digests (OpenSSL); the TLS tests make
  # certificates with openssl and speak HTTPS with curl; the format check.
  libssl-dev openssl curl clang-format
  # Fuzzing (scripts/fuzz.sh): clang, its libFuzzer and sanitizer runtimes
  # (libclang-rt-14-dev is only recommended by clang), LLVM's OpenMP for clang.
  clang libclang-rt-14-dev libomp-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
