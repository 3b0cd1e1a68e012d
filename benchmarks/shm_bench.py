"""ModelInfer through system shared memory vs raw gRPC bytes vs in-process (issue #18).

Starts `replicad serve --system-shared-memory` on --model, times --iterations
ModelInfer calls with (a) input and output in registered POSIX shared memory
(registered and filled once, as the in-process bench pre-builds its tensors) and
(b) the input as raw_input_contents, then runs model_forward_bench for the
in-process Predict time, and prints medians and ratios as a markdown table.

  .venv-triton/bin/python benchmarks/shm_bench.py \\
      --model build/bench_models/resnet18/model.onnx --batch 32 --iterations 10
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_daemon import ReplicadDaemon  # noqa: E402
from bench_report import time_passes  # noqa: E402


def timed(call, iterations, warmup):
    return time_passes(call, warmup, iterations)["median_ms"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="ONNX file with input float32[N,...]")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--devices", default="cpu:0", help="replicad serve --devices")
    parser.add_argument("--threads", type=int, default=2, help="--threads-per-slot")
    parser.add_argument("--build", default="build")
    args = parser.parse_args()

    daemon = ReplicadDaemon(os.path.join(args.build, "bin", "replicad"),
                            ["--model", f"m={args.model}", "--devices", args.devices,
                             "--threads-per-slot", str(args.threads), "--system-shared-memory"])
    failure = daemon.start()
    if failure:
        sys.exit(failure)
    regions = []
    try:
        client = grpcclient.InferenceServerClient(daemon.address)
        meta = client.get_model_metadata("m")
        feed, fetch = meta.inputs[0], meta.outputs[0]
        in_shape = [args.batch] + [int(d) for d in feed.shape[1:]]
        out_shape = [args.batch] + [int(d) for d in fetch.shape[1:]]
        x = np.random.default_rng(0).standard_normal(in_shape, dtype=np.float32)
        out_bytes = int(np.prod(out_shape)) * 4

        # (a) Shared memory: registered and filled once.
        key_in, key_out = f"/shm_bench_in_{os.getpid()}", f"/shm_bench_out_{os.getpid()}"
        regions = [shm.create_shared_memory_region("in", key_in, x.nbytes),
                   shm.create_shared_memory_region("out", key_out, out_bytes)]
        shm.set_shared_memory_region(regions[0], [x])
        client.register_system_shared_memory("in", key_in, x.nbytes)
        client.register_system_shared_memory("out", key_out, out_bytes)
        shm_inputs = [grpcclient.InferInput(feed.name, in_shape, "FP32")]
        shm_inputs[0].set_shared_memory("in", x.nbytes)
        shm_outputs = [grpcclient.InferRequestedOutput(fetch.name)]
        shm_outputs[0].set_shared_memory("out", out_bytes)
        shm_ms = timed(lambda: client.infer("m", shm_inputs, outputs=shm_outputs),
                       args.iterations, args.warmup)

        # (b) The input's bytes in the request (raw_input_contents).
        raw_inputs = [grpcclient.InferInput(feed.name, in_shape, "FP32")]
        raw_inputs[0].set_data_from_numpy(x)
        raw_outputs = [grpcclient.InferRequestedOutput(fetch.name)]
        grpc_ms = timed(lambda: client.infer("m", raw_inputs, outputs=raw_outputs),
                        args.iterations, args.warmup)

        # Both ways give the same answer.
        shm_y = shm.get_contents_as_numpy(regions[1], np.float32, out_shape)
        raw_y = client.infer("m", raw_inputs, outputs=raw_outputs).as_numpy(fetch.name)
        same = bool(np.allclose(shm_y, raw_y, rtol=1e-4, atol=1e-4))
        client.unregister_system_shared_memory()
    finally:
        daemon.stop()
        for region in regions:
            shm.destroy_shared_memory_region(region)

    # In-process, in the same run (the daemon is stopped, so it has the CPUs).
    bench = subprocess.run(
        [os.path.join(args.build, "benchmarks", "model_forward_bench"), "--model", args.model,
         "--batch", str(args.batch), "--threads", str(args.threads), "--iterations",
         str(args.iterations), "--warmup", str(args.warmup), "--json"],
        check=True, capture_output=True, text=True).stdout
    line = next(l for l in bench.splitlines() if l.startswith("json: "))
    local_ms = json.loads(line[len("json: "):])["predict"]["median_ms"]

    print(f"{os.path.basename(os.path.dirname(args.model)) or args.model}, batch {args.batch}, "
          f"input {x.nbytes / 1e6:.2f} MB, {args.iterations} iterations, devices {args.devices}, "
          f"{args.threads} threads; shm and gRPC answers agree: {same}\n")
    print("| path | median ms | / in-process |")
    print("|---|---:|---:|")
    print(f"| in-process Predict (model_forward_bench) | {local_ms:.2f} | 1.000 |")
    print(f"| ModelInfer, system shared memory | {shm_ms:.2f} | {shm_ms / local_ms:.3f} |")
    print(f"| ModelInfer, raw_input_contents | {grpc_ms:.2f} | {grpc_ms / local_ms:.3f} |")


if __name__ == "__main__":
    main()
