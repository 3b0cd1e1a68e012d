"""`pip install ./client/python` into a clean venv (no system site-packages, dependencies
from PyPI: the newest grpcio, protobuf and numpy it allows) gives a working client."""

import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

SCRIPT = """
import sys, numpy as np, replicad
client = replicad.Client(sys.argv[1])
print([m.name for m in client.models()])
print(client.predict("default", np.zeros((3, 1, 28, 28), np.float32))["logits"].shape)
client.configure_training("default", optimizer="adam")
print(client.train_step("default", np.zeros((2, 1, 28, 28), np.float32), [1, 2]).step)
"""


def test_installs_into_a_clean_venv_from_the_repository(tmp_path, serve):
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    install = subprocess.run([python, "-m", "pip", "install", "--disable-pip-version-check",
                              "-q", os.path.join(ROOT, "client", "python")],
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout + install.stderr
    check = subprocess.run([python, "-c", "import google.protobuf, grpc, numpy; print("
                            "google.protobuf.__version__, grpc.__version__, numpy.__version__)"],
                           capture_output=True, text=True, check=True)
    print("clean venv:", check.stdout.strip())
    daemon = serve()
    run = subprocess.run([python, "-W", "error", "-c", SCRIPT, f"127.0.0.1:{daemon.port}"],
                         capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.split("\n")[:3] == ["['default']", "(3, 10)", "1"], run.stdout
    assert sys.version_info >= (3, 9)
