"""Fixtures of the Python client's tests: a real `replicad serve` (tests/testing/
replicad_daemon.py; $REPLICAD_BIN_DIR from ctest, else build/bin) and Fashion-MNIST from
Debian's dataset-fashion-mnist, scaled as `replicactl train` scales it."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "testing"))
from replicad_daemon import Daemon  # noqa: E402

import replicad  # noqa: E402
from replicad.datasets import load_idx  # noqa: E402

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


def bin_dir():
    return os.environ.get("REPLICAD_BIN_DIR",
                          os.path.join(os.path.dirname(__file__), "..", "..", "..", "build", "bin"))


@pytest.fixture
def serve():
    """serve(*flags) starts a daemon (2 CPU slots unless flags say otherwise) and returns it;
    every daemon is stopped after the test."""
    daemons = []

    def start(*flags):
        if not any(f in ("--devices", "--device-map") for f in flags):
            flags = ("--devices", "cpu:0,cpu:0") + flags
        daemon = Daemon(*flags)
        daemons.append(daemon)
        return daemon

    yield start
    for daemon in daemons:
        if daemon.process.poll() is None:
            daemon.stop()


@pytest.fixture
def client_of():
    """client_of(daemon) is a replicad.Client of it, closed after the test."""
    clients = []

    def connect(daemon, **options):
        client = replicad.Client(f"127.0.0.1:{daemon.port}", **options)
        clients.append(client)
        return client

    yield connect
    for client in clients:
        client.close()


@pytest.fixture(scope="session")
def fashion_mnist():
    """(x_train float32 [60000, 1, 28, 28] in [0, 1], y_train int64, x_test, y_test)."""
    if not os.path.isdir(FASHION_MNIST):
        pytest.fail(f"{FASHION_MNIST}: missing; scripts/install-deps.sh installs "
                    "dataset-fashion-mnist")
    splits = []
    for split in ("train", "t10k"):
        images, labels = load_idx(FASHION_MNIST, split)
        splits += [(images.astype(np.float32) / np.float32(255))[:, None], labels]
    return tuple(splits)
