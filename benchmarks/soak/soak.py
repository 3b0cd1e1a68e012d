"""Soak (issue #14): 64 Predict clients, a training client and a batch-size sweep for 60 s.

Run with:
    bash scripts/triton-venv.sh && bash scripts/build.sh
    .venv-triton/bin/python benchmarks/soak/soak.py [--seconds 60] [--clients 64]
        [--warmup-seconds 15] [--sweep-max 300] [--large 2000] [--train-batch 32]
        [--checkpoint-every 100] [--rss-tolerance 0.10] [-- extra replicad serve flags]

Starts `replicad serve` on the embedded default model (image float32[N,1,28,28] -> logits,
probabilities [N,10]) with two CPU slots (`--devices cpu:0,cpu:0`) and `--checkpoint-root` in
a temporary folder, and runs at once, for --seconds, over replicad.v1 (one gRPC channel each):
    predict  --clients clients, each looping Predict of a batch of 1-8 rows (random per
             request); each answer must have as many rows, and probabilities summing to 1
    train    ConfigureTraining (SGD, a checkpoint every --checkpoint-every steps), then
             TrainStep of --train-batch random images and labels in a loop
    sweep    Predict of one --large batch, then of 1, 2, ..., --sweep-max rows, again and again
The clients are asyncio coroutines in two processes (the predict clients) and one process
each (train, sweep), so the Python GIL of one does not pace the others.
The daemon's VmRSS (/proc/PID/status) is sampled every second.

Warm-up: the first --warmup-seconds, or until the sweep client has finished its first large
batch and its first full sweep, whichever is later: by then every slice size the run will use
has been seen, the plan caches (--max-plans-per-slot) are full and the slots' scratch buffers
have their largest size. Pass: no request failed (an error, or an answer with the wrong rows
or probabilities that do not sum to 1), the daemon is alive at the end, and no RSS sample after
warm-up is more than --rss-tolerance above the highest sample during warm-up (the peak, not the
last sample: one sample can fall between two large batches; a daemon that reuses its memory
never passes the peak it reached while seeing every size). Exit code 1 otherwise (2: the run
ended before warm-up did). The last lines are the daemon's own view from /metrics (batches,
plan builds and their time, training steps, refused requests), the profile to read when the
RSS grows.
"""

import argparse
import asyncio
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soak_common as common  # noqa: E402

DEADLINE_S = 120  # Per request: a hang is reported as DEADLINE_EXCEEDED, not waited out.
PROFILE_METRICS = [
    "replicad_slot_plans_built_total", "replicad_slot_plan_build_seconds_total",
    "replicad_batches_total", "replicad_batched_requests_total", "replicad_samples_total",
    "replicad_refused_requests_total", "replicad_train_steps_total",
    "replicad_slot_busy_seconds_total",
]


class Tally:
    """One client kind's results: latencies of the successes, failures by gRPC code."""

    def __init__(self):
        self.latencies = []
        self.errors = {}
        self.messages = {}

    def fail(self, code, message):
        self.errors[code] = self.errors.get(code, 0) + 1
        self.messages.setdefault(code, message[:300])

    def merge(self, other):
        self.latencies += other.latencies
        for code, count in other.errors.items():
            self.errors[code] = self.errors.get(code, 0) + count
            self.messages.setdefault(code, other.messages[code])


def channel_options():
    return [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


async def call(tally, method, request, check):
    """One RPC into `tally`; `check(response)` returns None or why the answer is wrong."""
    import grpc
    begin = time.perf_counter()
    try:
        response = await method(request, timeout=DEADLINE_S)
    except grpc.aio.AioRpcError as error:
        tally.fail(error.code().name, error.details() or "")
        return None
    latency = time.perf_counter() - begin
    wrong = check(response)
    if wrong:
        tally.fail("WRONG_ANSWER", wrong)
        return None
    tally.latencies.append(latency)
    return response


def prediction_check(rows):
    def check(response):
        if len(response.outputs) != 2:
            return f"{len(response.outputs)} outputs, not 2"
        for output in response.outputs:
            if list(output.shape) != [rows, 10] or len(output.raw) != rows * 40:
                return f"{output.name}: shape {list(output.shape)}, {len(output.raw)} bytes " \
                       f"for {rows} rows"
        sums = np.frombuffer(response.outputs[1].raw, np.float32).reshape(rows, 10).sum(axis=1)
        if not np.all(np.abs(sums - 1) < 1e-4):
            return f"probabilities sum to {sums.tolist()[:4]}"
        return None
    return check


async def predict_clients(port, count, seed, end_time):
    import grpc
    pb2, pb2_grpc = common.load_stubs()
    tally = Tally()

    async def client(index):
        rng = np.random.default_rng(seed * 1000 + index)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}",
                                             options=channel_options()) as channel:
            stub = pb2_grpc.ReplicadStub(channel)
            while time.time() < end_time:
                rows = int(rng.integers(1, 9))
                await call(tally, stub.Predict, common.predict_request(pb2, rows, rng),
                           prediction_check(rows))

    await asyncio.gather(*(client(i) for i in range(count)))
    return {"predict": tally}


async def train_client(port, args, end_time):
    import grpc
    pb2, pb2_grpc = common.load_stubs()
    tally = Tally()
    rng = np.random.default_rng(7)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}",
                                         options=channel_options()) as channel:
        stub = pb2_grpc.ReplicadStub(channel)
        config = pb2.TrainingConfig(
            optimizer=pb2.OptimizerConfig(kind=pb2.OPTIMIZER_SGD, learning_rate=0.01),
            checkpoint_every_steps=args.checkpoint_every, checkpoint_dir="soak")
        configured = await call(tally, stub.ConfigureTraining,
                                pb2.ConfigureTrainingRequest(model="default", config=config),
                                lambda response: None)
        if configured is None:
            return {"train": tally}
        rows = args.train_batch

        def check(response):
            if not np.isfinite(response.loss) or response.samples != rows:
                return f"loss {response.loss}, samples {response.samples}"
            error = getattr(response, "checkpoint_error", "")
            return f"checkpoint failed: {error}" if error else None

        while time.time() < end_time:
            request = pb2.TrainStepRequest(model="default",
                                           inputs=[common.image_tensor(pb2, rows, rng)])
            request.targets.name = "labels"
            request.targets.dtype = pb2.DATA_TYPE_INT64
            request.targets.shape.append(rows)
            request.targets.raw = rng.integers(0, 10, rows, dtype=np.int64).tobytes()
            await call(tally, stub.TrainStep, request, check)
    return {"train": tally}


async def sweep_client(port, args, end_time, events):
    """Large batch, then 1..sweep_max, repeated; `events` gets (time, what) at each cycle's
    milestones so the parent can tell when warm-up ended."""
    import grpc
    pb2, pb2_grpc = common.load_stubs()
    tallies = {"sweep": Tally(), "large": Tally()}
    rng = np.random.default_rng(11)
    cycle = 0
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}",
                                         options=channel_options()) as channel:
        stub = pb2_grpc.ReplicadStub(channel)
        while time.time() < end_time:
            cycle += 1
            await call(tallies["large"], stub.Predict,
                       common.predict_request(pb2, args.large, rng), prediction_check(args.large))
            for rows in range(1, args.sweep_max + 1):
                if time.time() >= end_time:
                    break
                await call(tallies["sweep"], stub.Predict, common.predict_request(pb2, rows, rng),
                           prediction_check(rows))
            else:
                events.put((time.time(), f"sweep cycle {cycle} done"))
    return tallies


def run_role(role, port, args, start_time, end_time, results, events, seed):
    """Entry point of one client process (spawned: no fork of a process that holds gRPC)."""
    common.load_stubs()
    time.sleep(max(0.0, start_time - time.time()))
    if role == "predict":  # Two processes: the first takes half the clients, the second the rest.
        count = args.clients // 2 if seed == 0 else args.clients - args.clients // 2
        coroutine = predict_clients(port, count, seed, end_time)
    elif role == "train":
        coroutine = train_client(port, args, end_time)
    else:
        coroutine = sweep_client(port, args, end_time, events)
    tallies = asyncio.run(coroutine)
    results.put({kind: (t.latencies, t.errors, t.messages) for kind, t in tallies.items()})


def sample_rss(pid, start_time, stop, samples):
    """[(seconds since start, VmRSS bytes)] every second until `stop` is set."""
    next_time = time.time()
    while not stop.is_set():
        try:
            samples.append((time.time() - start_time, common.rss_bytes(pid)))
        except (OSError, RuntimeError):
            return  # The daemon is gone: the clients' errors will say so.
        next_time += 1.0
        stop.wait(max(0.0, next_time - time.time()))


def percentile_ms(values, q):
    return f"{np.percentile(values, q) * 1e3:.1f}" if values else "-"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60, help="how long the clients run")
    parser.add_argument("--clients", type=int, default=64, help="Predict clients (batch 1-8)")
    parser.add_argument("--warmup-seconds", type=float, default=15,
                        help="warm-up lasts at least this long (see above)")
    parser.add_argument("--sweep-max", type=int, default=300, help="sweep: 1..N rows")
    parser.add_argument("--large", type=int, default=2000, help="sweep: the large batch's rows")
    parser.add_argument("--train-batch", type=int, default=32,
                        help="rows per TrainStep (0: no training client)")
    parser.add_argument("--checkpoint-every", type=int, default=100,
                        help="training: checkpoint_every_steps (0: none)")
    parser.add_argument("--rss-tolerance", type=float, default=0.10,
                        help="largest RSS growth after warm-up, as a fraction")
    parser.add_argument("serve_flags", nargs="*", help="extra replicad serve flags (after --)")
    args = parser.parse_args()

    checkpoint_root = tempfile.mkdtemp(prefix="replicad-soak-")
    # The daemon writes into checkpoint_dir but does not create it.
    os.mkdir(os.path.join(checkpoint_root, "soak"))
    flags = ["--devices", "cpu:0,cpu:0", "--checkpoint-root", checkpoint_root, *args.serve_flags]
    daemon = common.start_daemon(*flags)
    pid = daemon.process.pid
    context = multiprocessing.get_context("spawn")
    results, events = context.Queue(), context.Queue()
    samples, stop = [], threading.Event()
    tallies = {kind: Tally() for kind in ("predict", "train", "sweep", "large")}
    try:
        idle_rss = common.rss_bytes(pid)
        metrics_before = common.metric_sums(daemon, PROFILE_METRICS)
        # The clients start their loops at the same moment, a few seconds from now (spawned
        # interpreters take a while to import numpy and grpc on a busy machine).
        start_time = time.time() + 5
        end_time = start_time + args.seconds
        roles = [("predict", 0), ("predict", 1), ("sweep", 3)]
        if args.train_batch > 0:
            roles.append(("train", 2))
        processes = [context.Process(target=run_role, args=(role, daemon.port, args, start_time,
                                                            end_time, results, events, seed))
                     for role, seed in roles]
        for p in processes:
            p.start()
        time.sleep(max(0.0, start_time - time.time()))
        sampler = threading.Thread(target=sample_rss, args=(pid, start_time, stop, samples))
        sampler.start()
        common.log(f"  {args.clients} predict clients, 1 training client, 1 sweep client for "
                   f"{args.seconds:.0f} s")
        for _ in processes:
            for kind, (latencies, errors, messages) in results.get(
                    timeout=args.seconds + DEADLINE_S + 120).items():
                part = Tally()
                part.latencies, part.errors, part.messages = latencies, errors, messages
                tallies[kind].merge(part)
        for p in processes:
            p.join()
        stop.set()
        sampler.join()
        cycles = []
        while not events.empty():
            cycles.append(events.get())
        metrics_after = common.metric_sums(daemon, PROFILE_METRICS)
        alive = daemon.process.poll() is None
    finally:
        stop.set()
        daemon.stop()
        shutil.rmtree(checkpoint_root, ignore_errors=True)

    first_cycle = min((t for t, _ in cycles), default=None)
    warmup_end = max(args.warmup_seconds,
                     (first_cycle - start_time) if first_cycle else float("inf"))
    warm = [rss for t, rss in samples if t <= warmup_end]
    after = [rss for t, rss in samples if t > warmup_end]

    print(f"\nsoak: default model, replicad serve {' '.join(flags[:2] + flags[4:])} "
          f"--checkpoint-root TMP; {args.seconds:.0f} s")
    print(f"machine: {common.machine_line()}; commit {common.git_commit()}")
    print(f"clients: {args.clients} x Predict batch 1-8, 1 x TrainStep batch {args.train_batch} "
          f"(checkpoint every {args.checkpoint_every} steps), 1 x sweep (batch {args.large}, "
          f"then 1..{args.sweep_max}; {len(cycles)} full cycles)")
    print(f"{'client':>8} {'requests':>9} {'req/s':>8} {'errors':>7} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'max ms':>8}  errors by code")
    total_errors = 0
    for kind, t in tallies.items():
        errors = sum(t.errors.values())
        total_errors += errors
        by_code = ", ".join(f"{code} {n}" for code, n in sorted(t.errors.items())) or "-"
        print(f"{kind:>8} {len(t.latencies) + errors:>9} "
              f"{(len(t.latencies) + errors) / args.seconds:>8.1f} {errors:>7} "
              f"{percentile_ms(t.latencies, 50):>8} {percentile_ms(t.latencies, 99):>8} "
              f"{percentile_ms(t.latencies, 100):>8}  {by_code}")
    for kind, t in tallies.items():
        for code, message in t.messages.items():
            print(f"  first {kind} {code}: {message}")

    print(f"RSS: idle {common.mb(idle_rss)}; warm-up ended at {warmup_end:.0f} s "
          f"(first sweep cycle done at "
          f"{f'{first_cycle - start_time:.0f} s' if first_cycle else 'never'})")
    timeline = "  ".join(f"{t:.0f}s {rss / 1e6:.0f}" for t, rss in samples[::5])
    print(f"RSS timeline (MB, every 5 s): {timeline}")
    rss_ok = False
    if warm and after:
        at_end, warm_peak, peak, low = warm[-1], max(warm), max(after), min(after)
        rss_ok = peak <= warm_peak * (1 + args.rss_tolerance)
        print(f"{'RSS at warm-up end':>19} {'warm-up peak':>12} {'max after':>10} "
              f"{'min after':>10} {'max after / warm-up peak':>24}")
        print(f"{common.mb(at_end):>19} {common.mb(warm_peak):>12} {common.mb(peak):>10} "
              f"{common.mb(low):>10} {peak / warm_peak:>24.3f}")
    else:
        print("RSS after warm-up: no samples (the run ended before warm-up did: a longer "
              "--seconds, or a smaller --large / --sweep-max)")

    delta = {k: metrics_after[k] - metrics_before[k] for k in PROFILE_METRICS}
    print("daemon over the run (/metrics): "
          f"{delta['replicad_batches_total']:.0f} batches of "
          f"{delta['replicad_batched_requests_total']:.0f} requests, "
          f"{delta['replicad_samples_total']:.0f} rows; {delta['replicad_train_steps_total']:.0f} "
          f"train steps; {delta['replicad_slot_plans_built_total']:.0f} plans built "
          f"({delta['replicad_slot_plan_build_seconds_total']:.2f} s); slots busy "
          f"{delta['replicad_slot_busy_seconds_total']:.1f} s; refused "
          f"{delta['replicad_refused_requests_total']:.0f}; daemon "
          f"{'alive' if alive else 'DEAD'} at the end")
    ok = total_errors == 0 and rss_ok and alive
    print(f"0 errors: {'yes' if total_errors == 0 else 'no'}; RSS within "
          f"{args.rss_tolerance:.0%} of the warm-up peak: {'yes' if rss_ok else 'no'}: "
          f"{'PASS' if ok else 'FAIL'}")
    if not (warm and after):
        sys.exit(2)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
