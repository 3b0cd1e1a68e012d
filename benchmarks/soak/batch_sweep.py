"""The daemon's memory under every batch size (issue #14, item 3): RSS after each phase.

Run with:
    bash scripts/triton-venv.sh && bash scripts/build.sh
    .venv-triton/bin/python benchmarks/soak/batch_sweep.py [--max-rows 300] [--big 8000]
        [--sweeps-after 2] [--sweep-ceiling-mb 250] [--ceiling-mb 1400] [--flat-mb 60]
        [--ort-python .venv/bin/python] [--ort-ratio 2]
        [--model NAME=PATH --input NAME --row-shape C,H,W] [-- extra replicad serve flags]
  issue #36's resnet18 case (batch 1..64 on two slots, at most 1.5x ONNX Runtime's RSS):
    ... --model resnet18=build/bench-models/resnet18/model.onnx --input input
        --row-shape 3,224,224 --max-rows 64 --big 0 --sweeps-after 0 --ort-ratio 1.5
        --sweep-ceiling-mb 1000

Starts `replicad serve` on the embedded default model (image float32[N,1,28,28]) on two CPU
slots (`--devices cpu:0,cpu:0`), then sends Predict requests one at a time over replicad.v1:
    sweep 1     batch n for n = 1, 2, ..., --max-rows (a new slice size nearly every request)
    big         one batch of --big rows
    sweep 2     the sweep again
    sweep 3     and once more, to show whether the sweep's cost keeps growing
Before the first phase and after each it reads the daemon's VmRSS (/proc/PID/status); a
thread samples it every 50 ms as well, so the table shows each phase's peak next to what
stays. It also shows the plans the slots built (replicad_slot_plans_built_total): with the
plan cache bounded (--max-plans-per-slot, default 16) the sweep rebuilds them, and RSS must
not follow the number built.

ONNX Runtime runs the same phases on the same model (written by `replicad default-model`) in a
Python process of its own, when --ort-python has onnxruntime (default: .venv/bin/python, from
scripts/bench-venv.sh); its RSS after each phase (Python, numpy and onnxruntime included)
stands beside replicad's, and issue #36 asks replicad's after a sweep to be at most
--ort-ratio (2) times it.

Fails (exit 1) when a request fails, when the RSS after a sweep is over --sweep-ceiling-mb
(default 250 MB), when the RSS after any phase is over --ceiling-mb (default 1400 MB), when
the RSS after a later sweep is more than --flat-mb (default 60 MB) above the first sweep's,
or, with ONNX Runtime, when a sweep's RSS is over --ort-ratio times ONNX Runtime's. The
ceilings are what the default flags allow this model with some margin (two slots' arenas
for the largest slice, the plans of the slots' caches, a few idle gRPC buffers); docs/serving.md
(Scheduling, Memory) says what holds that memory, docs/benchmarks.md states the ceilings, and
benchmarks/RESULTS.md has what was measured.
CTest runs it (test batch_sweep_soak, without ONNX Runtime) with looser ceilings that leave
room for AVX-512 CPUs, where oneDNN's Winograd convolutions hold more (400 MB, 100 MB, 1.8 GB).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soak_common as common  # noqa: E402

PLAN_METRICS = ["replicad_slot_plans_built_total", "replicad_slot_plan_build_seconds_total"]

# The same phases through ONNX Runtime: argv model, then the batch sizes of each phase as
# JSON; prints {"idle": rss, "after": [rss per phase]}.
ORT_SCRIPT = r"""
import json, sys
import numpy as np
import onnxruntime as ort
def rss():
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status")
                if l.startswith("VmRSS:"))
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
name = session.get_inputs()[0].name
row_shape = tuple(json.loads(sys.argv[3]))
rng = np.random.default_rng(0)
result = {"idle": rss(), "after": []}
for phase in json.loads(sys.argv[2]):
    for rows in phase:
        session.run(None, {name: rng.standard_normal((rows, *row_shape), dtype=np.float32)})
    result["after"].append(rss())
print(json.dumps(result))
"""


def run_onnxruntime(python, phases, model_path, row_shape):
    """ONNX Runtime's RSS after each phase (see ORT_SCRIPT) on `model_path` (empty: the
    default model, exported), or None without onnxruntime."""
    if not python or not os.access(python, os.X_OK):
        return None
    if subprocess.run([python, "-c", "import onnxruntime"], capture_output=True).returncode:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        model = model_path or os.path.join(tmp, "default.onnx")
        if not model_path:
            subprocess.run([os.path.join(os.environ["REPLICAD_BIN_DIR"], "replicad"),
                            "default-model", "--output", model], check=True, capture_output=True)
        proc = subprocess.run([python, "-c", ORT_SCRIPT, model, json.dumps(phases),
                               json.dumps(list(row_shape))],
                              capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError("onnxruntime failed: " + proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


class RssSampler:
    """Samples a process's VmRSS every `period` seconds; peak() since the last reset()."""

    def __init__(self, pid, period=0.05):
        self.pid, self.period = pid, period
        self.lock = threading.Lock()
        self.max = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.done.wait(self.period):
            value = common.rss_bytes(self.pid)
            with self.lock:
                self.max = max(self.max, value)

    def reset(self):
        with self.lock:
            self.max = common.rss_bytes(self.pid)

    def peak(self):
        with self.lock:
            return max(self.max, common.rss_bytes(self.pid))

    def stop(self):
        self.done.set()
        self.thread.join()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-rows", type=int, default=300, help="each sweep: batch 1..N")
    parser.add_argument("--big", type=int, default=8000,
                        help="rows of the one big batch (0: none)")
    parser.add_argument("--model", default="",
                        help="NAME=PATH of another model (float32 input of --row-shape)")
    parser.add_argument("--input", default="image", help="the model's input")
    parser.add_argument("--row-shape", default="1,28,28", help="one row of that input")
    parser.add_argument("--sweeps-after", type=int, default=2,
                        help="sweeps after the big batch (the issue asks for one)")
    parser.add_argument("--sweep-ceiling-mb", type=float, default=250,
                        help="largest RSS allowed after a sweep (MB, 10^6 bytes)")
    parser.add_argument("--ceiling-mb", type=float, default=1400,
                        help="largest RSS allowed after any phase, the big batch's included (MB)")
    parser.add_argument("--flat-mb", type=float, default=60,
                        help="most a later sweep's RSS may exceed the first sweep's (MB)")
    parser.add_argument("--ort-python", default=os.path.join(common.ROOT, ".venv", "bin", "python"),
                        help="a Python with onnxruntime, for the ONNX Runtime column ('' skips)")
    parser.add_argument("--ort-ratio", type=float, default=2.0,
                        help="largest replicad / ONNX Runtime RSS ratio allowed after a sweep")
    parser.add_argument("serve_flags", nargs="*", help="extra replicad serve flags (after --)")
    args = parser.parse_args()

    import grpc
    pb2, pb2_grpc = common.load_stubs()
    model_name, _, model_path = args.model.partition("=")
    model_name = model_name or "default"
    row_shape = tuple(int(d) for d in args.row_shape.split(","))
    flags = ["--devices", "cpu:0,cpu:0", *(["--model", args.model] if args.model else []),
             *args.serve_flags]
    daemon = common.start_daemon(*flags)
    failures = []
    rows_out = []
    try:
        pid = daemon.process.pid
        channel = grpc.insecure_channel(f"127.0.0.1:{daemon.port}", options=[
            ("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)])
        stub = pb2_grpc.ReplicadStub(channel)
        rng = np.random.default_rng(0)
        sampler = RssSampler(pid)

        split = ""  # How the one big batch was split over the slots.

        def phase(name, batches):
            nonlocal split
            before = common.metric_sums(daemon, PLAN_METRICS)
            sampler.reset()
            begin = time.monotonic()
            for rows in batches:
                try:
                    response = stub.Predict(
                        common.predict_request(pb2, rows, rng, model_name, args.input, row_shape),
                        timeout=300)
                    if len(batches) == 1:
                        split = " + ".join(f"{s.slot} {s.end - s.begin}" for s in response.slices)
                    if response.outputs[0].shape[0] != rows:
                        failures.append(f"{name}: batch {rows}: {response.outputs[0].shape[0]} "
                                        "rows back")
                except grpc.RpcError as error:
                    failures.append(f"{name}: batch {rows}: {error.code().name} "
                                    f"{error.details()[:200]}")
            seconds = time.monotonic() - begin
            after = common.metric_sums(daemon, PLAN_METRICS)
            built = after[PLAN_METRICS[0]] - before[PLAN_METRICS[0]]
            build_s = after[PLAN_METRICS[1]] - before[PLAN_METRICS[1]]
            rows_out.append((name, len(batches), seconds, built, build_s, sampler.peak(),
                             common.rss_bytes(pid)))
            common.log(f"  {name}: {len(batches)} requests in {seconds:.1f} s, RSS "
                       f"{common.mb(rows_out[-1][-1])}")

        sweep = list(range(1, args.max_rows + 1))
        idle = common.rss_bytes(pid)
        phase("sweep 1", sweep)
        if args.big > 0:
            phase(f"batch {args.big}", [args.big])
        for i in range(args.sweeps_after):
            phase(f"sweep {i + 2}", sweep)
        sampler.stop()
        channel.close()
        peak_hwm = None
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    peak_hwm = int(line.split()[1]) * 1024
    finally:
        daemon.stop()
    ort = run_onnxruntime(args.ort_python,
                          [sweep] + ([[args.big]] if args.big > 0 else [])
                          + [sweep] * args.sweeps_after, model_path, row_shape)

    print(f"\nbatch-size sweep: {model_name} model, replicad serve {' '.join(flags)}")
    print(f"machine: {common.machine_line()}; commit {common.git_commit()}")
    print(f"{'phase':>11} {'requests':>8} {'seconds':>8} {'plans built':>11} {'build s':>8} "
          f"{'peak RSS':>9} {'RSS after':>9}" + (f" {'ORT after':>9} {'ratio':>6}" if ort else ""))
    print(f"{'idle':>11} {'':>8} {'':>8} {'':>11} {'':>8} {'':>9} {common.mb(idle):>9}"
          + (f" {common.mb(ort['idle']):>9}" if ort else ""))
    ratios = []
    for i, (name, count, seconds, built, build_s, peak, after) in enumerate(rows_out):
        line = (f"{name:>11} {count:>8} {seconds:>8.1f} {built:>11.0f} {build_s:>8.2f} "
                f"{common.mb(peak):>9} {common.mb(after):>9}")
        if ort:
            ratio = after / ort["after"][i]
            if name.startswith("sweep"):
                ratios.append(ratio)
            line += f" {common.mb(ort['after'][i]):>9} {ratio:>5.2f}x"
        print(line)
    print(f"VmHWM (the daemon's peak over the run): {common.mb(peak_hwm)}"
          + (f"; the batch of {args.big} ran as {split or '?'} rows" if args.big > 0 else ""))
    if not ort:
        print("ONNX Runtime not run: " + (f"{args.ort_python} has no onnxruntime"
                                          if args.ort_python else "--ort-python is empty"))
    sweeps = [r[-1] for r in rows_out if r[0].startswith("sweep")]
    worst = max(r[-1] for r in rows_out)
    worst_sweep = max(sweeps)
    growth = max(sweeps) - sweeps[0]
    ok = (not failures and worst <= args.ceiling_mb * 1e6
          and worst_sweep <= args.sweep_ceiling_mb * 1e6 and growth <= args.flat_mb * 1e6
          and all(r <= args.ort_ratio for r in ratios))
    for failure in failures[:10]:
        print(f"failed: {failure}")
    if len(failures) > 10:
        print(f"... and {len(failures) - 10} more failed requests")
    print(f"largest RSS after a sweep {common.mb(worst_sweep)} (ceiling "
          f"{args.sweep_ceiling_mb:.0f} MB), {common.mb(growth)} above the first sweep's "
          f"(at most {args.flat_mb:.0f} MB)"
          + (f", at most {max(ratios):.2f}x ONNX Runtime's (at most {args.ort_ratio:g}x)"
             if ratios else "")
          + f"; after any phase {common.mb(worst)} (ceiling {args.ceiling_mb:.0f} MB); failed "
          f"requests {len(failures)}: {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
