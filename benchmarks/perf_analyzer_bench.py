"""Open Inference Protocol load through perf_analyzer, Triton's own load generator.

Run with:
    bash scripts/triton-venv.sh && bash scripts/build.sh
    .venv-triton/bin/python benchmarks/perf_analyzer_bench.py [--devices cpu:0,cpu:0]
        [--batch 1] [--concurrency 1,4,16,64] [--window-ms 3000] [--protocol grpc,http]
        [--batching off,on] [--model NAME=PATH] [--input-data random|zero] [--floor]
        [--repeat N] [--perf-analyzer PATH] [--json FILE]
        [-- extra replicad serve flags]

For each dynamic-batching setting (`--no-dynamic-batching` / `--dynamic-batching`) starts
`replicad serve` on the embedded default model (or `--model`), runs perf_analyzer over each
protocol (gRPC, and HTTP with binary tensors) at each concurrency, one after the other against
the same daemon, and prints one row per setting, protocol and concurrency: client throughput,
p50/p99 latency, the server's own split of a request's time (queue, compute infer) from
ModelStatistics, and the mean rows per executed batch; then, per protocol and concurrency,
throughput with batching on over off.

With `--floor`, each gRPC run is followed by the same perf_analyzer run against
`grpc_floor_server` (benchmarks/), a server on the same gRPC library that answers from memory
what the daemon answered: its p50 is what the transport, the protocol and the load generator
cost on this machine by themselves, and "own us" (p50 - compute infer - floor p50) what
replicad adds to a request beside its compute.

`--json FILE` also writes the rows and the on/off throughput ratios as JSON
(benchmarks/compare_gpu.py reads its batching gain from there). On a GPU machine that runs a
bundle (scripts/gpu-check.sh), `--perf-analyzer` names the bundled binary and
REPLICAD_BENCH_LD_LIBRARY_PATH the libraries that it and replicad load (this script's own
interpreter keeps the machine's).
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "testing"))
from replicad_daemon import Daemon  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", default="cpu:0,cpu:0")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--concurrency", default="1,4,16,64")
    parser.add_argument("--window-ms", type=int, default=3000)
    parser.add_argument("--protocol", default="grpc,http")
    parser.add_argument("--batching", default="off,on")
    parser.add_argument("--model", default="", help="NAME=PATH (default: the embedded model)")
    parser.add_argument("--input-data", default="random",
                        help="perf_analyzer's --input-data: random (its default: random bytes, so "
                        "that float32 inputs hold NaNs and infinities) or zero")
    parser.add_argument("--floor", action="store_true",
                        help="also time grpc_floor_server after each gRPC run")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each row (with --floor, each followed by the floor's); "
                        "every column is the median of the runs': a 2-core VM's p50 wanders "
                        "by 100 us from one window to the next")
    parser.add_argument("--perf-analyzer",
                        default=os.path.join(ROOT, ".venv-triton", "bin", "perf_analyzer"))
    parser.add_argument("--json", help="also write the rows and ratios here")
    parser.add_argument("serve_flags", nargs="*")
    args = parser.parse_args()
    os.environ.setdefault("REPLICAD_BIN_DIR", os.path.join(ROOT, "build", "bin"))
    if os.environ.get("REPLICAD_BENCH_LD_LIBRARY_PATH"):
        # Read by the loader of the processes started from here, not by this one's.
        os.environ["LD_LIBRARY_PATH"] = os.environ["REPLICAD_BENCH_LD_LIBRARY_PATH"]
    name = args.model.split("=")[0] if args.model else "default"
    model_flags = ["--model", args.model] if args.model else []
    rows = {}
    for batching in args.batching.split(","):
        flag = "--dynamic-batching" if batching == "on" else "--no-dynamic-batching"
        daemon = Daemon("--devices", args.devices, flag, *model_flags, *args.serve_flags)
        floor = None
        try:
            for protocol in args.protocol.split(","):
                for concurrency in args.concurrency.split(","):
                    target = f"127.0.0.1:{daemon.port if protocol == 'grpc' else daemon.http_port}"
                    runs = []
                    for _ in range(args.repeat):
                        row = parse(perf_analyzer(target, name, protocol, int(concurrency), args))
                        if args.floor and protocol == "grpc":
                            if floor is None:
                                floor = FloorServer(daemon.port, name)
                            # Version 1 named: perf_analyzer finds it by the statistics'
                            # durations, which the floor leaves at 0.
                            row["floor"] = parse(perf_analyzer(floor.target, name, protocol,
                                                               int(concurrency), args,
                                                               ["-x", "1"]))["p50"]
                            row["own"] = row["p50"] - row["infer"] - row["floor"]
                        runs.append(row)
                    rows[(batching, protocol, int(concurrency))] = median_row(runs)
        finally:
            if floor is not None:
                floor.stop()
            daemon.stop()
    print(f"replicad {name} model, devices {args.devices}, batch {args.batch}, input data "
          f"{args.input_data}, flags {' '.join(args.serve_flags) or '-'}")
    print(f"{'batching':>8} {'proto':>5} {'conc':>4} {'infer/s':>10} {'p50 us':>8} "
          f"{'p99 us':>8} {'queue us':>9} {'infer us':>9} {'rows/exec':>9}"
          + (f" {'floor p50':>9} {'own us':>6}" if args.floor else ""))
    for (batching, protocol, concurrency), r in rows.items():
        line = (f"{batching:>8} {protocol:>5} {concurrency:>4} {r['throughput']:>10.1f} "
                f"{r['p50']:>8} {r['p99']:>8} {r['queue']:>9} {r['infer']:>9} "
                f"{r['rows_per_execution']:>9.2f}")
        if "floor" in r:
            line += f" {r['floor']:>9} {r['own']:>6}"
        print(line)
    gains = {}
    if {"on", "off"} <= set(args.batching.split(",")):
        print("throughput, batching on / off:")
        for protocol in args.protocol.split(","):
            for concurrency in args.concurrency.split(","):
                on = rows[("on", protocol, int(concurrency))]["throughput"]
                off = rows[("off", protocol, int(concurrency))]["throughput"]
                gains[f"{protocol} {concurrency}"] = on / off
                print(f"  {protocol:>5} conc {concurrency:>3}: {on / off:.2f}x")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"model": name, "devices": args.devices, "batch": args.batch,
                       "rows": [{"batching": b, "protocol": p, "concurrency": c, **r}
                                for (b, p, c), r in rows.items()],
                       "gain": gains}, out, indent=1)


def median_row(runs):
    """Each column's median over `runs` (one row per run)."""
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def parse(out):
    throughput = float(re.search(r"Throughput: ([\d.]+) infer/sec", out).group(1))
    p50 = int(re.search(r"p50 latency: (\d+) usec", out).group(1))
    p99 = int(re.search(r"p99 latency: (\d+) usec", out).group(1))
    server = re.search(r"queue (\d+) usec \+ compute input \d+ usec \+ compute infer (\d+)", out)
    inferences = int(re.search(r"Inference count: (\d+)", out).group(1))
    executions = int(re.search(r"Execution count: (\d+)", out).group(1))
    return {"throughput": throughput, "p50": p50, "p99": p99, "queue": int(server.group(1)),
            "infer": int(server.group(2)),
            "rows_per_execution": inferences / executions if executions else 0.0}


class FloorServer:
    """grpc_floor_server on a free port, answering what the daemon at `upstream_port` does."""

    def __init__(self, upstream_port, model):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        binary = os.path.join(ROOT, "build", "benchmarks", "grpc_floor_server")
        self.process = subprocess.Popen(
            [binary, "--port", str(port), "--upstream", f"127.0.0.1:{upstream_port}",
             "--model", model], stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        if not line.startswith("listening"):
            sys.exit(f"grpc_floor_server did not start: {line!r}")
        self.target = f"127.0.0.1:{port}"

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)


def perf_analyzer(target, model, protocol, concurrency, args, extra=()):
    run = subprocess.run(
        [args.perf_analyzer, "-m", model,
         "-u", target, "-i", protocol, "-b", str(args.batch), *extra,
         "--concurrency-range", str(concurrency), "-p", str(args.window_ms),
         # p99 over a 2-core machine shared with the load generator wanders more
         # than perf_analyzer's default 10% between windows.
         "-s", "25", "--max-trials", "20", "--input-data", args.input_data,
         "--percentile", "99"],
        capture_output=True, text=True, timeout=1800)
    if run.returncode != 0:
        sys.exit(run.stdout + run.stderr)
    return run.stdout

if __name__ == "__main__":
    main()
