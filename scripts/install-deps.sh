#!/usr/bin/env bash
# Installs every Debian package that building, testing and running replicad needs.
# Idempotent: packages already present are left as they are. Needs root (or sudo).
# Only Debian's package registry is contacted; nothing is downloaded at build time.
#
# Usage: bash scripts/install-deps.sh [--build-only] [--print]
#   --build-only  only what compiling replicad and replicactl needs (configured with
#                 -DREPLICAD_BUILD_TESTS=OFF -DREPLICAD_BUILD_BENCHMARKS=OFF): the container
#                 images' builder stages (deploy/docker/) use it. No test, benchmark, fuzzing,
#                 formatting or deployment tools, no reference data.
#   --print       print the chosen package names, one a line, and install nothing
#                 (deploy/checks/docker.sh checks them against apt-cache).
set -euo pipefail

build_only=0
print_only=0
for arg in "$@"; do
  case "$arg" in
    --build-only) build_only=1 ;;
    --print) print_only=1 ;;
    *) echo "usage: bash scripts/install-deps.sh [--build-only] [--print]" >&2; exit 2 ;;
  esac
done

# What the build needs (CMakeLists.txt's find_package calls, tests and benchmarks off).
build_packages=(
  # pkg-config: CMake's FindOpenSSL consults it.
  build-essential cmake ninja-build pkg-config
  # gRPC and Protobuf for the service and the client.
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libabsl-dev
  # zlib: replicactl reads the gzipped IDX files of (Fashion-)MNIST.
  zlib1g-dev
  # oneDNN; its CMake config needs the OpenCL ICD loader.
  libdnnl-dev ocl-icd-opencl-dev
  # ONNX import/export (checker, shape inference).
  libonnx-dev
  # Boost.Asio/Beast for the metrics endpoint; CLI and logging; JSON for the HTTP API.
  libboost-dev libcli11-dev libspdlog-dev nlohmann-json3-dev
  # TLS for the HTTP listeners and token digests (OpenSSL).
  libssl-dev
  # Training across ranks under mpirun/srun (Open MPI; REPLICAD_WITH_MPI), and mpirun itself.
  libopenmpi-dev openmpi-bin
)
# Everything else: testing, benchmarking, fuzzing, formatting, the demo and deploy checks.
dev_packages=(
  # git: working in the repository.
  git
  # The ONNX backend conformance data.
  libonnx-testdata
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
  # The TLS tests make certificates with openssl and speak HTTPS with curl; the format check;
  # shellcheck for deploy/slurm (deploy/checks/slurm.sh).
  openssl curl clang-format shellcheck
  # A one-node SLURM cluster for the srun test of training across ranks (scripts/slurm-local.sh).
  slurm-wlm munge
  # Fuzzing (scripts/fuzz.sh): clang, its libFuzzer and sanitizer runtimes
  # (libclang-rt-14-dev is only recommended by clang), LLVM's OpenMP for clang.
  clang libclang-rt-14-dev libomp-dev
)

packages=("${build_packages[@]}")
if [ "$build_only" -eq 0 ]; then
  packages+=("${dev_packages[@]}")
  # deploy/check.sh renders deploy/kubernetes's overlays with `kubectl kustomize`. A kubectl
  # from elsewhere (e.g. the Google Cloud SDK's package, which owns /usr/bin/kubectl) is used
  # as it is; otherwise Debian's kubernetes-client (kubectl 1.20) provides one.
  command -v kubectl >/dev/null || packages+=(kubernetes-client)
fi

if [ "$print_only" -eq 1 ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

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
