"""Where the CPU goes while perf_analyzer loads the daemon: cores busy per process and per thread.

Run with:
    bash scripts/triton-venv.sh && bash scripts/build.sh
    .venv-triton/bin/python benchmarks/thread_cpu_profile.py [--concurrency 16] [-- serve flags]

Starts `replicad serve --devices cpu:0,cpu:0` on the embedded default model (plus the flags
given, e.g. --no-dynamic-batching), runs perf_analyzer over gRPC at one concurrency, and after
4 s of warm-up reads /proc/PID/task/*/stat twice, 5 s apart: the cores perf_analyzer and the
daemon kept busy, the daemon's split by thread name, and perf_analyzer's throughput.
"""

import argparse
import collections
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "testing"))
from replicad_daemon import Daemon  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def thread_ticks(pid):
    ticks = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
        except OSError:
            continue  # The thread ended meanwhile.
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        ticks[tid] = (name, int(fields[11]) + int(fields[12]))  # utime + stime
    return ticks


def process_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read()
    fields = fields[fields.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("serve_flags", nargs="*")
    args = parser.parse_args()
    os.environ.setdefault("REPLICAD_BIN_DIR", os.path.join(ROOT, "build", "bin"))
    daemon = Daemon("--devices", "cpu:0,cpu:0", *args.serve_flags)
    try:
        load = subprocess.Popen(
            [os.path.join(ROOT, ".venv-triton", "bin", "perf_analyzer"), "-m", "default",
             "-u", f"127.0.0.1:{daemon.port}", "-i", "grpc",
             "--concurrency-range", str(args.concurrency), "-p", "3000"],
            stdout=subprocess.PIPE, text=True)
        time.sleep(4)
        start, before, load_before = time.time(), thread_ticks(daemon.process.pid), \
            process_ticks(load.pid)
        time.sleep(args.seconds)
        wall = time.time() - start
        after, load_after = thread_ticks(daemon.process.pid), process_ticks(load.pid)
        hz = os.sysconf("SC_CLK_TCK")
        by_name = collections.Counter()
        for tid, (name, ticks) in after.items():
            by_name[name] += (ticks - before.get(tid, (name, 0))[1]) / hz / wall
        out = load.communicate()[0]
    finally:
        daemon.stop()
    throughput = re.findall(r"Throughput: ([\d.]+) infer/sec", out)
    print(f"concurrency {args.concurrency}, flags {' '.join(args.serve_flags) or '-'}: "
          f"{throughput[-1] if throughput else '?'} infer/s")
    print(f"cores busy over {wall:.1f} s: perf_analyzer "
          f"{(load_after - load_before) / hz / wall:.2f}, replicad {sum(by_name.values()):.2f}")
    for name, cores in by_name.most_common(8):
        print(f"  {name:<20} {cores:.2f}")


if __name__ == "__main__":
    main()
