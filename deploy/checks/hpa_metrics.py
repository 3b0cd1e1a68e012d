"""Checks that the HorizontalPodAutoscaler's metrics exist end to end, offline.

Usage: .venv-deploy/bin/python deploy/checks/hpa_metrics.py RENDERED.yaml ADAPTER_VALUES.yaml

Every Pods metric of every HorizontalPodAutoscaler in RENDERED must be the `as:` name of a
prometheus-adapter rule in ADAPTER_VALUES, and every series a rule queries must be one that
replicad exports (its name, less a histogram's _sum/_count/_bucket, registered in server/ or
core/). Catches a renamed metric on either side, which no schema sees.
"""
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


def exported_names():
    names = set()
    for path in list(ROOT.glob("server/**/*.cc")) + list(ROOT.glob("core/**/*.cc")):
        names.update(re.findall(r'"(replicad_[a-z0-9_]+)"', path.read_text(errors="replace")))
    return names


def main(rendered, values):
    rules = yaml.safe_load(pathlib.Path(values).read_text())["rules"]["custom"]
    provided, failures = {}, 0
    exported = exported_names()
    for rule in rules:
        series = re.match(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", rule["seriesQuery"]).group(1)
        base = re.sub(r"_(sum|count|bucket)$", "", series)
        if series not in exported and base not in exported:
            print(f"FAIL adapter rule {rule['name']['as']}: replicad exports no {series}")
            failures += 1
        provided[rule["name"]["as"]] = series
    checked = 0
    for doc in yaml.safe_load_all(pathlib.Path(rendered).read_text()):
        if not doc or doc.get("kind") != "HorizontalPodAutoscaler":
            continue
        for metric in doc["spec"].get("metrics", []):
            if metric["type"] != "Pods":
                continue
            name = metric["pods"]["metric"]["name"]
            checked += 1
            if name in provided:
                print(f"ok   HPA {doc['metadata']['name']}: {name} <- {provided[name]}")
            else:
                print(f"FAIL HPA {doc['metadata']['name']}: no prometheus-adapter rule makes {name}")
                failures += 1
    print(f"hpa_metrics: {checked} HPA pod metrics, {len(rules)} adapter rules checked against "
          f"{len(exported)} exported replicad metric names; {failures} failed")
    return 1 if failures or not checked else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
