"""Open Inference Protocol load through perf_analyzer, Triton's own load generator.

Run with:
    bash scripts/triton-venv.sh && bash scripts/build.sh
    .venv-triton/bin/python benchmarks/perf_analyzer_bench.py [--devices cpu:0,cpu:0]
        [--batch 1] [--concurrency 1:8:1] [--window-ms 3000] [--protocol grpc,http]

Starts `replicad serve` on the embedded default model, runs perf_analyzer over each protocol
(gRPC, and HTTP with binary tensors) at each concurrency, one after the other against the same
daemon, and prints one row per protocol and concurrency: client throughput, p50/p99 latency,
and the server's own split of a request's time (queue, compute infer) from ModelStatistics.
"""

import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "testing"))
from replicad_daemon import Daemon  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", default="cpu:0,cpu:0")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--concurrency", default="1:8:1")
    parser.add_argument("--window-ms", type=int, default=3000)
    parser.add_argument("--protocol", default="grpc,http")
    args = parser.parse_args()
    os.environ.setdefault("REPLICAD_BIN_DIR", os.path.join(ROOT, "build", "bin"))
    daemon = Daemon("--devices", args.devices)
    try:
        runs = {protocol: perf_analyzer(daemon, protocol, args)
                for protocol in args.protocol.split(",")}
    finally:
        daemon.stop()
    print(f"replicad default model, devices {args.devices}, batch {args.batch}")
    print(f"{'proto':>5} {'conc':>4} {'infer/s':>10} {'p50 us':>8} {'p99 us':>8} "
          f"{'queue us':>9} {'infer us':>9}")
    for protocol, out in runs.items():
        for block in out.split("Request concurrency: ")[1:]:
            concurrency = int(block.split()[0])
            throughput = float(re.search(r"Throughput: ([\d.]+) infer/sec", block).group(1))
            p50 = int(re.search(r"p50 latency: (\d+) usec", block).group(1))
            p99 = int(re.search(r"p99 latency: (\d+) usec", block).group(1))
            server = re.search(r"queue (\d+) usec \+ compute input \d+ usec \+ compute infer (\d+)",
                               block)
            print(f"{protocol:>5} {concurrency:>4} {throughput:>10.1f} {p50:>8} {p99:>8} "
                  f"{server.group(1):>9} {server.group(2):>9}")


def perf_analyzer(daemon, protocol, args):
    port = daemon.port if protocol == "grpc" else daemon.http_port
    run = subprocess.run(
        [os.path.join(ROOT, ".venv-triton", "bin", "perf_analyzer"), "-m", "default",
         "-u", f"127.0.0.1:{port}", "-i", protocol, "-b", str(args.batch),
         "--concurrency-range", args.concurrency, "-p", str(args.window_ms),
         "--percentile", "99"],
        capture_output=True, text=True, timeout=1800)
    if run.returncode != 0:
        sys.exit(run.stdout + run.stderr)
    return run.stdout

if __name__ == "__main__":
    main()
