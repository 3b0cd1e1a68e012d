#!/usr/bin/env bash
# Creates .venv-client: Debian's /usr/bin/python3 with its system site-packages (numpy,
# python3-torch and python3-torchvision from scripts/install-deps.sh), the Python client
# (pip install ./client/python, with grpcio from PyPI) and pytest, for tests/client/python
# and benchmarks/fit_bench.py. Reinstalls the client each run (a quick, offline step once
# grpcio is there), so the venv always holds the checkout's client.
# Usage: bash scripts/client-venv.sh    then: .venv-client/bin/python -m pytest tests/client/python
set -euo pipefail
cd "$(dirname "$0")/.."

venv=".venv-client"
grpcio_version="1.85.3"  # the version .venv-triton pins; it accepts Debian's protobuf 3.21
pytest_version="8.3.4"
tqdm_version="4.67.1"
# ml_dtypes: numpy's bfloat16, which the client returns bfloat16 outputs as when it is there
# (tests/client/python cover both: with it, and without it by hiding it).
ml_dtypes_version="0.5.4"

if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
if ! "$venv/bin/python" -c "
import grpc, pytest, tqdm, ml_dtypes, sys
sys.exit(grpc.__version__ != '$grpcio_version' or pytest.__version__ != '$pytest_version'
         or ml_dtypes.__version__ != '$ml_dtypes_version')" \
    2>/dev/null; then
  # "numpy<2" keeps the system numpy that Debian's torch was built against.
  "$venv/bin/python" -m pip install --disable-pip-version-check -q \
    "grpcio==$grpcio_version" "pytest==$pytest_version" "tqdm==$tqdm_version" \
    "ml_dtypes==$ml_dtypes_version" "numpy<2"
fi
"$venv/bin/python" -m pip install --disable-pip-version-check -q --no-deps --no-build-isolation \
  --force-reinstall ./client/python
"$venv/bin/python" -c "import replicad, grpc, google.protobuf, numpy; \
print('client-venv: replicad', replicad.__version__, 'grpcio', grpc.__version__, \
'protobuf', google.protobuf.__version__, 'numpy', numpy.__version__)"
