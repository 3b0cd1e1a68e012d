"""What soak.py and batch_sweep.py share: replicad.v1 stubs, the daemon, its RSS and metrics."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from bench_report import git_commit, machine_line  # noqa: E402,F401
from replicad_daemon import Daemon  # noqa: E402

MIB = 2**20
_stubs = []  # (replicad_pb2, replicad_pb2_grpc) once generated.


def log(message):
    print(message, file=sys.stderr, flush=True)


def load_stubs():
    """(replicad_pb2, replicad_pb2_grpc), generated from proto/replicad/v1 into a temporary
    folder: the repository ships no Python stubs, and Debian's protoc and grpc_python_plugin
    are installed with gRPC (their 3.21 output loads under the venv's newer protobuf)."""
    if _stubs:
        return tuple(_stubs)
    out = tempfile.mkdtemp(prefix="replicad-stubs-")
    plugin = subprocess.run(["sh", "-c", "command -v grpc_python_plugin"], capture_output=True,
                            text=True).stdout.strip()
    if not plugin:
        sys.exit("grpc_python_plugin is missing (Debian: protobuf-compiler-grpc)")
    run = subprocess.run(["protoc", f"-I{os.path.join(ROOT, 'proto')}", f"--python_out={out}",
                          f"--grpc_python_out={out}", f"--plugin=protoc-gen-grpc_python={plugin}",
                          os.path.join(ROOT, "proto", "replicad", "v1", "replicad.proto")],
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit("protoc failed:\n" + run.stderr)
    sys.path.insert(0, out)
    from replicad.v1 import replicad_pb2, replicad_pb2_grpc
    sys.path.remove(out)
    shutil.rmtree(out, ignore_errors=True)  # Imported: the modules live on without the files.
    _stubs.extend([replicad_pb2, replicad_pb2_grpc])
    return replicad_pb2, replicad_pb2_grpc


def start_daemon(*flags):
    """replicad serve on loopback ports (metrics too, for the investigation of a failure)."""
    os.environ.setdefault("REPLICAD_BIN_DIR", os.path.join(ROOT, "build", "bin"))
    binary = os.path.join(os.environ["REPLICAD_BIN_DIR"], "replicad")
    if not os.access(binary, os.X_OK):
        sys.exit(f"{binary} is missing: run scripts/build.sh first")
    daemon = Daemon(*flags)
    log(f"replicad serve {' '.join(flags)}: pid {daemon.process.pid}, gRPC port {daemon.port}")
    return daemon


def rss_bytes(pid):
    """VmRSS of a process (resident now, not the peak), from /proc."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def metrics_port(daemon):
    for line in daemon.output:
        match = re.search(r"metrics on port (\d+)", line)
        if match:
            return int(match.group(1))
    raise RuntimeError("no metrics port in the daemon's output:\n" + "".join(daemon.output))


def metric_sums(daemon, names):
    """{name: value summed over every series} for the counters and gauges in `names`."""
    url = f"http://127.0.0.1:{metrics_port(daemon)}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    sums = dict.fromkeys(names, 0.0)
    for line in text.splitlines():
        match = re.match(r"([a-z_]+)(\{[^}]*\})? (\S+)$", line)
        if match and match.group(1) in sums:
            sums[match.group(1)] += float(match.group(3))
    return sums


def image_tensor(pb2, rows, rng, name="image", row_shape=(1, 28, 28)):
    """`rows` rows of float32 noise for the input `name` (the default model's image)."""
    tensor = pb2.Tensor(name=name, dtype=pb2.DATA_TYPE_FLOAT32, shape=[rows, *row_shape])
    tensor.raw = rng.standard_normal((rows, *row_shape), dtype=np.float32).tobytes()
    return tensor


def predict_request(pb2, rows, rng, model="default", name="image", row_shape=(1, 28, 28)):
    return pb2.PredictRequest(model=model, inputs=[image_tensor(pb2, rows, rng, name, row_shape)])


def mb(value):
    return f"{value / 1e6:.0f} MB"
