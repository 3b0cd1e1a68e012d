#!/usr/bin/env bash
# The test command: installs dependencies, builds everything, runs every test.
# Tests labelled `gpu` skip themselves on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# Triton's clients (tritonclient, grpc health, perf_analyzer) for the protocol tests.
bash scripts/triton-venv.sh
# The Python client (client/python) with pytest, for tests/client/python.
bash scripts/client-venv.sh
# PyPI lizard, for the function-size check (scripts/check-architecture.py, a ctest test).
bash scripts/lint-venv.sh
bash scripts/check-format.sh  # every C++/CUDA source follows .clang-format
bash scripts/build.sh
cd "${REPLICAD_BUILD_DIR:-build}"
ctest --output-on-failure -j "${REPLICAD_JOBS:-$(nproc)}"
cd - >/dev/null
# Dockerfiles, Kubernetes overlays, Prometheus rules and config, the Grafana dashboard.
REPLICAD_BIN_DIR="${REPLICAD_BUILD_DIR:-build}/bin" bash deploy/check.sh
bash scripts/fuzz.sh  # libFuzzer targets (fuzz/), FUZZ_SECONDS (20) each
bash scripts/sanitize.sh  # every test under ASan+UBSan (build-asan/) and TSan (build-tsan/)
