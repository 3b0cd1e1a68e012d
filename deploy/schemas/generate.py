"""Regenerates the JSON schemas in deploy/schemas/ from CustomResourceDefinition files.

Usage (see README.md here for the sources and the commits they were taken from):
  .venv-deploy/bin/python deploy/schemas/generate.py CRD.yaml[:VERSION] ...

For each CRD it writes <group>_<version>_<kind>.json: the version's openAPIV3Schema with the
`description` texts and the `status` subtree left out (they hold no constraint on what we
write, and make up most of the bytes). Everything else, the `x-kubernetes-*` extensions
included, is kept as the CRD has it; deploy/checks/validate_crds.py applies their meaning.
A subschema of 400 bytes or more that occurs twice or more (the container schema appears
dozens of times in an InferenceService) is written once under `$defs` and referred to with
`$ref`, which cuts the InferenceService schema from 1.5 MB to about 130 kB.
"""
import hashlib
import json
import pathlib
import sys

import yaml


def strip(node):
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            # A property that is itself named "description" stays; only the texts go.
            if key == "description" and isinstance(value, str):
                continue
            out[key] = strip(value)
        return out
    if isinstance(node, list):
        return [strip(item) for item in node]
    return node


def canon(node):
    return json.dumps(node, sort_keys=True, separators=(",", ":"))


def subschemas(schema):
    """The schemas directly inside `schema` (not the maps of property names)."""
    for name in ("items", "additionalProperties", "not"):
        if isinstance(schema.get(name), dict):
            yield schema[name]
    for name in ("allOf", "anyOf", "oneOf"):
        yield from schema.get(name, [])
    yield from schema.get("properties", {}).values()


def share(root, min_bytes=400):
    counts = {}

    def count(schema):
        text = canon(schema)
        if len(text) >= min_bytes:
            counts[text] = counts.get(text, 0) + 1
        for sub in subschemas(schema):
            count(sub)

    count(root)
    names = {text: "s" + hashlib.sha256(text.encode()).hexdigest()[:12]
             for text, n in counts.items() if n >= 2}
    defs = {}

    def rewrite(schema, is_def_root=False):
        text = canon(schema)
        if not is_def_root and text in names:
            name = names[text]
            if name not in defs:
                defs[name] = None
                defs[name] = rewrite(schema, True)
            return {"$ref": "#/$defs/" + name}
        out = dict(schema)
        for key in ("items", "additionalProperties", "not"):
            if isinstance(out.get(key), dict):
                out[key] = rewrite(out[key])
        for key in ("allOf", "anyOf", "oneOf"):
            if key in out:
                out[key] = [rewrite(sub) for sub in out[key]]
        if "properties" in out:
            out["properties"] = {k: rewrite(v) for k, v in out["properties"].items()}
        return out

    result = rewrite(root, True)
    if defs:
        result["$defs"] = defs
    return result


def main(argv):
    here = pathlib.Path(__file__).resolve().parent
    for arg in argv:
        path, _, wanted = arg.partition(":")
        crd = yaml.safe_load(pathlib.Path(path).read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if wanted and version["name"] != wanted:
                continue
            if not wanted and not version.get("storage"):
                continue
            schema = strip(version["schema"]["openAPIV3Schema"])
            schema.get("properties", {}).pop("status", None)
            schema = share(schema)
            name = f"{group}_{version['name']}_{kind}.json"
            (here / name).write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
            print(f"{name}: from {path} ({version['name']})")


if __name__ == "__main__":
    main(sys.argv[1:])
