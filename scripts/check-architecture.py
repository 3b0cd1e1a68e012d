#!/usr/bin/env python3
"""The shape of the code, checked: layering, function size and complexity, file length.

Run with: .venv-lint/bin/python scripts/check-architecture.py [--root DIR] [--self-test]
(scripts/lint-venv.sh makes .venv-lint with PyPI's lizard; ctest runs it as architecture_check).

1. Layers. Every folder of core/ and server/ is one layer, and an #include may only point to
   its own layer or one below (DESIGN.md, "Layout"):
       core/base < core/metrics < core/tensor < core/device < core/ops < core/model
       < core/backends < core/train < core/serve < server
   (core/metrics needs nothing but core/base; core/backends sits above core/model because a
   backend builds kernels for the model's nodes.)
2. Functions. No function in core/ or server/ is longer than 120 lines or has a cyclomatic
   complexity over 30, as lizard counts them.
3. Files. A file over 700 lines must be one concept that reads well whole: it is named in
   ONE_CONCEPT with the reason.

KNOWN_DEBT names what breaks rule 2 or 3 today and is yet to be split: each entry is printed
on every run, and the check fails when an entry no longer needs to be there (so the list only
shrinks) or when anything not on it breaks a rule.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

LAYERS = ["core/base", "core/metrics", "core/tensor", "core/device", "core/ops", "core/model",
          "core/backends", "core/train", "core/serve", "server"]
MAX_FUNCTION_LINES = 120
MAX_COMPLEXITY = 30
MAX_FILE_LINES = 700
SOURCES = (".h", ".cc", ".cu", ".cuh")

ONE_CONCEPT = {
    "core/serve/scheduler.cc": "the scheduler's core: queue, batch forming, routing and "
                               "answers share one lock and read as one state machine",
    "core/backends/cuda/nccl_all_reduce.cc": "one collective: communicator set-up, the "
                                             "bucketed all-reduce and its failure handling",
}

# Yet to be split (issue #37); "file:function" for rule 2, "file" for rule 3.
KNOWN_DEBT = {
}


def layer_of(path):
    for index in range(len(LAYERS) - 1, -1, -1):
        if path.startswith(LAYERS[index] + "/"):
            return index
    return None


def sources(root):
    for top in ("core", "server"):
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if name.endswith(SOURCES):
                    yield os.path.relpath(os.path.join(folder, name), root)


def layering_problems(root):
    problems = []
    include = re.compile(r'#include "((?:core|server)/[^"]+)"')
    for path in sources(root):
        own = layer_of(path)
        with open(os.path.join(root, path), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                match = include.match(line)
                target = layer_of(match.group(1)) if match else None
                if own is not None and target is not None and target > own:
                    problems.append(f"{path}:{number}: {LAYERS[own]} includes "
                                    f"{match.group(1)}, a higher layer ({LAYERS[target]})")
    return problems


def oversized_functions(root, lizard):
    """{"file:function": "why"} for every function over the limits."""
    found = {}
    out = subprocess.run(
        [lizard, "--csv", "-L", str(MAX_FUNCTION_LINES), "-C", str(MAX_COMPLEXITY),
         os.path.join(root, "core"), os.path.join(root, "server")],
        capture_output=True, text=True, check=False).stdout
    for row in out.splitlines():
        # NLOC,CCN,token,PARAM,length,location,file,function,long_name,start,end
        fields = next(iter(__import__("csv").reader([row])))
        if len(fields) < 8 or not fields[0].isdigit():
            continue
        complexity, length = int(fields[1]), int(fields[4])
        if length <= MAX_FUNCTION_LINES and complexity <= MAX_COMPLEXITY:
            continue
        path = os.path.relpath(fields[6], root)
        found[f"{path}:{fields[7]}"] = (f"{length} lines, complexity {complexity} (limits "
                                        f"{MAX_FUNCTION_LINES}, {MAX_COMPLEXITY})")
    return found


def long_files(root):
    found = {}
    for path in sources(root):
        with open(os.path.join(root, path), encoding="utf-8") as f:
            lines = sum(1 for _ in f)
        if lines > MAX_FILE_LINES and path not in ONE_CONCEPT:
            found[path] = f"{lines} lines (limit {MAX_FILE_LINES})"
    return found


def check(root, lizard, debt):
    problems = layering_problems(root)
    breaking = {**oversized_functions(root, lizard), **long_files(root)}
    for key, why in sorted(breaking.items()):
        if key in debt:
            print(f"known debt: {key}: {why} ({debt[key]})")
        else:
            problems.append(f"{key}: {why}")
    for key in sorted(set(debt) - set(breaking)):
        problems.append(f"{key}: in KNOWN_DEBT but within the limits now; remove the entry")
    return problems


def self_test(lizard):
    """Plants one of each problem in a small tree; each must be reported, nothing else."""
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "core", "tensor"))
        os.makedirs(os.path.join(root, "core", "serve"))
        os.makedirs(os.path.join(root, "server"))
        with open(os.path.join(root, "core", "tensor", "up.h"), "w") as f:
            f.write('#include "core/serve/x.h"\n#include "core/base/log.h"\n')
        branches = "".join(f"  if (x == {i}) return {i};\n" for i in range(40))
        with open(os.path.join(root, "core", "serve", "x.cc"), "w") as f:
            f.write("int Branchy(int x) {\n" + branches + "  return 0;\n}\n")
        body = "".join(f"  int v{i} = {i};\n" for i in range(130))
        with open(os.path.join(root, "server", "long.cc"), "w") as f:
            f.write("void Long() {\n" + body + "}\n" + "// filler\n" * 600)
        with open(os.path.join(root, "server", "fine.cc"), "w") as f:
            f.write('#include "core/serve/x.h"\nint Fine() { return 1; }\n')
        problems = check(root, lizard, {"server/gone.cc": "planted stale entry"})
    expected = ["core/tensor/up.h:1: core/tensor includes core/serve/x.h",
                "core/serve/x.cc:Branchy:", "server/long.cc:Long:", "server/long.cc: 7",
                "server/gone.cc: in KNOWN_DEBT"]
    for text in expected:
        if not any(p.startswith(text) for p in problems):
            sys.exit(f"self-test: '{text}' was not reported; got {problems}")
    if len(problems) != len(expected):
        sys.exit(f"self-test: expected {len(expected)} problems, got {problems}")
    print(f"check-architecture self-test: the {len(expected)} planted problems, nothing else")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--root", default=os.path.dirname(here))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    lizard = shutil.which("lizard", path=os.path.dirname(sys.executable)) or shutil.which(
        "lizard")
    if lizard is None:
        sys.exit("check-architecture: no lizard; run scripts/lint-venv.sh and use "
                 ".venv-lint/bin/python")
    if args.self_test:
        self_test(lizard)
        return
    problems = check(args.root, lizard, KNOWN_DEBT)
    for problem in problems:
        print(problem)
    print(f"check-architecture: {len(problems)} problem(s)")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
