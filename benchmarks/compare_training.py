#!/usr/bin/env python3
"""replicad's data-parallel training next to PyTorch: same model, weights, data order, optimizer.

Run with (after scripts/build.sh; Debian's python3 has torch, numpy and onnx):
    /usr/bin/python3 benchmarks/compare_training.py [--build build] [--epochs 5] [--batch-size 64]
        [--slots 2] [--seed 0] [--limit N] [--optimizer sgd|adam|rmsprop] [--lr 0.01]
        [--momentum 0] [--nesterov] [--weight-decay 0] [--beta1 ..] [--beta2 ..] [--epsilon ..]
        [--alpha ..] [--data /usr/share/datasets/fashion-mnist] [--output FILE.md]

One after the other, never at the same time:
  (a) replicad: writes the embedded default model with `BUILD/bin/replicad default-model
      --output TMP/default.onnx`, starts `BUILD/bin/replicad serve` (default model only) on
      --slots CPU slots of one thread each (cpu:0,cpu:1,...) on 127.0.0.1 with an ephemeral
      port and no metrics listener, waits until `replicactl devices` answers, runs
      `replicactl train --model default` with the settings above, parses its
      "epoch E: train loss L, train accuracy A, test accuracy T, S samples/s" lines, and
      stops the daemon with SIGTERM;
  (b) PyTorch: benchmarks/train_reference_torch.py from TMP/default.onnx's initial weights,
      with the same settings and --threads = slots (the same total thread count).
It prints a markdown table (per epoch: train loss, test accuracy and seconds of both, the
accuracy difference replicad - PyTorch in percentage points, and the time ratio
replicad/PyTorch, below 1.0 when replicad is faster) with the machine and the date;
--output also writes it to a file. replicad's seconds per epoch are N / (its printed
samples/s), i.e. the training steps only, as PyTorch's are; neither includes the test pass.
"""

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from bench_daemon import ReplicadDaemon  # noqa: E402
from bench_report import git_commit, machine_line  # noqa: E402
from train_reference_torch import add_optimizer_arguments  # noqa: E402
REFERENCE = os.path.join(ROOT, "benchmarks", "train_reference_torch.py")
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
MODEL = "default"

EPOCH_LINE = re.compile(
    r"^epoch (\d+): train loss (\S+), train accuracy (\S+), test accuracy (\S+), "
    r"(\S+) samples/s\s*$")
HEADER_LINE = re.compile(r"^training '[^']*' on (\d+) samples")


def log(message):
    print(message, file=sys.stderr, flush=True)


class Failure(Exception):
    pass


# ---------------------------------------------------------------- replicad

def write_default_model(replicad, path):
    try:
        proc = subprocess.run([replicad, "default-model", "--output", path],
                              capture_output=True, text=True, timeout=120)
    except OSError as e:
        raise Failure(f"cannot run {replicad}: {e}")
    if proc.returncode != 0 or not os.path.isfile(path):
        detail = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1][:300]
        raise Failure(
            f"`{replicad} default-model --output {path}` failed (exit {proc.returncode}): {detail}\n"
            "The PyTorch run needs the default model's initial weights as ONNX; this build's "
            "replicad has no working `default-model` subcommand yet (rebuild with it).")


class Daemon(ReplicadDaemon):
    """The default model on `slots` CPU slots; start() also waits for a real answer."""

    def __init__(self, replicad, replicactl, slots, threads_per_slot):
        devices = ",".join(f"cpu:{i}" for i in range(slots))
        super().__init__(replicad, ["--devices", devices, "--threads-per-slot",
                                    str(threads_per_slot)])
        self.replicactl = replicactl

    def start(self, timeout=120):
        log("$ " + " ".join(a if a else "''" for a in self.argv))
        deadline = time.monotonic() + timeout
        error = super().start(timeout)
        if error:
            raise Failure(error)
        # The port line comes once the server is built; still, wait for a real answer.
        while True:
            probe = subprocess.run([self.replicactl, "--server", self.address, "--timeout", "5",
                                    "devices"], capture_output=True, text=True)
            if probe.returncode == 0:
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise Failure(f"replicad serve on {self.address} does not answer `replicactl "
                              f"devices`: {(probe.stderr.strip() or '(no output)')[:300]}")
            time.sleep(0.5)


def replicactl_optimizer_args(args):
    """The `replicactl train` flags that configure the same optimizer as PyTorch's.

    replicactl sends them with ConfigureTraining. It has no flags for Adam's betas and epsilon or
    RMSprop's alpha and epsilon, so those must stay at their defaults (the server's are
    torch.optim's). Returns (argv list, list of the settings that cannot be passed)."""
    argv = ["--optimizer", args.optimizer, "--lr", repr(args.lr), "--momentum",
            repr(args.momentum), "--weight-decay", repr(args.weight_decay)]
    if args.nesterov:
        argv.append("--nesterov")
    missing = [f"--{name} {value!r}" for name, value, default in
               [("beta1", args.beta1, 0.9), ("beta2", args.beta2, 0.999),
                ("epsilon", args.epsilon, 1e-8), ("alpha", args.alpha, 0.99)] if value != default]
    return argv, missing


def run_replicad(args, replicad, replicactl, notes):
    """Per-epoch dicts like the PyTorch script's JSON lines; appends remarks to `notes`."""
    optimizer_argv, missing = replicactl_optimizer_args(args)
    if missing:
        raise Failure("`replicactl train` has no option for " + ", ".join(missing) +
                      ": replicad would train with other settings than PyTorch")
    daemon = Daemon(replicad, replicactl, args.slots, args.threads_per_slot)
    daemon.start()
    try:
        argv = [replicactl, "--server", daemon.address, "--timeout", str(args.timeout), "train",
                "--model", MODEL, "--data", args.data, "--epochs", str(args.epochs),
                "--batch-size", str(args.batch_size), "--seed", str(args.seed)]
        if args.limit is not None:
            argv += ["--limit", str(args.limit)]
        argv += optimizer_argv
        log("$ " + " ".join(argv))
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=None, text=True, bufsize=1)
        samples = None
        epochs = []
        lines = []
        for line in proc.stdout:
            sys.stderr.write("replicactl: " + line)
            lines.append(line.rstrip("\n"))
            header = HEADER_LINE.match(line)
            if header:
                samples = int(header.group(1))
            match = EPOCH_LINE.match(line)
            if match:
                if samples is None:
                    raise Failure("replicactl printed an epoch line before its 'training ... on N "
                                  "samples' line")
                rate = float(match.group(5))
                accuracy = match.group(3)
                epochs.append({
                    "epoch": int(match.group(1)),
                    "train_loss": float(match.group(2)),
                    "train_accuracy": None if accuracy == "n/a" else float(accuracy),
                    "test_accuracy": float(match.group(4)),
                    "seconds": samples / rate if rate > 0 else None,
                    "samples_per_second": rate,
                })
        code = proc.wait()
        if code != 0 or len(epochs) != args.epochs:
            raise Failure(f"replicactl train exited with {code} after {len(epochs)} of "
                          f"{args.epochs} epochs (its errors are above)")
    finally:
        daemon.stop()
    return epochs


# ---------------------------------------------------------------- PyTorch

def run_pytorch(args, onnx_path):
    argv = [args.python, REFERENCE, "--onnx", onnx_path, "--data", args.data,
            "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
            "--seed", str(args.seed), "--threads", str(args.slots * args.threads_per_slot),
            "--optimizer", args.optimizer, "--lr", repr(args.lr), "--momentum", repr(args.momentum),
            "--weight-decay", repr(args.weight_decay), "--beta1", repr(args.beta1),
            "--beta2", repr(args.beta2), "--epsilon", repr(args.epsilon),
            "--alpha", repr(args.alpha)]
    if args.nesterov:
        argv.append("--nesterov")
    if args.limit is not None:
        argv += ["--limit", str(args.limit)]
    log("$ " + " ".join(argv))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=None, text=True, bufsize=1)
    epochs = []
    for line in proc.stdout:
        sys.stderr.write("pytorch: " + line)
        if line.startswith("{"):
            epochs.append(json.loads(line))
    code = proc.wait()
    if code != 0 or len(epochs) != args.epochs:
        raise Failure(f"{REFERENCE} exited with {code} after {len(epochs)} of {args.epochs} "
                      "epochs (its errors are above)")
    version = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True).stdout.strip()
    return epochs, version or "unknown"


# ---------------------------------------------------------------- report

def optimizer_text(args):
    if args.optimizer == "sgd":
        text = f"SGD lr {args.lr:g}, momentum {args.momentum:g}"
        if args.nesterov:
            text += " (Nesterov)"
    elif args.optimizer == "adam":
        text = (f"Adam lr {args.lr:g}, betas ({args.beta1:g}, {args.beta2:g}), "
                f"eps {args.epsilon:g}")
    else:
        text = (f"RMSprop lr {args.lr:g}, alpha {args.alpha:g}, eps {args.epsilon:g}, "
                f"momentum {args.momentum:g}")
    return text + f", weight decay {args.weight_decay:g}"


def num(value, fmt):
    return "—" if value is None else format(value, fmt)


def report(args, ours, theirs, torch_version, notes, errors):
    lines = [
        "## Training: replicad vs PyTorch",
        "",
        f"- Date: {datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}",
        f"- Machine: {machine_line()}",
        f"- Commit: {git_commit()}; PyTorch {torch_version or 'unknown'}",
        f"- Model: replicad's default Fashion-MNIST CNN, same initial weights in both; data "
        f"{args.data}" + (f", first {args.limit} samples of each split" if args.limit else ""),
        f"- Batch size {args.batch_size}, seed {args.seed}, {args.epochs} epochs; "
        f"{optimizer_text(args)}",
        f"- replicad: {args.slots} CPU slots x {args.threads_per_slot} thread over gRPC "
        f"(`replicactl train`); PyTorch: torch.set_num_threads("
        f"{args.slots * args.threads_per_slot}), in process",
        "- Seconds: training steps of one epoch, test pass excluded (replicad: N / its printed "
        "samples/s). Δ = replicad − PyTorch test accuracy in percentage points; time ratio "
        "replicad/PyTorch, below 1.0 when replicad is faster.",
    ]
    lines += [f"- Note: {n}" for n in notes]
    lines += [f"- **Error**: {e}" for e in errors]
    lines += [
        "",
        "| epoch | train loss replicad | train loss PyTorch | test acc replicad | "
        "test acc PyTorch | Δ acc (pp) | s/epoch replicad | s/epoch PyTorch | time ratio |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ours_by_epoch = {e["epoch"]: e for e in ours or []}
    theirs_by_epoch = {e["epoch"]: e for e in theirs or []}
    ratios = []
    for epoch in range(1, args.epochs + 1):
        a = ours_by_epoch.get(epoch, {})
        b = theirs_by_epoch.get(epoch, {})
        acc_a, acc_b = a.get("test_accuracy"), b.get("test_accuracy")
        sec_a, sec_b = a.get("seconds"), b.get("seconds")
        delta = 100.0 * (acc_a - acc_b) if acc_a is not None and acc_b is not None else None
        ratio = sec_a / sec_b if sec_a and sec_b else None
        if ratio is not None:
            ratios.append(ratio)
        lines.append(
            f"| {epoch} | {num(a.get('train_loss'), '.4f')} | {num(b.get('train_loss'), '.4f')} "
            f"| {num(acc_a, '.4f')} | {num(acc_b, '.4f')} | {num(delta, '+.2f')} "
            f"| {num(sec_a, '.2f')} | {num(sec_b, '.2f')} | {num(ratio, '.2f')} |")
    if ratios:
        total_a = sum(e["seconds"] for e in ours if e.get("seconds"))
        total_b = sum(e["seconds"] for e in theirs if e.get("seconds"))
        lines.append(f"| all | | | | | | {total_a:.2f} | {total_b:.2f} | "
                     f"{total_a / total_b:.2f} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- main

def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory")
    parser.add_argument("--data", default=DEFAULT_DATA, help="IDX directory (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--slots", type=int, default=2,
                        help="replicad CPU slots; PyTorch gets slots x threads-per-slot threads")
    parser.add_argument("--threads-per-slot", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample order")
    parser.add_argument("--limit", type=int, help="use only the first N samples of each split")
    add_optimizer_arguments(parser)
    parser.add_argument("--timeout", type=float, default=300,
                        help="replicactl's deadline per call, seconds (default: %(default)s)")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter with torch, numpy and onnx for the PyTorch run "
                             "(default: this one)")
    parser.add_argument("--output", help="also write the markdown report to this file")
    args = parser.parse_args(argv)
    for name in ("epochs", "batch_size", "slots", "threads_per_slot"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: expected >= 1")
    if args.limit is not None and args.limit < 1:
        parser.error(f"--limit {args.limit}: expected >= 1")
    if args.nesterov and not args.momentum > 0:
        parser.error("--nesterov needs --momentum > 0")
    return args


def main(argv):
    args = parse_args(argv)
    replicad = os.path.join(args.build, "bin", "replicad")
    replicactl = os.path.join(args.build, "bin", "replicactl")
    for binary in (replicad, replicactl):
        if not os.access(binary, os.X_OK):
            log(f"compare_training: {binary} not found: build first (scripts/build.sh) or "
                "pass --build")
            return 1
    if not os.path.isdir(args.data):
        log(f"compare_training: --data {args.data}: no such directory")
        return 1

    errors, notes = [], []
    ours = theirs = None
    torch_version = None
    with tempfile.TemporaryDirectory(prefix="compare_training.") as tmp:
        onnx_path = os.path.join(tmp, "default.onnx")
        try:
            write_default_model(replicad, onnx_path)
        except Failure as e:
            log(f"compare_training: {e}")
            return 1
        try:
            ours = run_replicad(args, replicad, replicactl, notes)
        except Failure as e:
            log(f"compare_training: replicad: {e}")
            errors.append(f"replicad: {e}")
        try:
            theirs, torch_version = run_pytorch(args, onnx_path)
        except Failure as e:
            log(f"compare_training: PyTorch: {e}")
            errors.append(f"PyTorch: {e}")

    text = report(args, ours, theirs, torch_version, notes, errors)
    print(text, end="")
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
        log(f"wrote {args.output}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
