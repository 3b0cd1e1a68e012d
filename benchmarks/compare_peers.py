#!/usr/bin/env python3
"""replicad next to ONNX Runtime and PyTorch, in the same run and at the same thread count.

Run with (after scripts/build.sh and scripts/bench-venv.sh):
    .venv/bin/python benchmarks/compare_peers.py [--threads 2] [--iterations 20] [--warmup 3]
        [--cases resnet18:1,resnet18:32,mobilenet_v2:32,densenet121:8] [--output FILE.md]

For each (model, batch) it measures, one after another on the same input shape:
  - replicad in-process: build/benchmarks/model_forward_bench (ReplicaSet::Predict; also
    ExecutionPlan::Run directly for one slot), for every slot layout whose slots x threads
    make --threads in all (with 2: one slot of 2 threads, two slots of 1);
  - replicad over gRPC: `replicad serve` on 127.0.0.1 with that layout, the same binary in
    --grpc mode; the daemon's peak RSS (VmHWM) is read from /proc before SIGTERM;
  - ONNX Runtime (CPU provider, intra_op_num_threads = --threads, inter_op 1, sequential);
  - PyTorch (torch.set_num_threads(--threads), inference_mode) on the module that was
    exported.
Every engine runs --warmup untimed and --iterations timed passes; the table gives medians and
the ratios replicad/ORT, replicad/PyTorch and gRPC/in-process (below 1.0: replicad faster).
Models come from tests/parity/export_torch_models.py (weights=None, seeded), exported once
into --models-dir. A model replicad cannot load yet is reported with the reason, and its
ORT and PyTorch times are still measured.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from bench_daemon import ReplicadDaemon  # noqa: E402
from bench_report import git_commit, machine_line, publish  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "tests", "parity"))

import torch  # noqa: E402

import export_torch_models as models  # noqa: E402

DEFAULT_CASES = "resnet18:1,resnet18:32,mobilenet_v2:32,densenet121:8"


def log(message):
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- models

def exported_model(name, models_dir):
    """models_dir/NAME/model.onnx, exported again when export_torch_models.py changed."""
    model_dir = os.path.join(models_dir, name)
    path = os.path.join(model_dir, "model.onnx")
    stamp = os.path.join(model_dir, "export.sha256")
    digest = models.script_hash()
    if os.path.isfile(path) and os.path.isfile(stamp) and open(stamp).read() == digest:
        return path
    os.makedirs(model_dir, exist_ok=True)
    log(f"exporting {name} -> {path}")
    module, inputs, outputs = models.build_model(name)
    models.export_onnx(module, inputs, outputs, path)
    with open(stamp, "w") as f:
        f.write(digest)
    return path


# ---------------------------------------------------------------- replicad

def run_bench(bench, args, timeout=900):
    """Runs model_forward_bench with --json; returns (dict of timings, None) or (None, error)."""
    proc = subprocess.run([bench, "--json"] + args, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        return None, (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1][:300]
    sys.stderr.write(proc.stdout)
    for line in proc.stdout.splitlines():
        if line.startswith("json: "):
            return json.loads(line[len("json: "):]), None
    return None, "no json line in the output"


def Daemon(replicad, model_path, slots, threads_per_slot):
    """`replicad serve` with model `m` on `slots` CPU slots; start() waits for its port."""
    ncpu = os.cpu_count() or 1
    devices = ",".join(f"cpu:{i % ncpu}" for i in range(slots))
    return ReplicadDaemon(replicad, ["--model", f"m={model_path}", "--devices", devices,
                                     "--threads-per-slot", str(threads_per_slot)])


# ---------------------------------------------------------------- peers

def time_passes(run, warmup, iterations):
    for _ in range(warmup):
        run()
    ms = []
    for _ in range(iterations):
        start = time.perf_counter()
        run()
        ms.append((time.perf_counter() - start) * 1000.0)
    return {"median_ms": statistics.median(ms), "mean_ms": statistics.fmean(ms), "min_ms": min(ms)}


def time_onnxruntime(path, feeds, threads, warmup, iterations):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return time_passes(lambda: session.run(None, feeds), warmup, iterations)


def time_pytorch(module, arrays, threads, warmup, iterations):
    torch.set_num_threads(threads)
    tensors = [torch.from_numpy(a) for a in arrays]

    def run():
        with torch.inference_mode():
            module(*tensors)
    return time_passes(run, warmup, iterations)


# ---------------------------------------------------------------- report

def slot_layouts(threads):
    """(slots, threads per slot) with slots * threads_per_slot == threads, one slot first."""
    return [(s, threads // s) for s in range(1, threads + 1) if threads % s == 0]


def fmt_ms(t):
    return f"{t['median_ms']:.2f}" if t else "—"


def fmt_ratio(a, b):
    return f"{a['median_ms'] / b['median_ms']:.2f}" if a and b else "—"


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory")
    parser.add_argument("--models-dir", default=None, help="default: BUILD/bench_models")
    parser.add_argument("--cases", default=DEFAULT_CASES, help="MODEL:BATCH,... (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="total threads of every engine")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--output", help="also write the markdown report to this file")
    args = parser.parse_args(argv)

    bench = os.path.join(args.build, "benchmarks", "model_forward_bench")
    replicad = os.path.join(args.build, "bin", "replicad")
    for binary in (bench, replicad):
        if not os.access(binary, os.X_OK):
            parser.error(f"{binary} is missing: run scripts/build.sh first")
    models_dir = args.models_dir or os.path.join(args.build, "bench_models")
    try:
        import onnxruntime
    except ImportError:
        parser.error("onnxruntime is missing: run scripts/bench-venv.sh and use .venv/bin/python")

    cases = []
    for item in args.cases.split(","):
        name, batch = item.split(":")
        cases.append((name, int(batch)))
    layouts = slot_layouts(args.threads)
    common = ["--iterations", str(args.iterations), "--warmup", str(args.warmup)]

    rows, notes, peaks = [], {}, []
    for name, batch in cases:
        path = exported_model(name, models_dir)
        module, inputs, _ = models.build_model(name)
        arrays = models.make_inputs(name, inputs, batch)
        log(f"== {name} batch {batch}")
        ort_t = time_onnxruntime(path, {n: a for (n, _), a in zip(inputs, arrays)},
                                 args.threads, args.warmup, args.iterations)
        torch_t = time_pytorch(module, arrays, args.threads, args.warmup, args.iterations)
        for slots, tps in layouts:
            base = ["--batch", str(batch), "--threads", str(tps)] + common
            inproc, error = run_bench(bench, ["--model", path, "--slots", str(slots)] + base)
            grpc, peak = None, None
            if error:
                notes[name] = error
            else:
                daemon = Daemon(replicad, path, slots, tps)
                error = daemon.start()
                if error:
                    notes[name] = error
                else:
                    try:
                        grpc, error = run_bench(
                            bench, ["--grpc", "--server", f"127.0.0.1:{daemon.port}",
                                    "--name", "m"] + base)
                        peak = daemon.peak_rss_bytes()
                    finally:
                        daemon.stop()
                    if error:
                        notes[name] = error
                    if peak:
                        peaks.append((name, batch, slots, tps, peak))
            rows.append({
                "model": name, "batch": batch, "layout": f"{slots}x{tps}",
                "direct": (inproc or {}).get("direct"), "predict": (inproc or {}).get("predict"),
                "grpc": (grpc or {}).get("grpc"), "ort": ort_t, "torch": torch_t,
                "peak": peak,
            })

    import onnxruntime as ort
    lines = [
        f"## compare_peers — {datetime.date.today().isoformat()}, {machine_line()}",
        "",
        f"Command: `.venv/bin/python benchmarks/compare_peers.py --threads {args.threads} "
        f"--iterations {args.iterations} --warmup {args.warmup} --cases {args.cases}` "
        f"(commit {git_commit()}; onnxruntime {ort.__version__}, torch {torch.__version__}). "
        f"Every engine uses {args.threads} thread(s) in all; replicad's layout is slots x "
        "threads per slot. Medians in ms per forward pass of the whole batch. "
        "`in-process` is ReplicaSet::Predict, `direct` ExecutionPlan::Run (one slot only), "
        "`gRPC` Predict through the daemon on loopback. Ratios below 1.00 mean replicad is faster.",
        "",
        "| model | batch | replicad slots x threads | direct | in-process | gRPC | ORT | PyTorch "
        "| in-process / ORT | in-process / PyTorch | gRPC / in-process | daemon VmHWM |",
        "| --- | ---: | :---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        peak = f"{r['peak'] / 2**20:.0f} MiB" if r["peak"] else "—"
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['layout']} | {fmt_ms(r['direct'])} "
            f"| {fmt_ms(r['predict'])} | {fmt_ms(r['grpc'])} | {fmt_ms(r['ort'])} "
            f"| {fmt_ms(r['torch'])} | {fmt_ratio(r['predict'], r['ort'])} "
            f"| {fmt_ratio(r['predict'], r['torch'])} | {fmt_ratio(r['grpc'], r['predict'])} "
            f"| {peak} |")
    lines.append("")
    for name, batch, slots, tps, peak in peaks:
        if name == "resnet18" and slots == 2:
            lines.append(f"Peak RSS (VmHWM) of `replicad serve` with resnet18 on 2 slots x {tps} "
                         f"thread(s), after serving batch {batch}: {peak / 2**20:.0f} MiB.")
    for name, note in notes.items():
        lines.append(f"- {name}: not measured in replicad: {note}")
    report = "\n".join(lines) + "\n"
    publish(report, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
