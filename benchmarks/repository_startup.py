"""Start-up time and memory of a repository of models: replicad against ONNX Runtime, same files.

Builds a Triton-layout repository (NAME/1/model.onnx, no config.pbtxt) of torchvision
classifiers exported by tests/parity/export_torch_models.py (weights=None, seeded; cached in
--models-dir), then, in one run:

- replicad: `replicad serve --model-repository R --devices D`, started fresh. Measured from the
  exec: when GET /v2/health/live first answers (the first RPC), when /v2/health/ready first
  says ready (every model loaded), then one batch-3 inference on each model over HTTP (binary
  tensors), and the daemon's peak RSS (VmHWM) after them.
- ONNX Runtime: a fresh Python process (Python, numpy and onnxruntime imported first, outside
  the timing) creates one InferenceSession per file, holding them all as a server would, and
  runs the same batch-3 inference on each; measured: the time for all of it, and the
  process's VmHWM after it (Python included).

The goals of issue #36 are printed beside the figures: first RPC within 1 s, ready within 3x
ONNX Runtime's load-and-first-inference, peak RSS at most 1.5x ONNX Runtime's.

Usage: bash scripts/bench-venv.sh && .venv/bin/python benchmarks/repository_startup.py
       [--models a,b,...] [--devices cpu:0,cpu:1] [--json out.json] [-- extra serve flags]
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from bench_daemon import peak_rss_bytes  # noqa: E402
from bench_report import git_commit, machine_line  # noqa: E402
from compare_peers import exported_model  # noqa: E402

# The repository of issue #36: the zoo's seven small classifiers and seven larger ones.
DEFAULT_MODELS = ("resnet18,mobilenet_v2,squeezenet1_1,densenet121,efficientnet_b0,"
                  "shufflenet_v2_x0_5,mnasnet0_75,alexnet,googlenet,resnet50,resnext50_32x4d,"
                  "inception_v3,mobilenet_v3_large,regnet_y_800mf")
BATCH = 3

ORT_SCRIPT = r"""
import json, sys, time
import numpy as np
import onnxruntime as ort
paths = json.loads(sys.argv[1])
start = time.monotonic()
sessions = []  # All held, as a server holds every model of its repository.
for path in paths:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    sessions.append(session)
    spec = session.get_inputs()[0]
    shape = [int(sys.argv[2])] + [int(d) for d in spec.shape[1:]]
    session.run(None, {spec.name: np.zeros(shape, dtype=np.float32)})
seconds = time.monotonic() - start
hwm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "peak_rss": hwm}))
"""


def log(message):
    print(message, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(url, timeout=1.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, ConnectionError, socket.timeout):
        return None


def infer_binary(port, model, input_shape):
    """One inference of zeros over the Open Inference Protocol's binary tensor extension."""
    count = 1
    for d in input_shape:
        count *= d
    body = bytes(4 * count)  # float32 zeros
    header = json.dumps({
        "inputs": [{"name": "input", "shape": list(input_shape), "datatype": "FP32",
                    "parameters": {"binary_data_size": len(body)}}],
        "outputs": [{"name": "logits", "parameters": {"binary_data": True}}],
    }).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v2/models/{model}/infer", data=header + body, method="POST",
        headers={"Inference-Header-Content-Length": str(len(header)),
                 "Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(request, timeout=600) as response:
        response.read()
        return response.status


def run_replicad(replicad, repository, devices, inputs, serve_flags):
    port = free_port()
    argv = [replicad, "serve", "--model-repository", repository, "--devices", devices,
            "--listen", "127.0.0.1:0", "--metrics-listen", "", "--http-listen",
            f"127.0.0.1:{port}", *serve_flags]
    log("replicad: " + " ".join(argv))
    start = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    live = ready = None
    try:
        while ready is None:
            if process.poll() is not None:
                raise RuntimeError("replicad exited: " + process.stderr.read().decode()[-2000:])
            if time.monotonic() - start > 1800:
                raise RuntimeError("replicad not ready within 30 minutes")
            if live is None and http_status(f"http://127.0.0.1:{port}/v2/health/live") == 200:
                live = time.monotonic() - start
            if live is not None and http_status(
                    f"http://127.0.0.1:{port}/v2/health/ready") == 200:
                ready = time.monotonic() - start
                break
            time.sleep(0.01)
        for name, shape in inputs.items():
            infer_binary(port, name, shape)
        answered = time.monotonic() - start
        rss = peak_rss_bytes(process.pid)
    finally:
        process.terminate()
        process.communicate(timeout=120)
    return {"first_rpc_seconds": live, "ready_seconds": ready,
            "ready_and_inferred_seconds": answered, "peak_rss": rss}


def run_onnxruntime(paths):
    proc = subprocess.run([sys.executable, "-c", ORT_SCRIPT, json.dumps(paths), str(BATCH)],
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError("onnxruntime failed: " + proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--models-dir", default=os.path.join(ROOT, "build", "bench-models"))
    parser.add_argument("--devices", default="cpu:0,cpu:1")
    parser.add_argument("--replicad", default=os.path.join(ROOT, "build", "bin", "replicad"))
    parser.add_argument("--json", help="write the figures here too")
    parser.add_argument("serve_flags", nargs="*", help="extra replicad serve flags (after --)")
    args = parser.parse_args(argv)

    import onnx
    names = [n for n in args.models.split(",") if n]
    paths, inputs = {}, {}
    for name in names:
        paths[name] = exported_model(name, args.models_dir)
        graph = onnx.load(paths[name], load_external_data=False).graph
        dims = [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim][1:]
        inputs[name] = [BATCH, *dims]
    total_bytes = sum(os.path.getsize(p) for p in paths.values())

    with tempfile.TemporaryDirectory() as repository:
        for name, path in paths.items():
            target = os.path.join(repository, name, "1", "model.onnx")
            os.makedirs(os.path.dirname(target))
            try:
                os.link(path, target)
            except OSError:
                shutil.copyfile(path, target)
        # ORT first, then replicad: each a fresh process, the page cache warm for both.
        ort = run_onnxruntime(list(paths.values()))
        replicad = run_replicad(args.replicad, repository, args.devices, inputs,
                                args.serve_flags)

    mib = 1 << 20
    report = {
        "machine": machine_line(), "commit": git_commit(),
        "date": time.strftime("%Y-%m-%d"), "models": names,
        "onnx_bytes": total_bytes, "devices": args.devices, "serve_flags": args.serve_flags,
        "replicad": replicad, "onnxruntime": ort,
        "ready_over_ort": replicad["ready_seconds"] / ort["seconds"],
        "rss_over_ort": replicad["peak_rss"] / ort["peak_rss"],
    }
    print(f"{len(names)} models, {total_bytes / mib:.0f} MiB of ONNX, replicad on {args.devices}")
    print(f"  first RPC answered (live):   {replicad['first_rpc_seconds']:.2f} s   goal <= 1 s")
    print(f"  every model ready:           {replicad['ready_seconds']:.2f} s")
    print(f"  ready + one batch-{BATCH} each:    {replicad['ready_and_inferred_seconds']:.2f} s")
    print(f"  ONNX Runtime load + infer:   {ort['seconds']:.2f} s")
    print(f"  ready / ORT:                 {report['ready_over_ort']:.2f}x   goal <= 3x")
    print(f"  peak RSS replicad:           {replicad['peak_rss'] / mib:.0f} MiB")
    print(f"  peak RSS ONNX Runtime:       {ort['peak_rss'] / mib:.0f} MiB (Python included)")
    print(f"  RSS / ORT:                   {report['rss_over_ort']:.2f}x   goal <= 1.5x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
