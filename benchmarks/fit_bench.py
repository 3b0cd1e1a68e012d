#!/usr/bin/env python3
"""The Python client's fit next to `replicactl train`: same daemon flags, data, order, optimizer.

Run with (after scripts/build.sh and scripts/client-venv.sh):
    .venv-client/bin/python benchmarks/fit_bench.py [--build build] [--devices cpu:0,cpu:0]
        [--batch-size 64] [--repeats 3] [--data /usr/share/datasets/fashion-mnist]
        [--output FILE.md]

Each repeat runs both, one after the other, never at the same time, each on a fresh
`replicad serve --devices DEVICES` (the embedded default model), for one epoch of
Fashion-MNIST with SGD (lr 0.02, momentum 0.9), batch size B and seed 0:
  (a) `replicactl train` (C++, one TrainStep after the other), whose printed samples/s is
      the training steps of the epoch;
  (b) `replicad.Client.fit` from numpy arrays (pixels / 255, as replicactl sends them),
      whose History.samples_per_second is the same span: from the epoch's start to the
      answer of its last step, the conversion of every batch included.
It prints a markdown table of both rates per repeat, their medians and the ratio fit /
replicactl (goal: >= 0.95), and the test accuracy of each run (the same order: equal up to
float rounding), with the machine and the date; --output also writes it to a file.
"""

import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
sys.path.insert(0, os.path.join(ROOT, "client", "python", "src"))

import replicad  # noqa: E402
from bench_daemon import ReplicadDaemon  # noqa: E402
from bench_report import git_commit, machine_line, publish  # noqa: E402
from replicad.datasets import load_idx  # noqa: E402

EPOCH_LINE = re.compile(r"^epoch 1: train loss (\S+), train accuracy \S+, test accuracy (\S+), "
                        r"(\S+) samples/s\s*$", re.M)


def run_replicactl(args, address):
    out = subprocess.run(
        [os.path.join(args.build, "bin", "replicactl"), "--server", address, "--timeout", "300",
         "train", "--model", "default", "--data", args.data, "--epochs", "1", "--batch-size",
         str(args.batch_size), "--seed", "0", "--optimizer", "sgd", "--lr", "0.02",
         "--momentum", "0.9"], capture_output=True, text=True, check=True).stdout
    match = EPOCH_LINE.search(out)
    if not match:
        raise RuntimeError(f"replicactl printed no epoch line:\n{out}")
    return float(match.group(3)), float(match.group(2))


def run_fit(args, address, data):
    x, y, x_test, y_test = data
    with replicad.Client(address, timeout=300) as client:
        client.configure_training("default", optimizer="sgd", lr=0.02, momentum=0.9)
        history = client.fit("default", x, y, batch_size=args.batch_size, epochs=1, seed=0,
                             verbose=0)
        accuracy = client.evaluate("default", x_test, y_test,
                                   batch_size=args.batch_size)["accuracy"]
    return history.samples_per_second[0], accuracy


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--devices", default="cpu:0,cpu:0")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--output")
    args = parser.parse_args()

    data = []
    for split in ("train", "t10k"):
        images, labels = load_idx(args.data, split)
        data += [(images.astype(np.float32) / np.float32(255))[:, None], labels]

    rows = []
    for repeat in range(args.repeats):
        row = {}
        for engine in ("replicactl", "fit"):
            daemon = ReplicadDaemon(os.path.join(args.build, "bin", "replicad"),
                                    ["--devices", args.devices])
            failure = daemon.start()
            if failure:
                sys.exit(failure)
            try:
                row[engine] = (run_replicactl(args, daemon.address) if engine == "replicactl"
                               else run_fit(args, daemon.address, data))
            finally:
                daemon.stop()
            print(f"repeat {repeat + 1} {engine}: {row[engine][0]:.0f} samples/s, "
                  f"test accuracy {row[engine][1]:.4f}", file=sys.stderr)
        rows.append(row)

    c_rates = [r["replicactl"][0] for r in rows]
    f_rates = [r["fit"][0] for r in rows]
    lines = [
        f"## Python client: fit vs replicactl train - "
        f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, {machine_line()}",
        "",
        f"Command: `.venv-client/bin/python benchmarks/fit_bench.py --devices {args.devices} "
        f"--batch-size {args.batch_size} --repeats {args.repeats}` (commit {git_commit()}). "
        "One epoch of Fashion-MNIST, SGD lr 0.02 momentum 0.9, seed 0, a fresh daemon per run.",
        "",
        "| repeat | replicactl samples/s | fit samples/s | ratio | test acc replicactl | "
        "test acc fit |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for i, r in enumerate(rows):
        lines.append(f"| {i + 1} | {r['replicactl'][0]:.0f} | {r['fit'][0]:.0f} | "
                     f"{r['fit'][0] / r['replicactl'][0]:.3f} | {r['replicactl'][1]:.4f} | "
                     f"{r['fit'][1]:.4f} |")
    c_median, f_median = statistics.median(c_rates), statistics.median(f_rates)
    lines.append(f"| median | {c_median:.0f} | {f_median:.0f} | {f_median / c_median:.3f} | | |")
    lines += ["", f"fit / replicactl (medians): {f_median / c_median:.3f} (goal >= 0.95)"]
    publish("\n".join(lines) + "\n", args.output)


if __name__ == "__main__":
    main()
