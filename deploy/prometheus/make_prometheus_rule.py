#!/usr/bin/env python3
"""Writes operator/prometheusrule.yaml: the rules of rules/replicad.rules.yml as a Prometheus
Operator PrometheusRule (monitoring.coreos.com/v1), for clusters where the operator loads rules.

  /usr/bin/python3 deploy/prometheus/make_prometheus_rule.py          # (re)write it
  /usr/bin/python3 deploy/prometheus/make_prometheus_rule.py --check  # fail if it is stale

The rule file's text is copied under spec: (its `groups:` is the PrometheusRule's), so the
comments travel too and a diff of the two reads line for line. --check also parses both and
compares the groups, so the object carries exactly the rules promtool tested. Needs PyYAML
(Debian's python3-yaml, or .venv-deploy/bin/python).
"""

import argparse
import difflib
import os
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
RULES = os.path.join(HERE, "rules", "replicad.rules.yml")
OUTPUT = os.path.join(HERE, "operator", "prometheusrule.yaml")

HEADER = """\
# Generated from deploy/prometheus/rules/replicad.rules.yml by
# deploy/prometheus/make_prometheus_rule.py: edit the rule file and run the script (the deploy
# check fails when this file is stale).
#
# The Prometheus Operator loads a PrometheusRule whose labels match its Prometheus' ruleSelector
# (and whose namespace its ruleNamespaceSelector): kube-prometheus-stack selects
# release: <its Helm release name> by default, so add that label here or in a kustomize
# overlay. The alerts' ReplicadTargetDown expects the scrape job "replicad", which a
# ServiceMonitor or PodMonitor named after the replicad Service gives.
---
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: replicad
  labels:
    app.kubernetes.io/name: replicad
    app.kubernetes.io/component: monitoring
spec:
"""


def render():
    with open(RULES, encoding="utf-8") as f:
        lines = f.read().splitlines()
    # Drop the rule file's opening comment (it describes the file, not the object).
    start = next(i for i, line in enumerate(lines) if line.startswith("groups:"))
    body = ["  " + line if line.strip() else "" for line in lines[start:]]
    return HEADER + "\n".join(body) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the committed file differs from what this writes")
    args = parser.parse_args()
    text = render()

    with open(RULES, encoding="utf-8") as f:
        groups = yaml.safe_load(f)["groups"]
    made = yaml.safe_load(text)
    if made["spec"]["groups"] != groups:
        sys.exit("make_prometheus_rule: the rendered object's groups differ from the rule file's")

    if args.check:
        try:
            with open(OUTPUT, encoding="utf-8") as f:
                current = f.read()
        except FileNotFoundError:
            current = ""
        if current != text:
            sys.stdout.writelines(difflib.unified_diff(
                current.splitlines(True), text.splitlines(True),
                os.path.relpath(OUTPUT), "regenerated"))
            sys.exit(f"{os.path.relpath(OUTPUT)} is stale: run "
                     "/usr/bin/python3 deploy/prometheus/make_prometheus_rule.py")
        print(f"{os.path.relpath(OUTPUT)} is up to date ({len(groups)} groups, "
              f"{sum(len(g['rules']) for g in groups)} rules)")
        return
    os.makedirs(os.path.dirname(OUTPUT), exist_ok=True)
    with open(OUTPUT, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(OUTPUT)}")


if __name__ == "__main__":
    main()
