"""README.md's "From Python" example and client/python/examples/fashion_mnist.py and
bring_your_own_model.py run as written against a daemon (address swapped for the test's)."""

import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def run_python(code_or_path, address, cwd, env_address=False):
    env = dict(os.environ)
    if env_address:
        env["REPLICAD_ADDRESS"] = address
        argv = [sys.executable, code_or_path]
    else:
        argv = [sys.executable, "-c", code_or_path.replace("localhost:8500", address)]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=cwd, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def test_readme_example(serve, tmp_path):
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    section = readme.split("## From Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    daemon = serve("--checkpoint-root", str(tmp_path))
    out = run_python(code, f"127.0.0.1:{daemon.port}", str(tmp_path))
    assert "val_accuracy" in out and (tmp_path / "fashion.onnx").exists(), out


def test_notebook_example(serve, tmp_path):
    daemon = serve("--checkpoint-root", str(tmp_path))
    out = run_python(os.path.join(ROOT, "client", "python", "examples", "fashion_mnist.py"),
                     f"127.0.0.1:{daemon.port}", str(tmp_path), env_address=True)
    assert (tmp_path / "fashion-epoch1.onnx").exists() and (tmp_path / "fashion.onnx").exists()
    assert "predicted:" in out, out


def test_bring_your_own_model_example(serve, tmp_path):
    """The PyTorch CNN trained through replicad.parallel answers in PyTorch with the accuracy
    the server reported (within 0.5 percentage points, as test_parallel.py holds them)."""
    daemon = serve("--model-upload-root", str(tmp_path / "uploads"),
                   "--model-control-mode", "explicit")
    out = run_python(os.path.join(ROOT, "client", "python", "examples",
                                  "bring_your_own_model.py"),
                     f"127.0.0.1:{daemon.port}", str(tmp_path), env_address=True)
    server = re.search(r"server accuracy: ([0-9.]+)", out)
    local = re.search(r"PyTorch accuracy: ([0-9.]+)", out)
    assert server and local, out
    server, local = float(server.group(1)), float(local.group(1))
    assert abs(server - local) <= 0.005 and server >= 0.8, out
    assert (tmp_path / "fashion_cnn.onnx").exists() and (tmp_path / "fashion_cnn.pt").exists()
