#!/usr/bin/env bash
# Checks every deployment file offline (no Docker engine, no cluster): the Dockerfiles
# (hadolint), the Kubernetes overlays (rendered with kubectl kustomize, validated against
# Kubernetes' schemas and the CRDs' schemas in deploy/schemas), the Prometheus config, rules
# and rule tests (promtool), the Grafana dashboard and every YAML file (yamllint).
# Run by scripts/test.sh; needs scripts/install-deps.sh, and installs its own tools
# (deploy/tools.sh). Exits non-zero on the first failing check.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/tools.sh
echo "== deploy check: yamllint (.yamllint) over deploy/"
.venv-deploy/bin/yamllint --strict deploy
for check in deploy/checks/*.sh; do
  echo "== deploy check: $check"
  bash "$check"
done
echo "deploy/check.sh: every check passed"
