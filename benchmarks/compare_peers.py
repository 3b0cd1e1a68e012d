#!/usr/bin/env python3
"""replicad next to ONNX Runtime and PyTorch, in the same run and at the same thread count.

Run with (after scripts/build.sh and scripts/bench-venv.sh):
    .venv/bin/python benchmarks/compare_peers.py [--threads 2] [--iterations 20] [--warmup 3]
        [--cases resnet18:1,resnet18:32,mobilenet_v2:32,densenet121:8] [--output FILE.md]
    .venv/bin/python benchmarks/compare_peers.py --zoo [--zoo-batch 8] [--zoo-models a,b]
        [--zoo-grpc] [--zoo-torch] [--threads 2] [--iterations 5] [--warmup 1] [--rounds 2]
        [--output FILE.md]

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
With --rounds N, ORT and replicad in-process take turns N times on each case and each keeps its
fastest round's median, so that a burst of load on a shared machine does not decide a ratio.
Models come from tests/parity/export_torch_models.py (weights=None, seeded), exported once
into --models-dir. A model replicad cannot load yet is reported with the reason, and its
ORT and PyTorch times are still measured; a model that cannot be exported, or that ORT or
PyTorch cannot run, is reported in the notes and the run goes on.

--zoo runs, instead of --cases, every model of the zoo (export_torch_models.zoo_names(): the
torchvision 0.14 classifiers that cost at most about 4.5 GMACs per image; --zoo-models keeps
some of them) at batch --zoo-batch in every slot layout and at batch 1 in the one-slot layout
only. It leaves out the daemon (add --zoo-grpc) and PyTorch (add --zoo-torch), which ORT makes
the peer that matters, and defaults to --iterations 5 --warmup 1 --rounds 2. The report ends
with how many rows have in-process / ORT <= 1.00, and the rows above, worst first.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from bench_daemon import ReplicadDaemon  # noqa: E402
from bench_report import git_commit, machine_line, publish, time_passes  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "tests", "parity"))

import torch  # noqa: E402

import export_torch_models as models  # noqa: E402

DEFAULT_CASES = "resnet18:1,resnet18:32,mobilenet_v2:32,densenet121:8"

# (iterations, warmup) when --iterations / --warmup are not given: the zoo runs 44 models in 3
# (batch, layout) rows each, so it takes fewer passes to stay practical on 2 cores.
DEFAULT_PASSES = (20, 3)
DEFAULT_ZOO_PASSES = (5, 1)


def log(message):
    print(message, file=sys.stderr, flush=True)


def first_line(error):
    """'TypeName: first line of the message' of an exception, for a one-line note."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]


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
    models.export_onnx(module, inputs, outputs, path, models.opset_of(name))
    with open(stamp, "w") as f:
        f.write(digest)
    return path


# ---------------------------------------------------------------- replicad

def run_bench(bench, args, timeout=900):
    """Runs model_forward_bench with --json; returns (dict of timings, None) or (None, error)."""
    try:
        proc = subprocess.run([bench, "--json"] + args, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"model_forward_bench timed out after {timeout} s"
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

def fastest(a, b):
    """Of two timings (either may be None), the one with the smaller median."""
    if a is None or b is None:
        return a or b
    return a if a["median_ms"] <= b["median_ms"] else b


def slot_layouts(threads):
    """(slots, threads per slot) with slots * threads_per_slot == threads, one slot first."""
    return [(s, threads // s) for s in range(1, threads + 1) if threads % s == 0]


def fmt_ms(t):
    return f"{t['median_ms']:.2f}" if t else "—"


def ratio(a, b):
    """a / b of two medians, rounded as the table prints it; None when either is missing."""
    return round(a["median_ms"] / b["median_ms"], 2) if a and b else None


def fmt_ratio(a, b):
    r = ratio(a, b)
    return f"{r:.2f}" if r is not None else "—"


def add_note(notes, name, note):
    """Notes per model, in order, each once (a model's cases often fail the same way)."""
    if note not in notes.setdefault(name, []):
        notes[name].append(note)


# ---------------------------------------------------------------- cases

def parse_cases(spec, layouts):
    """'MODEL:BATCH,...' -> [(name, batch, layouts)], every case in every slot layout."""
    cases = []
    for item in spec.split(","):
        name, batch = item.split(":")
        cases.append((name, int(batch), layouts))
    return cases


def zoo_cases(names, batch, layouts):
    """Each zoo model at the throughput `batch` in every slot layout, then at batch 1 in the
    one-slot layout only (latency: one request uses every thread)."""
    cases = []
    for name in names:
        cases.append((name, batch, layouts))
        cases.append((name, 1, layouts[:1]))
    return cases


def resolve_passes(args):
    """--iterations / --warmup / --rounds default to 5 / 1 / 2 for --zoo and to 20 / 3 / 1
    otherwise."""
    iterations, warmup = DEFAULT_ZOO_PASSES if args.zoo else DEFAULT_PASSES
    if args.iterations is None:
        args.iterations = iterations
    if args.warmup is None:
        args.warmup = warmup
    if args.rounds is None:
        args.rounds = 2 if args.zoo else 1
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")


def command_line(args):
    """The options that shaped the report, as a command line."""
    words = [".venv/bin/python benchmarks/compare_peers.py", f"--threads {args.threads}",
             f"--iterations {args.iterations}", f"--warmup {args.warmup}",
             f"--rounds {args.rounds}"]
    if args.zoo:
        words += ["--zoo", f"--zoo-batch {args.zoo_batch}"]
        words += [f"--zoo-models {args.zoo_models}"] if args.zoo_models else []
        words += ["--zoo-grpc"] if args.zoo_grpc else []
        words += ["--zoo-torch"] if args.zoo_torch else []
    else:
        words.append(f"--cases {args.cases}")
    return " ".join(words)


# ---------------------------------------------------------------- one case

def time_grpc(bench, replicad, path, slots, tps, base):
    """Predict through `replicad serve`; returns (timings, peak RSS bytes, error)."""
    daemon = Daemon(replicad, path, slots, tps)
    error = daemon.start()
    if error:
        return None, None, error
    try:
        grpc, error = run_bench(bench, ["--grpc", "--server", f"127.0.0.1:{daemon.port}",
                                        "--name", "m"] + base)
        peak = daemon.peak_rss_bytes()
    finally:
        daemon.stop()
    return grpc, peak, error


def run_case(name, batch, layouts, path, args, bench, replicad, with_grpc, with_torch, notes,
             peaks):
    """Times ORT, PyTorch (with_torch) and replicad in `layouts` (over gRPC too with
    with_grpc) on one (model, batch); returns its table rows. A peer that fails is noted
    and left out of the rows; the others are still measured."""
    inputs = models.registry_entry(name)[1]
    arrays = models.make_inputs(name, inputs, batch)
    log(f"== {name} batch {batch}")
    ort_t = torch_t = None
    common = ["--iterations", str(args.iterations), "--warmup", str(args.warmup)]
    inproc = {}  # (slots, tps) -> timings, the best round's
    inproc_errors = {}
    # ORT and replicad in-process take turns, --rounds times, and each keeps
    # its best round: a burst of load on a shared machine then slows one
    # round of one engine, not the ratio.
    ort_failed = False
    for _ in range(args.rounds):
        try:
            if not ort_failed:
                ort_t = fastest(ort_t, time_onnxruntime(
                    path, {spec[0]: a for spec, a in zip(inputs, arrays)}, args.threads,
                    args.warmup, args.iterations))
                log(f"{name} batch {batch}: ORT {fmt_ms(ort_t)} ms")
        except Exception as e:  # An op ORT lacks must not stop the other engines.
            log(traceback.format_exc())
            add_note(notes, name, f"ORT failed: {first_line(e)}")
            ort_failed = True
        for slots, tps in layouts:
            if (slots, tps) in inproc_errors:
                continue
            base = ["--batch", str(batch), "--threads", str(tps)] + common
            timings, error = run_bench(bench, ["--model", path, "--slots", str(slots)] + base)
            if error:
                inproc_errors[(slots, tps)] = error
            else:
                inproc[(slots, tps)] = {
                    key: fastest(inproc.get((slots, tps), {}).get(key), timings.get(key))
                    for key in ("direct", "predict")}
    if with_torch:
        try:
            module = models.build_model(name)[0]
            torch_t = time_pytorch(module, arrays, args.threads, args.warmup, args.iterations)
            log(f"{name} batch {batch}: PyTorch {fmt_ms(torch_t)} ms")
        except Exception as e:
            log(traceback.format_exc())
            add_note(notes, name, f"PyTorch failed: {first_line(e)}")
    rows = []
    for slots, tps in layouts:
        base = ["--batch", str(batch), "--threads", str(tps)] + common
        error = inproc_errors.get((slots, tps))
        grpc, peak = None, None
        if error:
            add_note(notes, name, f"not measured in replicad: {error}")
        elif with_grpc:
            grpc, peak, error = time_grpc(bench, replicad, path, slots, tps, base)
            if error:
                add_note(notes, name, f"not measured in replicad over gRPC: {error}")
            if peak:
                peaks.append((name, batch, slots, tps, peak))
        timings = inproc.get((slots, tps), {})
        row = {
            "model": name, "batch": batch, "layout": f"{slots}x{tps}",
            "direct": timings.get("direct"), "predict": timings.get("predict"),
            "grpc": (grpc or {}).get("grpc"), "ort": ort_t, "torch": torch_t, "peak": peak,
        }
        log(f"{name} batch {batch} {row['layout']}: replicad in-process {fmt_ms(row['predict'])}"
            f" ms, ORT {fmt_ms(ort_t)} ms, in-process / ORT {fmt_ratio(row['predict'], ort_t)}")
        rows.append(row)
    return rows


# ---------------------------------------------------------------- report

def zoo_summary(rows, notes):
    """How many rows have in-process / ORT <= 1.00 (as printed), and the others, worst first."""
    rated = [(ratio(r["predict"], r["ort"]), r) for r in rows]
    rated = [(q, r) for q, r in rated if q is not None]
    above = sorted(((q, r) for q, r in rated if q > 1.0), key=lambda item: -item[0])
    lines = [
        f"Zoo: {len(rated) - len(above)} of {len(rated)} (model, batch, layout) rows with both "
        f"times have in-process / ORT <= 1.00; {len(rows) - len(rated)} row(s) have no ratio "
        f"and {len(notes)} model(s) have notes (above).",
    ]
    if above:
        lines += ["", "Rows above 1.00, worst first:", ""]
        for q, r in above:
            lines.append(f"- {r['model']} batch {r['batch']} {r['layout']}: {q:.2f} "
                         f"(in-process {fmt_ms(r['predict'])} ms, ORT {fmt_ms(r['ort'])} ms)")
    return lines


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory")
    parser.add_argument("--models-dir", default=None, help="default: BUILD/bench_models")
    parser.add_argument("--cases", default=None,
                        help=f"MODEL:BATCH,... (default: {DEFAULT_CASES}); not with --zoo")
    parser.add_argument("--threads", type=int, default=2, help="total threads of every engine")
    parser.add_argument("--iterations", type=int, default=None,
                        help=f"timed passes (default: {DEFAULT_PASSES[0]}, "
                             f"{DEFAULT_ZOO_PASSES[0]} with --zoo)")
    parser.add_argument("--warmup", type=int, default=None,
                        help=f"untimed passes first (default: {DEFAULT_PASSES[1]}, "
                             f"{DEFAULT_ZOO_PASSES[1]} with --zoo)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="ORT and replicad in-process take turns this many times on each "
                             "case and keep their best (default: 1, 2 with --zoo)")
    parser.add_argument("--output", help="also write the markdown report to this file")
    parser.add_argument("--zoo", action="store_true",
                        help="run every zoo model (export_torch_models.py --list-zoo) instead "
                             "of --cases: at --zoo-batch in every layout, at batch 1 in one slot")
    parser.add_argument("--zoo-batch", type=int, default=8,
                        help="the throughput batch of --zoo (default: %(default)s)")
    parser.add_argument("--zoo-models", default=None,
                        help="NAME,...: run only these zoo models (with --zoo)")
    parser.add_argument("--zoo-grpc", action="store_true",
                        help="with --zoo, also time the gRPC daemon (doubles the time)")
    parser.add_argument("--zoo-torch", action="store_true", help="with --zoo, also time PyTorch")
    args = parser.parse_args(argv)

    if args.zoo and args.cases:
        parser.error("--cases and --zoo exclude each other")
    if not args.zoo and (args.zoo_models or args.zoo_grpc or args.zoo_torch):
        parser.error("--zoo-models, --zoo-grpc and --zoo-torch need --zoo")
    resolve_passes(args)
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

    layouts = slot_layouts(args.threads)
    if args.zoo:
        names = models.zoo_names()
        if args.zoo_models:
            wanted = [n for n in args.zoo_models.split(",") if n]
            unknown = [n for n in wanted if n not in names]
            if unknown:
                parser.error(f"not in the zoo: {', '.join(unknown)}; "
                             f"the zoo: {', '.join(names)}")
            names = [n for n in names if n in wanted]
        cases = zoo_cases(names, args.zoo_batch, layouts)
    else:
        args.cases = args.cases or DEFAULT_CASES
        cases = parse_cases(args.cases, layouts)
        unknown = [n for n, _, _ in cases
                   if n not in models.MODELS and n not in models.TRANSFORMERS and n not in models.ZOO]
        if unknown:
            parser.error(f"unknown model(s) {', '.join(unknown)}")
    with_grpc = args.zoo_grpc or not args.zoo
    with_torch = args.zoo_torch or not args.zoo

    rows, notes, peaks = [], {}, []
    export_failed = set()
    for name, batch, case_layouts in cases:
        if name in export_failed:
            continue
        try:
            path = exported_model(name, models_dir)
        except Exception as e:  # Some ops have no ONNX export at opset 13: note, go on.
            log(traceback.format_exc())
            add_note(notes, name, f"export failed: {first_line(e)}")
            export_failed.add(name)
            continue
        try:
            rows += run_case(name, batch, case_layouts, path, args, bench, replicad, with_grpc,
                             with_torch, notes, peaks)
        except Exception as e:  # Whatever else fails, the other models still run.
            log(traceback.format_exc())
            add_note(notes, name, f"batch {batch} failed: {first_line(e)}")

    import onnxruntime as ort
    lines = [
        f"## compare_peers — {datetime.date.today().isoformat()}, {machine_line()}",
        "",
        f"Command: `{command_line(args)}` "
        f"(commit {git_commit()}; onnxruntime {ort.__version__}, torch {torch.__version__}). "
        f"Every engine uses {args.threads} thread(s) in all; replicad's layout is slots x "
        "threads per slot. Medians in ms per forward pass of the whole batch. "
        "`in-process` is ReplicaSet::Predict, `direct` ExecutionPlan::Run (one slot only), "
        "`gRPC` Predict through the daemon on loopback. Ratios below 1.00 mean replicad is faster."
        + ("" if with_grpc and with_torch else " `—`: not run"
           + ("" if with_grpc else " (gRPC: add --zoo-grpc)")
           + ("" if with_torch else " (PyTorch: add --zoo-torch)") + "."),
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
    for name, model_notes in notes.items():
        lines.append(f"- {name}: {'; '.join(model_notes)}")
    if args.zoo:
        lines += [""] + zoo_summary(rows, notes)
    report = "\n".join(lines) + "\n"
    publish(report, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
