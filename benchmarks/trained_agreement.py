#!/usr/bin/env python3
"""`--precision bf16` against float32 on a model with trained weights: top-1 agreement.

Run with (after scripts/build.sh and scripts/triton-venv.sh):
    .venv-triton/bin/python benchmarks/trained_agreement.py [--epochs 1] [--build-dir build]

The seeded networks of precision_bench.py separate their classes by margins that bfloat16's
rounding moves (PyTorch's autocast disagrees with its own float32 on a quarter of their
inputs), so agreement there says little about a trained network. Here the daemon's embedded
CNN is trained on Fashion-MNIST through TrainStep (`replicactl train`, two CPU slots, SGD with
momentum, as scripts/demo.sh trains it) and checkpointed; two daemons then serve the checkpoint,
`--precision fp32` and `--precision bf16`, and answer the 10000 test images over tritonclient.
Prints the share of images whose top-1 class agrees, each precision's accuracy, and the logits'
relative L2.
"""

import argparse
import gzip
import os
import subprocess
import sys
import tempfile

import numpy as np
import tritonclient.grpc as grpcclient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from bench_daemon import ReplicadDaemon  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"


def test_set():
    with gzip.open(os.path.join(DATA, "t10k-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(DATA, "t10k-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return (images / 255.0).astype(np.float32), labels.astype(np.int64)


def started(replicad, args):
    daemon = ReplicadDaemon(replicad, args)
    failure = daemon.start()
    if failure:
        raise RuntimeError(failure)
    return daemon


def logits_of(replicad, model_path, precision, images, chunk=500):
    daemon = started(replicad, ["--model", f"fm={model_path}", "--devices", "cpu:0",
                                "--threads-per-slot", "2", "--precision", precision])
    try:
        client = grpcclient.InferenceServerClient(daemon.address)
        out = []
        for begin in range(0, len(images), chunk):
            x = images[begin:begin + chunk]
            tensor = grpcclient.InferInput("image", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            out.append(client.infer("fm", [tensor]).as_numpy("logits"))
        return np.concatenate(out).astype(np.float64)
    finally:
        daemon.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    args = parser.parse_args()
    replicad = os.path.join(args.build_dir, "bin", "replicad")
    replicactl = os.path.join(args.build_dir, "bin", "replicactl")
    with tempfile.TemporaryDirectory() as work:
        trainer = started(replicad, ["--devices", "cpu:0,cpu:0", "--checkpoint-root", work])
        try:
            subprocess.run([replicactl, "--server", trainer.address, "train", "--model", "default",
                            "--data", DATA, "--epochs", str(args.epochs), "--batch-size", "64",
                            "--optimizer", "sgd", "--lr", "0.02", "--momentum", "0.9",
                            "--checkpoint", "trained.onnx"], check=True, stdout=subprocess.DEVNULL)
        finally:
            trainer.stop()
        images, labels = test_set()
        model = os.path.join(work, "trained.onnx")
        fp32 = logits_of(replicad, model, "fp32", images)
        bf16 = logits_of(replicad, model, "bf16", images)
    agree = float(np.mean(fp32.argmax(1) == bf16.argmax(1)))
    print(f"trained default CNN ({args.epochs} epoch(s)), {len(labels)} Fashion-MNIST test images")
    print(f"top-1 agreement bf16 / fp32: {100 * agree:.2f}%")
    print(f"accuracy fp32 {100 * np.mean(fp32.argmax(1) == labels):.2f}%, "
          f"bf16 {100 * np.mean(bf16.argmax(1) == labels):.2f}%")
    print(f"logits' relative L2: {np.linalg.norm(bf16 - fp32) / np.linalg.norm(fp32):.3e}")


if __name__ == "__main__":
    main()
