"""Validates custom resources against the CRD schemas kept in deploy/schemas/, offline.

Usage: .venv-deploy/bin/python deploy/checks/validate_crds.py [--builtin-out FILE] YAML...

Every object of every YAML stream given is sorted by its apiVersion:
- a built-in kind (the core group "v1", a group without a dot such as apps or policy, or a
  *.k8s.io group) is left to kubernetes-validate: with --builtin-out the built-in objects are
  written there as one YAML stream for it;
- any other kind must have a schema, deploy/schemas/<group>_<version>_<kind>.json, and is
  validated against it; an object of a kind without a schema is an error (add its CRD's
  schema with deploy/schemas/generate.py rather than let it pass unchecked).

The schemas are the CRDs' openAPIV3Schema. They are read with the meaning the API server
gives them under strict field validation (kubectl apply --validate=strict): a field the
schema does not declare is an error unless the object is marked
x-kubernetes-preserve-unknown-fields, an embedded resource (x-kubernetes-embedded-resource)
may carry apiVersion, kind and metadata, and `nullable` admits null, and RE2's inline (?i) flag is moved where Python's re takes it. metadata is checked
as ObjectMeta's name, labels and annotations. Exits 1 naming each object and each error.
"""
import argparse
import copy
import json
import pathlib
import sys

import jsonschema
import yaml

SCHEMAS = pathlib.Path(__file__).resolve().parent.parent / "schemas"

OBJECT_META = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
                 "maxLength": 253},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
EMBEDDED = {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"type": "object"}}


def is_builtin(api_version):
    group = api_version.rpartition("/")[0]
    return group == "" or "." not in group or group.endswith(".k8s.io")


def strict(node):
    """The schema with Kubernetes' structural-schema meaning made explicit."""
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: strict(value) if key != "properties" else value for key, value in node.items()}
    if "properties" in node:
        out["properties"] = {name: strict(sub) for name, sub in node["properties"].items()}
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = strict(node["additionalProperties"])
    if node.get("x-kubernetes-embedded-resource"):
        out.setdefault("properties", {})
        for name, sub in EMBEDDED.items():
            out["properties"].setdefault(name, sub)
    if ("properties" in out and "additionalProperties" not in out
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    pattern = node.get("pattern")
    if isinstance(pattern, str) and "(?i)" in pattern and not pattern.startswith("(?i)"):
        # Go's RE2 takes a flag anywhere (prometheus-operator writes ^(?i)...); Python only
        # at the start, where it means the same for these whole-string patterns.
        out["pattern"] = "(?i)" + pattern.replace("(?i)", "")
    if node.get("nullable") and isinstance(node.get("type"), str):
        out["type"] = [node["type"], "null"]
    return out


def load_schema(path, cache={}):
    if path not in cache:
        raw = json.loads(path.read_text())
        schema = strict(raw)
        schema.setdefault("properties", {})["metadata"] = OBJECT_META
        schema["required"] = sorted(set(schema.get("required", [])) | {"metadata"})
        jsonschema.Draft202012Validator.check_schema(schema)
        cache[path] = jsonschema.Draft202012Validator(schema)
    return cache[path]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--builtin-out", type=pathlib.Path)
    parser.add_argument("files", nargs="+", type=pathlib.Path)
    args = parser.parse_args()

    # Every kept schema must be a valid JSON Schema, used today or not (MPIJob is for later).
    schemas = sorted(SCHEMAS.glob("*.json"))
    for schema in schemas:
        load_schema(schema)
    print(f"validate_crds: {len(schemas)} schemas in deploy/schemas load: "
          + ", ".join(s.stem.rpartition("_")[2] for s in schemas))

    builtin, counts, failures = [], {}, 0
    for path in args.files:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None:
                continue
            api_version, kind = doc.get("apiVersion", ""), doc.get("kind", "")
            name = (doc.get("metadata") or {}).get("name", "?")
            where = f"{path}: {kind}/{name} ({api_version})"
            if not api_version or not kind:
                print(f"FAIL {where}: no apiVersion or kind")
                failures += 1
                continue
            if is_builtin(api_version):
                builtin.append(doc)
                continue
            group, _, version = api_version.rpartition("/")
            schema = SCHEMAS / f"{group}_{version}_{kind}.json"
            if not schema.exists():
                print(f"FAIL {where}: no schema {schema.name} in deploy/schemas "
                      f"(add the CRD's schema with deploy/schemas/generate.py)")
                failures += 1
                continue
            errors = sorted(load_schema(schema).iter_errors(doc), key=lambda e: list(e.path))
            for error in errors:
                field = ".".join(str(p) for p in error.path) or "(object)"
                print(f"FAIL {where}: {field}: {error.message[:300]}")
            failures += bool(errors)
            if not errors:
                counts[kind] = counts.get(kind, 0) + 1
                print(f"ok   {where} against {schema.name}")

    if args.builtin_out:
        args.builtin_out.write_text(yaml.safe_dump_all(builtin, sort_keys=False))
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none"
    print(f"validate_crds: {sum(counts.values())} custom resources valid ({summary}); "
          f"{len(builtin)} built-in objects passed on; {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
