#!/usr/bin/env bash
# Creates .venv-lint: Debian's /usr/bin/python3 with PyPI's lizard, which
# scripts/check-architecture.py runs for the length and cyclomatic complexity of
# every C++ function in core/ and server/. Idempotent.
# Usage: bash scripts/lint-venv.sh    then: .venv-lint/bin/python scripts/check-architecture.py
set -euo pipefail
cd "$(dirname "$0")/.."

venv=".venv-lint"
lizard_version="1.17.31"

if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv "$venv"
fi
if "$venv/bin/python" -c "import importlib.metadata as m, sys; \
sys.exit(m.version('lizard') != '$lizard_version')" 2>/dev/null; then
  echo "lint-venv: $venv has lizard $lizard_version"
  exit 0
fi
"$venv/bin/python" -m pip install --disable-pip-version-check -q "lizard==$lizard_version"
echo "lint-venv: lizard $lizard_version in $venv"
