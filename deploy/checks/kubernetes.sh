#!/usr/bin/env bash
# Checks deploy/kubernetes offline (no cluster), run by deploy/check.sh after deploy/tools.sh:
# 1. yamllint (the repository's .yamllint) over every file under deploy/kubernetes;
# 2. renders every kustomization with kubectl kustomize (overlays cpu, gpu, gpu-tls, the
#    KServe runtimes and the MPIJob of multi-node training) into build/deploy/kubernetes/;
# 3. validates the built-in objects (Deployment, StatefulSet, Service, ...) with
#    kubernetes-validate --strict against Kubernetes 1.27 (the oldest release whose gRPC
#    probes are GA) and 1.37 (the newest schemas the wheel ships);
# 4. validates the custom resources (PodMonitor, ClusterServingRuntime, InferenceService,
#    MPIJob; any ServiceMonitor or PrometheusRule added later) against the CRD schemas in
#    deploy/schemas/ with deploy/checks/validate_crds.py, which fails on a kind without one;
# 5. checks that the autoscaler's metrics come from a prometheus-adapter rule over a metric
#    replicad exports (deploy/checks/hpa_metrics.py).
# Also covered: the example files kept out of the renderings (kserve/inferenceservice.yaml,
# overlays/gpu-tls/example-secrets.yaml). Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/../.."

venv=.venv-deploy
kube=deploy/kubernetes
out=build/deploy/kubernetes
rm -rf "$out"
mkdir -p "$out"

echo "-- yamllint $kube"
"$venv/bin/yamllint" --strict "$kube"
echo "yamllint: $(find "$kube" -name '*.yaml' | wc -l) files clean"

echo "-- kubectl kustomize ($(kubectl version --client 2>/dev/null | grep -i kustomize || true))"
renders=()
for dir in "$kube"/overlays/*/ "$kube"/kserve/ "$kube"/mpijob/; do
  dir="${dir%/}"
  name="$(basename "$dir")"
  # kustomize v5 warns on the v2-era fields kept for old kubectl (bases, patchesJson6902,
  # patchesStrategicMerge); the warnings go to stderr and are dropped here, errors are not.
  if ! kubectl kustomize "$dir" >"$out/$name.yaml" 2>"$out/$name.stderr"; then
    grep -v '^# Warning: ' "$out/$name.stderr" >&2
    echo "FAIL: kubectl kustomize $dir" >&2
    exit 1
  fi
  echo "rendered $dir: $(grep -c '^kind: ' "$out/$name.yaml") objects ->" \
    "$(grep '^kind: ' "$out/$name.yaml" | sort | uniq -c | awk '{printf "%s%s %s", s, $1, $3; s=", "}')"
  renders+=("$out/$name.yaml")
done
examples=("$kube/kserve/inferenceservice.yaml" "$kube/overlays/gpu-tls/example-secrets.yaml")

echo "-- custom resources against deploy/schemas"
"$venv/bin/python" deploy/checks/validate_crds.py --builtin-out "$out/builtin.yaml" \
  "${renders[@]}" "${examples[@]}"

echo "-- built-in objects with kubernetes-validate --strict"
for version in 1.27.0 1.37.0; do
  "$venv/bin/kubernetes-validate" --kubernetes-version "$version" --strict --quiet \
    "$out/builtin.yaml"
  echo "kubernetes-validate $version: $(grep -c '^kind: ' "$out/builtin.yaml") objects valid"
done

echo "-- autoscaler metrics"
"$venv/bin/python" deploy/checks/hpa_metrics.py "$out/cpu.yaml" \
  "$kube/prometheus-adapter/values.yaml"

echo "kubernetes: every check passed"
