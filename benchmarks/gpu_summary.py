"""The GPU figures as one JSON document (issue #41): benchmarks/results/gpu-latest.json.

compare_gpu.py fills it from its measurements; scripts/gpu-check.sh copies it into $OUT so
that a lent GPU machine's run comes back with it. The shape, one entry per measured case:

    {"date": "YYYY-MM-DD", "gpu": "NVIDIA H200", "commit": "...",
     "train_step": {"tf32_on": {"pytorch_ms": .., "replicad_ms": .., "ratio": ..},
                    "tf32_off": {...}, "fp16": {...}},
     "predict": {"tf32_on": {...}, "tf32_off": {...}, "batch1_graphs": {...},
                 "fp16": {...}, "bf16": {...}, "int8": {...}},
     "batching_gain": ..}

A case not measured (or whose replicad run failed) is null, never a made-up number; "ratio"
is replicad_ms / pytorch_ms (below 1: replicad faster). Each case may say what it compared
("replicad_case", "pytorch_case").
"""

import json
import os


def case(pytorch_ms, replicad_ms, **described):
    """One measured case, or None where either side has no figure."""
    if pytorch_ms is None or replicad_ms is None:
        return None
    if pytorch_ms <= 0 or replicad_ms <= 0:
        raise ValueError(f"times must be positive: pytorch {pytorch_ms}, replicad {replicad_ms}")
    entry = {"pytorch_ms": round(pytorch_ms, 3), "replicad_ms": round(replicad_ms, 3),
             "ratio": round(replicad_ms / pytorch_ms, 4)}
    entry.update(described)
    return entry


def summary(date, gpu, commit, train_step, predict, batch1_graphs=None, batching_gain=None,
            reduced_precision=None, train_fp16=None, int8=None):
    """`train_step` and `predict`: {True: case or None, False: ...} by TF32 on/off;
    `reduced_precision`: {"fp16": case or None, "bf16": ...} (issue #39's --precision);
    `train_fp16`: an fp16 training step against PyTorch's AMP (issue #39), or None;
    `int8`: an int8 model's Predict against PyTorch's float32 (issue #39), or None."""
    reduced_precision = reduced_precision or {}
    for name, cases in (("train_step", train_step), ("predict", predict)):
        if set(cases) != {True, False}:
            raise ValueError(f"{name}: expected cases for TF32 on and off, received {sorted(cases)}")
    return {
        "date": date,
        "gpu": gpu,
        "commit": commit,
        "train_step": {"tf32_on": train_step[True], "tf32_off": train_step[False],
                       "fp16": train_fp16},
        "predict": {"tf32_on": predict[True], "tf32_off": predict[False],
                    "batch1_graphs": batch1_graphs, "fp16": reduced_precision.get("fp16"),
                    "bf16": reduced_precision.get("bf16"), "int8": int8},
        "batching_gain": batching_gain,
    }


def write(document, path):
    """Writes `document` to `path` (its directory made), indented, with a final newline."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(document, f, indent=2, sort_keys=False)
        f.write("\n")
