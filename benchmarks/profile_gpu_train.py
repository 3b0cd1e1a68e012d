#!/usr/bin/env python3
"""Where a resnet50 training step spends its GPU time: replicad next to PyTorch, per kernel.

Run on a machine with an NVIDIA GPU (scripts/gpu-profile-train.sh sets the paths):
    python3 benchmarks/profile_gpu_train.py [--batch 128] [--tf32] [--build-dir DIR]
        [--ncu PATH] [--output FILE.md] [--raw-dir DIR]

replicad: one TrainStep of build/benchmarks/train_step_bench (1 slot) under Nsight Compute
(`ncu`, metric gpu__time_duration.sum: each kernel's duration, kernels serialised), after
--warmup steps it does not profile. PyTorch: one SGD step (the one compare_gpu.py times) under
torch.profiler, after --warmup steps. For each engine: the step's wall time outside the
profiler, the sum of its kernels' times, their count, the share by kind (convolution and
matrix kernels, batch normalisation, the rest) and the kernels that take longest. A kernel sum
well under the wall time means the step waits on the host (launches, copies, synchronisation);
a sum near it means the kernels themselves are slower.
"""

import argparse
import collections
import csv
import datetime
import glob
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import torch  # noqa: E402

from bench_report import git_commit, publish  # noqa: E402
import compare_gpu  # noqa: E402

UNIT_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
           "second": 1e9, "s": 1e9}


def log(message):
    print(message, file=sys.stderr, flush=True)


def kind_of(name):
    lower = name.lower()
    if any(k in lower for k in ("conv", "dgrad", "wgrad", "fprop", "gemm", "xmma", "cutlass",
                                "sm90_", "sm80_", "ampere", "hopper", "cublas", "winograd",
                                "implicit", "fft")):
        return "convolution / matrix"
    if "batch_norm" in lower or "batchnorm" in lower or "bn_" in lower or "batchnormtrain" in lower:
        return "batch normalisation"
    return "other (element-wise, pooling, loss, optimizer, copies)"


def summarise(engine, wall_ms, kernels):
    """kernels: {name: [count, total_ns]} -> markdown lines."""
    total_ns = sum(t for _, t in kernels.values())
    count = sum(c for c, _ in kernels.values())
    lines = [f"### {engine}", "",
             f"Step wall time (unprofiled median): {wall_ms:.1f} ms; kernels: {count}, "
             f"their sum {total_ns / 1e6:.1f} ms ({100 * total_ns / 1e6 / wall_ms:.0f}% of the "
             f"wall time).", "", "| kind | ms | share |", "|---|---|---|"]
    by_kind = collections.Counter()
    for name, (_, t) in kernels.items():
        by_kind[kind_of(name)] += t
    for kind, t in by_kind.most_common():
        lines.append(f"| {kind} | {t / 1e6:.2f} | {100 * t / max(total_ns, 1):.0f}% |")
    lines += ["", "| kernel | calls | ms |", "|---|---|---|"]
    for name, (c, t) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:25]:
        short = name if len(name) <= 110 else name[:107] + "..."
        lines.append(f"| `{short.replace('|', '/')}` | {c} | {t / 1e6:.2f} |")
    return lines


def find_ncu(explicit):
    if explicit:
        return explicit
    found = shutil.which("ncu")
    if found:
        return found
    candidates = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu") +
                        glob.glob("/usr/local/cuda*/bin/ncu"))
    return candidates[-1] if candidates else None


def replicad_kernels(args, model, raw_dir):
    bench = os.path.join(args.build_dir, "benchmarks", "train_step_bench")
    common = ["--model", model, "--device", "cuda:0", "--slots", "1",
              "--batch", str(args.batch)] + (["--tf32"] if args.tf32 else [])
    passes = argparse.Namespace(iterations=5, warmup=3, run_timeout=args.timeout)
    wall_ms, error = compare_gpu.replicad_ms(bench, "train_step", common, passes)
    if wall_ms is None:
        raise RuntimeError(f"train_step_bench failed: {error}")
    ncu = find_ncu(args.ncu)
    if ncu is None:
        raise RuntimeError("no ncu (Nsight Compute) found; pass --ncu")
    report = os.path.join(raw_dir, "replicad_ncu.csv")
    # One step and no warm-up under ncu: cuDNN's algorithms come from its heuristics (no
    # trial runs), so the first step's kernels are the step's kernels.
    # ncu itself keeps the machine's libraries; only the bench gets the bundled ones.
    libs = os.environ.get("REPLICAD_BENCH_LD_LIBRARY_PATH")
    bench_env = ["env", f"LD_LIBRARY_PATH={libs}"] if libs else []
    argv = [ncu, "--target-processes", "all", "--metrics", "gpu__time_duration.sum", "--csv",
            "--log-file", report, "--clock-control", "none"] + bench_env + [
            bench, "--warmup", "0", "--iterations", "1"] + common
    log("ncu: " + " ".join(argv))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"ncu failed ({proc.returncode}): {proc.stderr[-2000:]}")
    kernels = collections.defaultdict(lambda: [0, 0.0])
    with open(report, newline="") as f:
        rows = [line for line in f if line.startswith('"')]
    for row in csv.DictReader(rows):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        entry = kernels[row["Kernel Name"]]
        entry[0] += 1
        entry[1] += value * UNIT_NS.get(row.get("Metric Unit", "nsecond"), 1.0)
    return wall_ms, dict(kernels)


def torch_kernels(args):
    run = compare_gpu.torch_train_step(args.batch, args.tf32)
    wall_ms = compare_gpu.median_ms(run, 3, 5)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        run()
    kernels = collections.defaultdict(lambda: [0, 0.0])
    for event in prof.events():
        if "cuda" not in str(getattr(event, "device_type", "")).lower():
            continue
        us = getattr(event, "device_time", None)
        if us is None:
            us = getattr(event, "cuda_time", 0.0)
        entry = kernels[event.name]
        entry[0] += 1
        entry[1] += us * 1e3
    return wall_ms, dict(kernels)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--tf32", action="store_true")
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("--ncu", help="Nsight Compute's ncu (default: PATH, /opt/nvidia)")
    parser.add_argument("--timeout", type=int, default=600,
                        help="seconds each replicad run (timed, then under ncu) may take")
    parser.add_argument("--output", help="also write the report (markdown) here")
    parser.add_argument("--raw-dir", help="keep ncu's CSV here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        log("profile_gpu_train: PyTorch sees no CUDA device; this needs a GPU")
        return 2
    workdir = tempfile.mkdtemp(prefix="replicad-gpu-profile-")
    raw_dir = args.raw_dir or workdir
    os.makedirs(raw_dir, exist_ok=True)
    model = os.path.join(workdir, "resnet50_train.onnx")
    compare_gpu.export_resnet50_training(model)
    torch.backends.cudnn.benchmark = True  # As compare_gpu.py times PyTorch.
    log("PyTorch step under torch.profiler")
    torch_wall, torch_k = torch_kernels(args)
    lines = [f"resnet50 training step, batch {args.batch}, TF32 {'on' if args.tf32 else 'off'}, "
             f"1 slot, on {torch.cuda.get_device_name(0)}, {datetime.date.today().isoformat()}, "
             f"commit {git_commit()}, PyTorch {torch.__version__}.", ""]
    lines += summarise("PyTorch (torch.profiler)", torch_wall, torch_k) + [""]
    log("replicad step under ncu")
    try:
        wall, kernels = replicad_kernels(args, model, raw_dir)
        lines += summarise("replicad TrainStep (ncu)", wall, kernels)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        lines += ["### replicad TrainStep (ncu)", "", f"failed: {e}"]
    publish("\n".join(lines) + "\n", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
