#!/usr/bin/env python3
"""int8 models against ONNX Runtime on the same files (issue #39): speed, side by side.

Run with (after scripts/build.sh and scripts/triton-venv.sh):
    .venv-triton/bin/python benchmarks/int8_bench.py [--models resnet18,mobilenet_v2]
        [--variants qdq,qop,float] [--batch 8] [--threads 2] [--rounds 3] [--output FILE.md]

The models are torchvision's (seeded weights) exported by tests/parity/export_torch_models.py
and quantized by tests/parity/quantize_models.py (onnxruntime.quantization.quantize_static, QDQ
form, and QOperator, ONNX Runtime's defaults otherwise) into BUILD/bench_models/NAME_qdq and
NAME_qop. For each file, replicad
in-process (build/benchmarks/model_forward_bench: ReplicaSet::Predict on one CPU slot of
--threads threads) and ONNX Runtime 1.31.1 (CPU provider, intra_op_num_threads --threads,
default graph optimizations, which fuse the QDQ form into its int8 kernels) take turns --rounds
times, each keeping its fastest round's median (this machine's timings move by up to 2x between
runs); the table gives both and replicad / ONNX Runtime (below 1.0: replicad faster). The float
file of the same model runs too (variant "float"), so that the int8 speed-up of each engine is
in the same run. Accuracy against ONNX Runtime is tests/server/triton_int8_test.py's.
"""

import argparse
import datetime
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from bench_report import git_commit, machine_line  # noqa: E402
from compare_peers import run_bench, time_onnxruntime  # noqa: E402


def prepare(models, models_dir):
    """Exports and quantizes what is missing (both scripts cache their work)."""
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tests", "parity",
                                                     "export_torch_models.py"),
                    models_dir, "--models", ",".join(models)], check=True)
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "parity", "quantize_models.py"),
                    models_dir, models_dir, "--models", ",".join(models)], check=True)


def model_path(models_dir, name, variant):
    folder = name if variant == "float" else f"{name}_{variant}"
    return os.path.join(models_dir, folder, "model.onnx")


def replicad_ms(bench, path, batch, threads):
    result, error = run_bench(bench, ["--model", path, "--batch", str(batch), "--threads",
                                      str(threads), "--slots", "1", "--iterations", "10",
                                      "--warmup", "2"])
    if error:
        raise RuntimeError(error)
    return result["predict"]["median_ms"]


def onnxruntime_ms(path, batch, threads):
    import onnxruntime as ort
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {}
    rng = np.random.default_rng(0)
    for spec in session.get_inputs():
        shape = [batch] + [int(d) for d in spec.shape[1:]]
        if spec.type == "tensor(int64)":  # Token ids (below every vocabulary) and a mask.
            feeds[spec.name] = rng.integers(0, 100, shape, dtype=np.int64)
        else:
            feeds[spec.name] = rng.standard_normal(shape).astype(np.float32)
    return time_onnxruntime(path, feeds, threads, 2, 10)["median_ms"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2")
    parser.add_argument("--variants", default="qdq,qop,float")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--output")
    args = parser.parse_args()
    models = args.models.split(",")
    models_dir = os.path.join(args.build, "bench_models")
    prepare(models, models_dir)
    bench = os.path.join(args.build, "benchmarks", "model_forward_bench")
    lines = [f"int8 models, batch {args.batch}, one slot of {args.threads} threads, fastest of "
             f"{args.rounds} rounds' medians; {machine_line()}; commit {git_commit()}; "
             f"{datetime.date.today()}",
             "",
             "| model | file | replicad ms | ONNX Runtime ms | replicad / ORT |",
             "| --- | --- | ---: | ---: | ---: |"]
    for name in models:
        for variant in args.variants.split(","):
            path = model_path(models_dir, name, variant)
            ours, theirs = float("inf"), float("inf")
            for _ in range(args.rounds):
                ours = min(ours, replicad_ms(bench, path, args.batch, args.threads))
                theirs = min(theirs, onnxruntime_ms(path, args.batch, args.threads))
            lines.append(f"| {name} | {variant} | {ours:.1f} | {theirs:.1f} | "
                         f"{ours / theirs:.2f} |")
            print(lines[-1], flush=True)
    report = "\n".join(lines) + "\n"
    print(report)
    if args.output:
        with open(args.output, "w") as f:
            f.write(report)


if __name__ == "__main__":
    main()
