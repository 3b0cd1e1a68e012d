"""The per-model scheduler's routing: large batches split or whole, and small requests under load.

Run with:
    bash scripts/triton-venv.sh && bash scripts/build.sh
    .venv-triton/bin/python benchmarks/scheduler_bench.py [--only split|mixed|plans]
        [--large-batch 128] [--requests 3] [--resnet18 PATH]
        [--seconds 10] [--unloaded-seconds 2] [--small-clients 8] [--big-batch 64]
        [-- extra replicad serve flags]

split: resnet18 (torchvision, weights=None, exported with Debian's /usr/bin/python3 by
tests/parity/export_torch_models.py into build/parity_fixtures, cached there), one request of
--large-batch rows at a time, --requests timed after one warm-up, on three daemons:
    auto   --devices cpu:0,cpu:0 --slot-weights auto   the scheduler chooses whole or split
    whole  --devices cpu:0                             one slot: every batch runs whole
    split  --devices cpu:0,cpu:0 --slot-weights 1,1    fixed weights: every batch is split
The slices of each request are read from the daemon's /metrics (which slots' counter
replicad_slot_samples_total grew). The verdict says whether auto took the route (whole or
split) whose forced daemon was faster; a second line, whether auto's mean latency came
within 10% of that daemon's (a route that is right can still pay for plan builds of new
slice sizes, or shares that do not finish together).

mixed: the embedded default model (image float32[N,1,28,28]) on --devices cpu:0,cpu:0.
First, unloaded: one client sends batch-1 requests for --unloaded-seconds (its p99), then
batch-64 requests for as long (their latency stands for "one slice time"). Then, for
--seconds, one client loops batch-64 requests while --small-clients clients loop batch-1
requests, each client its own process and gRPC channel (no GIL between them). The verdict:
batch-1 p99 under load <= 2 x unloaded batch-1 p99 + unloaded batch-64 latency.
Clients and daemon share the machine's cores: the CPU columns say how much the clients took.

plans: resnet18 on --devices cpu:0,cpu:0. The plans the warm-up built and their time
(replicad_slot_plans_built_total, replicad_slot_plan_build_seconds_total), then for requests
of slice sizes the warm-up did not build (3, 5, 6, 7, 9, 10 rows): the plans built and their
time, and, sent 10 ms after each, a batch-1 request with a 30 ms queue timeout (Triton's
`timeout` parameter): when its answer came. A scheduler that waits for a build answers it late.
"""

import argparse
import multiprocessing
import os
import re
import subprocess
import sys
import time
import urllib.request

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "testing"))
from replicad_daemon import Daemon  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------- helpers

def log(message):
    print(message, file=sys.stderr, flush=True)


def percentile(values, q):
    return float(np.percentile(values, q)) if values else float("nan")


def ms(seconds):
    return f"{seconds * 1e3:.2f}"


def metrics_port(daemon):
    for line in daemon.output:
        match = re.search(r"metrics on port (\d+)", line)
        if match:
            return int(match.group(1))
    raise RuntimeError("no metrics port in the daemon's output:\n" + "".join(daemon.output))


def slot_counters(daemon, model, name="replicad_slot_samples_total"):
    """{slot: value} of a per-slot counter of `model` from the daemon's /metrics."""
    url = f"http://127.0.0.1:{metrics_port(daemon)}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    counters = {}
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        labels, value = line[len(name) + 1:].rsplit("} ", 1)
        fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if fields.get("model") == model:
            counters[fields["slot"]] = float(value)
    return counters


def delta(before, after):
    return {slot: after[slot] - before.get(slot, 0.0) for slot in after}


def cpu_seconds(pid):
    """utime + stime of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def warn_if_busy():
    """Other benchmarks on this machine would skew every number: say so."""
    for pattern in ("perf_analyzer", "replicad serve"):
        found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
        if found.split():
            log(f"warning: '{pattern}' already running (pid {' '.join(found.split())}); "
                "timings will be skewed")


def start(model_flags, *flags):
    os.environ.setdefault("REPLICAD_BIN_DIR", os.path.join(ROOT, "build", "bin"))
    daemon = Daemon(*model_flags, *flags)
    log(f"replicad serve {' '.join(model_flags + list(flags))}: gRPC port {daemon.port}")
    return daemon


def make_inputs(client, model, batch, seed=0):
    """[InferInput] of `batch` rows for every input, from the model's metadata (dims -1: batch
    first, 1 elsewhere)."""
    import tritonclient.grpc as grpcclient
    metadata = client.get_model_metadata(model)
    rng = np.random.default_rng(seed)
    inputs = []
    for spec in metadata.inputs:
        shape = [batch] + [d if d > 0 else 1 for d in spec.shape[1:]]
        if spec.datatype != "FP32":
            raise RuntimeError(f"{model}: input {spec.name} is {spec.datatype}, not FP32")
        tensor = grpcclient.InferInput(spec.name, shape, "FP32")
        tensor.set_data_from_numpy(rng.standard_normal(shape, dtype=np.float32))
        inputs.append(tensor)
    return inputs


def timed_loop(client, model, inputs, seconds=None, count=None):
    """Sends requests one after the other for `seconds` or `count` requests; returns
    (latencies in seconds, number of failures, first failure messages)."""
    latencies, failures, messages = [], 0, []
    end = time.perf_counter() + seconds if seconds is not None else None
    while (end is None or time.perf_counter() < end) and (count is None or
                                                          len(latencies) + failures < count):
        begin = time.perf_counter()
        try:
            client.infer(model, inputs)
            latencies.append(time.perf_counter() - begin)
        except Exception as e:  # noqa: BLE001 (reported, not fatal)
            failures += 1
            if len(messages) < 3:
                messages.append(str(e).strip()[:300])
    return latencies, failures, messages


def report_failures(what, failures, messages):
    if failures:
        print(f"  {what}: {failures} failed requests; first: {' | '.join(messages)}")


# ---------------------------------------------------------------- split vs whole

def resnet18_path(args):
    if args.resnet18:
        return args.resnet18
    out_dir = os.path.join(ROOT, "build", "parity_fixtures")
    log(f"exporting resnet18 into {out_dir} (cached when up to date)")
    run = subprocess.run(["/usr/bin/python3",
                          os.path.join(ROOT, "tests", "parity", "export_torch_models.py"),
                          out_dir, "--models", "resnet18"], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit("resnet18 export failed:\n" + run.stdout + run.stderr)
    return os.path.join(out_dir, "resnet18", "model.onnx")


def plan_builds(args):
    import threading
    import tritonclient.grpc as grpcclient
    path = resnet18_path(args)
    daemon = start(["--model", f"resnet18={path}"], "--devices", "cpu:0,cpu:0", *args.serve_flags)
    try:
        def built():
            counts = slot_counters(daemon, "resnet18", "replicad_slot_plans_built_total")
            seconds = slot_counters(daemon, "resnet18", "replicad_slot_plan_build_seconds_total")
            return sum(counts.values()), sum(seconds.values())
        warm_plans, warm_seconds = built()
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{daemon.port}")
        one = make_inputs(client, "resnet18", 1)
        timed_loop(client, "resnet18", one, count=3)
        rows_out = []
        for rows in (3, 5, 6, 7, 9, 10):
            big = make_inputs(client, "resnet18", rows, seed=rows)
            before = built()
            other = grpcclient.InferenceServerClient(f"127.0.0.1:{daemon.port}")
            sender = threading.Thread(target=lambda: other.infer("resnet18", big))
            sender.start()
            time.sleep(0.01)
            start_time = time.perf_counter()
            try:
                client.infer("resnet18", one, timeout=30000)
                answer = "ran"
            except Exception as error:  # The queue timeout: DEADLINE_EXCEEDED.
                answer = "timed out" if "DEADLINE" in str(error).upper() else str(error)[:40]
            waited = time.perf_counter() - start_time
            sender.join()
            after = built()
            rows_out.append((rows, after[0] - before[0], after[1] - before[1], answer, waited))
        client.close()
    finally:
        daemon.stop()
    print(f"\nplan builds: resnet18, --devices cpu:0,cpu:0; warm-up built {warm_plans:.0f} plans "
          f"in {warm_seconds:.2f} s")
    print(f"{'rows':>5} {'plans':>6} {'build ms':>9} {'batch-1 (30 ms timeout)':>24} {'after ms':>9}")
    for rows, plans, seconds, answer, waited in rows_out:
        print(f"{rows:>5} {plans:>6.0f} {seconds * 1e3:>9.1f} {answer:>24} {waited * 1e3:>9.1f}")


def split_vs_whole(args):
    import tritonclient.grpc as grpcclient
    path = resnet18_path(args)
    model_flags = ["--model", f"resnet18={path}"]
    cases = [("auto", ["--devices", "cpu:0,cpu:0", "--slot-weights", "auto"]),
             ("whole", ["--devices", "cpu:0"]),
             ("split", ["--devices", "cpu:0,cpu:0", "--slot-weights", "1,1"])]
    rows = {}
    for name, flags in cases:
        daemon = start(model_flags, *flags, *args.serve_flags)
        try:
            client = grpcclient.InferenceServerClient(f"127.0.0.1:{daemon.port}")
            inputs = make_inputs(client, "resnet18", args.large_batch)
            log(f"  {name}: warm-up, then {args.requests} requests of {args.large_batch} rows")
            timed_loop(client, "resnet18", inputs, count=1)
            latencies, slices, shares, failures, messages = [], [], [], 0, []
            for _ in range(args.requests):
                before = slot_counters(daemon, "resnet18")
                lat, failed, msgs = timed_loop(client, "resnet18", inputs, count=1)
                rows_per_slot = delta(before, slot_counters(daemon, "resnet18"))
                latencies += lat
                failures += failed
                messages += msgs
                if lat:
                    ran = sorted((r for r in rows_per_slot.values() if r > 0), reverse=True)
                    slices.append(len(ran))
                    shares.append("/".join(str(int(r)) for r in ran) + f" {lat[0]:.2f}s")
            client.close()
        finally:
            daemon.stop()
        rows[name] = {"latencies": latencies, "slices": slices, "shares": shares,
                      "failures": failures, "messages": messages}

    print(f"\nsplit vs whole: resnet18 batch {args.large_batch}, {args.requests} requests "
          f"after 1 warm-up, one at a time; flags {' '.join(args.serve_flags) or '-'}")
    print(f"{'daemon':>6} {'mean s':>8} {'min s':>8} {'max s':>8} {'slices':>7}  "
          f"each request: rows per slot, latency")
    for name, r in rows.items():
        lat = r["latencies"]
        if not lat:
            print(f"{name:>6} {'failed':>8}")
            continue
        slices = ",".join(str(s) for s in r["slices"])
        shares = " ".join(r["shares"])
        print(f"{name:>6} {np.mean(lat):>8.3f} {min(lat):>8.3f} {max(lat):>8.3f} "
              f"{slices:>7}  {shares}")
    for name, r in rows.items():
        report_failures(name, r["failures"], r["messages"])
    if not all(rows[n]["latencies"] for n in rows):
        print("auto chose the faster: unknown (failed requests)")
        return
    whole, split = np.mean(rows["whole"]["latencies"]), np.mean(rows["split"]["latencies"])
    faster = "split" if split < whole else "whole"
    auto_slices = rows["auto"]["slices"]
    chose = {"whole" if s == 1 else "split" for s in auto_slices}
    choice = chose.pop() if len(chose) == 1 else "mixed"
    auto = np.mean(rows["auto"]["latencies"])
    print(f"auto routed: {choice} (slices {','.join(map(str, auto_slices))}); faster forced: "
          f"{faster} ({min(whole, split):.3f} s vs {max(whole, split):.3f} s, "
          f"{max(whole, split) / min(whole, split):.2f}x); auto {auto:.3f} s = "
          f"{auto / min(whole, split):.2f}x the faster")
    print(f"auto chose the faster: {'yes' if choice == faster else 'no'}")
    print(f"auto within 10% of the faster's latency: "
          f"{'yes' if auto <= 1.1 * min(whole, split) else 'no'}")


# ---------------------------------------------------------------- mixed load

def load_client(port, model, batch, seed, seconds, barrier, results):
    """One load client (its own process and channel): warms up, waits for the others, loops."""
    import tritonclient.grpc as grpcclient
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    inputs = make_inputs(client, model, batch, seed)
    timed_loop(client, model, inputs, count=1)
    barrier.wait()
    cpu = time.process_time()
    latencies, failures, messages = timed_loop(client, model, inputs, seconds=seconds)
    results.put((batch, latencies, failures, messages, time.process_time() - cpu))
    client.close()


def run_load(daemon, model, clients, seconds, probe):
    """Runs `clients` [(batch, count)] at once for `seconds`; returns ({batch: [latencies]},
    {batch: (failures, messages)}, client CPU seconds, {key: probe() after - before})."""
    context = multiprocessing.get_context("spawn")  # No fork of a process that holds gRPC.
    total = sum(count for _, count in clients)
    barrier = context.Barrier(total + 1)
    results = context.Queue()
    processes = []
    seed = 0
    for batch, count in clients:
        for _ in range(count):
            seed += 1
            processes.append(context.Process(
                target=load_client,
                args=(daemon.port, model, batch, seed, seconds, barrier, results)))
    for p in processes:
        p.start()
    barrier.wait(timeout=120)
    before = probe()
    latencies, failures, client_cpu = {}, {}, 0.0
    for _ in processes:
        batch, lat, failed, messages, cpu = results.get(timeout=seconds + 300)
        latencies.setdefault(batch, []).extend(lat)
        count, first = failures.get(batch, (0, []))
        failures[batch] = (count + failed, (first + messages)[:3])
        client_cpu += cpu
    after = probe()
    for p in processes:
        p.join()
    return latencies, failures, client_cpu, {k: after[k] - before[k] for k in after}


def server_probe(daemon, client, model):
    """The daemon's CPU seconds and its ModelStatistics totals (ns) for `model`."""
    stats = client.get_inference_statistics(model).model_stats[0].inference_stats
    return {"cpu": cpu_seconds(daemon.process.pid), "requests": stats.success.count,
            "request_ns": stats.success.ns, "queue_ns": stats.queue.ns,
            "infer_ns": stats.compute_infer.ns}


def mixed_load(args):
    import tritonclient.grpc as grpcclient
    daemon = start([], "--devices", "cpu:0,cpu:0", *args.serve_flags)
    try:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{daemon.port}")
        metadata = client.get_model_metadata("default")
        spec = ", ".join(f"{i.name} {i.datatype}{list(i.shape)}" for i in metadata.inputs)
        log(f"  default model: {spec}")
        small = make_inputs(client, "default", 1)
        big = make_inputs(client, "default", args.big_batch)
        timed_loop(client, "default", small, count=20)
        timed_loop(client, "default", big, count=5)
        log(f"  unloaded: batch 1 for {args.unloaded_seconds} s, "
            f"batch {args.big_batch} for {args.unloaded_seconds} s")
        alone_small, failed_small, msgs_small = timed_loop(client, "default", small,
                                                           seconds=args.unloaded_seconds)
        before = slot_counters(daemon, "default")
        alone_big, failed_big, msgs_big = timed_loop(client, "default", big,
                                                     seconds=args.unloaded_seconds)
        rows_per_slot = delta(before, slot_counters(daemon, "default"))
        log(f"  loaded: 1 client of batch {args.big_batch} + {args.small_clients} of batch 1 "
            f"for {args.seconds} s")
        loaded, failures, client_cpu, server = run_load(
            daemon, "default", [(args.big_batch, 1), (1, args.small_clients)], args.seconds,
            lambda: server_probe(daemon, client, "default"))
        client.close()
    finally:
        daemon.stop()

    print(f"\nmixed load: default model, --devices cpu:0,cpu:0, flags "
          f"{' '.join(args.serve_flags) or '-'}; {os.cpu_count()} CPUs")
    print(f"{'phase':>8} {'batch':>5} {'clients':>7} {'requests':>8} {'req/s':>8} "
          f"{'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")

    def row(phase, batch, clients, lat, seconds):
        print(f"{phase:>8} {batch:>5} {clients:>7} {len(lat):>8} {len(lat) / seconds:>8.1f} "
              f"{ms(percentile(lat, 50)):>8} {ms(percentile(lat, 99)):>8} "
              f"{ms(max(lat) if lat else float('nan')):>8}")

    row("unloaded", 1, 1, alone_small, args.unloaded_seconds)
    row("unloaded", args.big_batch, 1, alone_big, args.unloaded_seconds)
    row("loaded", 1, args.small_clients, loaded.get(1, []), args.seconds)
    row("loaded", args.big_batch, 1, loaded.get(args.big_batch, []), args.seconds)
    big_rows = sum(rows_per_slot.values())
    split = " / ".join(f"{slot} {r / big_rows:.0%}" for slot, r in sorted(rows_per_slot.items())
                       if big_rows)
    print(f"unloaded batch-{args.big_batch} rows per slot: {split or '-'}")
    print(f"CPU while loaded: clients {client_cpu / args.seconds:.2f} cores, daemon "
          f"{server['cpu'] / args.seconds:.2f} cores (of {os.cpu_count()})")
    if server["requests"]:
        n = server["requests"]
        print(f"daemon's view while loaded (ModelStatistics, all {n} requests): mean "
              f"{server['request_ns'] / n / 1e6:.2f} ms in the daemon, of which queue "
              f"{server['queue_ns'] / n / 1e6:.2f} ms, compute infer "
              f"{server['infer_ns'] / n / 1e6:.2f} ms")
    report_failures("unloaded batch 1", failed_small, msgs_small)
    report_failures(f"unloaded batch {args.big_batch}", failed_big, msgs_big)
    for batch, (count, messages) in failures.items():
        report_failures(f"loaded batch {batch}", count, messages)
    if not (alone_small and alone_big and loaded.get(1)):
        print("batch-1 p99 within bound: unknown (failed requests)")
        return
    p99_alone = percentile(alone_small, 99)
    slice_time = float(np.mean(alone_big))
    p99_loaded = percentile(loaded[1], 99)
    bound = 2 * p99_alone + slice_time
    print(f"bound: 2 x {ms(p99_alone)} ms (unloaded batch-1 p99) + {ms(slice_time)} ms "
          f"(unloaded batch-{args.big_batch} mean) = {ms(bound)} ms; loaded batch-1 p99 "
          f"{ms(p99_loaded)} ms = {p99_loaded / bound:.2f}x the bound")
    print(f"batch-1 p99 within bound: {'yes' if p99_loaded <= bound else 'no'}")


# ---------------------------------------------------------------- main

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=["split", "mixed", "plans"],
                        help="one section (default: all)")
    parser.add_argument("--large-batch", type=int, default=128, help="split: rows per request")
    parser.add_argument("--requests", type=int, default=3, help="split: timed requests per daemon")
    parser.add_argument("--resnet18", default="", help="split: resnet18 ONNX (default: export)")
    parser.add_argument("--seconds", type=float, default=10, help="mixed: loaded phase")
    parser.add_argument("--unloaded-seconds", type=float, default=2,
                        help="mixed: each unloaded phase")
    parser.add_argument("--small-clients", type=int, default=8, help="mixed: batch-1 clients")
    parser.add_argument("--big-batch", type=int, default=64, help="mixed: the large client's batch")
    parser.add_argument("serve_flags", nargs="*", help="extra replicad serve flags (after --)")
    args = parser.parse_args()
    binary = os.path.join(os.environ.get("REPLICAD_BIN_DIR", os.path.join(ROOT, "build", "bin")),
                          "replicad")
    if not os.access(binary, os.X_OK):
        parser.error(f"{binary} is missing: run scripts/build.sh first")
    warn_if_busy()
    if args.only in (None, "split"):
        split_vs_whole(args)
    if args.only in (None, "mixed"):
        mixed_load(args)
    if args.only in (None, "plans"):
        plan_builds(args)


if __name__ == "__main__":
    main()
