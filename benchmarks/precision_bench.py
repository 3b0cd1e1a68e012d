#!/usr/bin/env python3
"""`--precision bf16` against float32 on CPU slots (issue #39): speed and agreement.

Run with (after scripts/build.sh and scripts/triton-venv.sh):
    .venv-triton/bin/python benchmarks/precision_bench.py [--models resnet50,mobilenet_v2,bert_encoder]
        [--batch 8] [--threads 2] [--rounds 3] [--samples 1000] [--output FILE.md]

For each model (exported by benchmarks/calibrated_models.py into BUILD/calibrated_models: weights
seeded, not trained, BatchNorm statistics recomputed on seeded images as after training, so that
inputs win different classes; --seeded-statistics exports tests/parity/export_torch_models.py's
models instead, into BUILD/bench_models):
  - speed: build/benchmarks/model_forward_bench in-process (ReplicaSet::Predict, one slot of
    --threads threads) at --batch, fp32 and bf16 taking turns --rounds times; each keeps its
    fastest round's median (this machine's timings move by up to 2x between runs);
  - agreement: two daemons (`replicad serve --precision fp32` and `bf16`) answer the same
    --samples fixed inputs (seeded normal images; token ids below 1000 with a random number of
    padded positions for the encoder) over tritonclient; the table gives the share of samples
    whose top-1 class agrees and the relative L2 of bf16's logits against fp32's, the worst
    sample's and over all, and over the logits' spread (each row less its mean): with seeded,
    untrained weights a classifier's logits can be nearly equal across classes (mobilenet_v2's
    differ from their mean by about 1% of their size), and then top-1 is a coin toss for any
    change at all; the next column says how large the change is next to that spread, and the
    last how many classes float32's top-1 falls on over the samples (1: one class wins every
    sample by a margin the inputs hardly move, so agreement measures that margin alone).
"""

import argparse
import datetime
import os
import subprocess
import sys

import numpy as np
import tritonclient.grpc as grpcclient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from bench_daemon import ReplicadDaemon  # noqa: E402
from bench_report import git_commit, machine_line  # noqa: E402


def export(models, models_dir, calibrated):
    missing = [m for m in models if not os.path.exists(os.path.join(models_dir, m, "model.onnx"))]
    if missing:
        script = (os.path.join(ROOT, "benchmarks", "calibrated_models.py") if calibrated else
                  os.path.join(ROOT, "tests", "parity", "export_torch_models.py"))
        subprocess.run(["/usr/bin/python3", script, models_dir, "--models", ",".join(missing)],
                       check=True)


def median_ms(bench, model_path, batch, threads, precision):
    out = subprocess.run([bench, "--model", model_path, "--batch", str(batch), "--threads",
                          str(threads), "--slots", "1", "--precision", precision,
                          "--iterations", "10", "--warmup", "2"],
                         check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("| Predict"):
            return float(line.split("|")[2])
    raise RuntimeError(f"no Predict row in model_forward_bench's output:\n{out}")


def samples(inputs, count, seed):
    """`count` fixed samples for a model with these (name, datatype, shape) inputs."""
    rng = np.random.default_rng(seed)
    if inputs[0][1] == "INT64":  # The encoder: ids and an attention mask.
        length = inputs[0][2][1]
        ids = rng.integers(1, 1000, size=(count, length), dtype=np.int64)
        valid = rng.integers(length // 4, length + 1, size=count)
        mask = (np.arange(length)[None, :] < valid[:, None]).astype(np.int64)
        return {inputs[0][0]: ids * mask, inputs[1][0]: mask}
    return {inputs[0][0]: rng.standard_normal((count, *inputs[0][2][1:])).astype(np.float32)}


def answers(address, model, data, chunk=25):
    client = grpcclient.InferenceServerClient(address)
    metadata = client.get_model_metadata(model)
    count = len(next(iter(data.values())))
    out = []
    for begin in range(0, count, chunk):
        tensors = []
        for spec in metadata.inputs:
            array = data[spec.name][begin:begin + chunk]
            tensors.append(grpcclient.InferInput(spec.name, list(array.shape), spec.datatype))
            tensors[-1].set_data_from_numpy(array)
        out.append(client.infer(model, tensors).as_numpy(metadata.outputs[0].name))
    return np.concatenate(out)


def agreement(replicad, model_path, count, threads):
    logits = {}
    for precision in ("fp32", "bf16"):
        daemon = ReplicadDaemon(replicad, ["--model", f"m={model_path}", "--devices", "cpu:0",
                                           "--threads-per-slot", str(threads),
                                           "--precision", precision])
        failure = daemon.start()
        if failure:
            raise RuntimeError(failure)
        try:
            client = grpcclient.InferenceServerClient(daemon.address)
            metadata = client.get_model_metadata("m")
            inputs = [(t.name, t.datatype, [int(d) for d in t.shape]) for t in metadata.inputs]
            logits[precision] = answers(daemon.address, "m", samples(inputs, count, seed=39))
        finally:
            daemon.stop()
    fp32, bf16 = logits["fp32"].astype(np.float64), logits["bf16"].astype(np.float64)
    top1 = float(np.mean(fp32.argmax(axis=1) == bf16.argmax(axis=1)))
    per_sample = np.linalg.norm(bf16 - fp32, axis=1) / np.linalg.norm(fp32, axis=1)
    overall = float(np.linalg.norm(bf16 - fp32) / np.linalg.norm(fp32))
    spread = fp32 - fp32.mean(axis=1, keepdims=True)
    over_spread = float(np.linalg.norm((bf16 - fp32) - (bf16 - fp32).mean(axis=1, keepdims=True)) /
                        np.linalg.norm(spread))
    classes = len(set(fp32.argmax(axis=1).tolist()))
    return top1, float(per_sample.max()), overall, over_spread, classes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,mobilenet_v2,bert_encoder")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("--output", default=None)
    parser.add_argument("--seeded-statistics", action="store_true",
                        help="the parity export's models (seeded BatchNorm statistics: nearly "
                        "every input wins one class)")
    args = parser.parse_args()
    models = args.models.split(",")
    models_dir = os.path.join(args.build_dir, "bench_models" if args.seeded_statistics
                              else "calibrated_models")
    export(models, models_dir, not args.seeded_statistics)
    bench = os.path.join(args.build_dir, "benchmarks", "model_forward_bench")
    replicad = os.path.join(args.build_dir, "bin", "replicad")
    lines = [f"`{' '.join(sys.argv)}` — {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, "
             f"commit {git_commit()}, {machine_line()}", "",
             "| model | batch | fp32 ms | bf16 ms | bf16 / fp32 | top-1 agreement | "
             "worst sample rel. L2 | all samples rel. L2 | rel. L2 over the spread | "
             "fp32's top-1 classes |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for model in models:
        path = os.path.join(models_dir, model, "model.onnx")
        best = {"fp32": float("inf"), "bf16": float("inf")}
        for _ in range(args.rounds):
            for precision in best:
                best[precision] = min(best[precision],
                                      median_ms(bench, path, args.batch, args.threads, precision))
        top1, worst, overall, over_spread, classes = agreement(replicad, path, args.samples,
                                                               args.threads)
        lines.append(f"| {model} | {args.batch} | {best['fp32']:.2f} | {best['bf16']:.2f} | "
                     f"{best['bf16'] / best['fp32']:.2f} | {100 * top1:.1f}% | {worst:.2e} | "
                     f"{overall:.2e} | {over_spread:.2e} | {classes} |")
        print(lines[-1], flush=True)
    report = "\n".join(lines) + "\n"
    print(report)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(report)


if __name__ == "__main__":
    main()
