#!/usr/bin/env python3
"""What the first request with a NaN costs a daemon in resident memory.

A convolution that runs as Winograd (AVX-512 CPUs) answers a request holding a NaN or an
infinity with a direct convolution, whose weights are laid out only when the first such request
comes (issue #36). This starts `replicad serve` on one model (a torchvision model exported by
tests/parity/export_torch_models.py), sends finite batches of 1 and 8 rows, reads VmRSS, sends
the same batches with a NaN in row 0 (checking that row 0's outputs are all NaN and row 1's
finite), and reads VmRSS again.

Usage: .venv-triton/bin/python benchmarks/non_finite_memory.py [--model resnet18]
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
sys.path.insert(0, os.path.join(ROOT, "tests", "parity"))

from bench_daemon import ReplicadDaemon  # noqa: E402
import export_torch_models as models  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402


def vm_rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--threads-per-slot", default="2")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "model.onnx")
        module, inputs, outputs = models.build_model(args.model)
        models.export_onnx(module, inputs, outputs, path)
        daemon = ReplicadDaemon(os.path.join(args.build, "bin", "replicad"),
                                ["--model", f"m={path}", "--devices", "cpu:0",
                                 "--threads-per-slot", args.threads_per_slot])
        error = daemon.start()
        if error is not None:
            sys.exit(error)
        try:
            client = grpcclient.InferenceServerClient(daemon.address)
            meta = client.get_model_metadata("m")
            name, output = meta.inputs[0].name, meta.outputs[0].name
            shape = [max(int(d), 1) for d in meta.inputs[0].shape]

            def infer(x):
                tensor = grpcclient.InferInput(name, list(x.shape), "FP32")
                tensor.set_data_from_numpy(x)
                return client.infer("m", [tensor]).as_numpy(output)

            rng = np.random.default_rng(0)
            batches = []
            for rows in (1, 8):
                shape[0] = rows
                batches.append(rng.random(shape, dtype=np.float32))
            for x in batches:
                for _ in range(3):
                    infer(x)
            time.sleep(3)  # The daemon hands freed memory back every 2 s.
            finite_rss = vm_rss_mib(daemon.proc.pid)
            for x in batches:
                with_nan = x.copy()
                with_nan.flat[0] = np.nan
                y = infer(with_nan)
                if not np.isnan(y[0]).all() or (len(y) > 1 and not np.isfinite(y[1]).all()):
                    sys.exit(f"batch of {len(y)}: row 0 must be all NaN and row 1 finite")
                infer(x)
            time.sleep(3)
            after_rss = vm_rss_mib(daemon.proc.pid)
        finally:
            daemon.stop()
    print(f"{args.model}: VmRSS {finite_rss} MiB after finite requests, {after_rss} MiB after "
          f"requests with a NaN ({after_rss - finite_rss:+d} MiB)")


if __name__ == "__main__":
    main()
