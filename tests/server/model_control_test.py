"""Model control while requests run, through Triton's clients on both doors.

Run with: .venv-triton/bin/python tests/server/model_control_test.py   (ctest runs it).

- poll mode: versions are added to and removed from a Triton-layout repository while
  clients send requests over gRPC and HTTP. No request may fail while the model has a
  version, and every answer must equal PyTorch's output of the version it names (within
  1e-4 relative L2): nothing is answered by a half-loaded or mixed-up model.
- explicit mode: the model is unloaded while requests for it are queued, then loaded again.
  Each request either completes correctly, gets NOT_FOUND naming the model (unloaded) or
  UNAVAILABLE naming it as loading (loading again, as Triton answers); the daemon serves on.
- uploads (--model-upload-root): the model's files sent with the load request (Triton's
  `file:` and `config` parameters, gRPC and HTTP) while clients send requests: every answer
  is the version that answered, replaced by the next upload; hostile uploads (a path out of
  the model's directory, bytes that are not ONNX, a configuration with an unknown field or a
  refused one, more than --max-upload-bytes) are refused by name, leave nothing under the
  upload root and leave the model serving.
"""

import json
import os
import shutil
import tempfile
import sys
import threading
import time
import unittest

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testing"))
from replicad_daemon import Daemon  # noqa: E402
from squeeze_repository import MODEL, SqueezeRepository, images, relative_l2  # noqa: E402

TOLERANCE = 1e-4  # Relative L2 against PyTorch's output of the version that answered.
SEED_OF_VERSION = {1: 1, 2: 2, 3: 1}  # Version 3 is a copy of version 1's file.


def setUpModule():
    global repository
    repository = SqueezeRepository()


def tearDownModule():
    repository.cleanup()


class Load:
    """Clients sending requests on both doors until stopped; they record every outcome."""

    def __init__(self, daemon, threads=2):
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.answered = {}  # version -> count
        self.wrong = []  # Answers that do not match their version's PyTorch output.
        self.errors = []  # (status, message)
        self.threads = []
        for i in range(threads):
            for door in ("grpc", "http"):
                t = threading.Thread(target=self.run, args=(daemon, door, i), daemon=True)
                self.threads.append(t)
                t.start()

    def run(self, daemon, door, seed):
        module = grpcclient if door == "grpc" else httpclient
        port = daemon.port if door == "grpc" else daemon.http_port
        client = module.InferenceServerClient(f"127.0.0.1:{port}")
        x = images(2, seed=20 + seed)
        while not self.done.is_set():
            tensor = module.InferInput("image", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            try:
                result = client.infer(MODEL, [tensor])
            except InferenceServerException as e:
                with self.lock:
                    self.errors.append((e.status(), e.message()))
                continue
            response = result.get_response()
            version = int(response.model_version if door == "grpc" else response["model_version"])
            logits = result.as_numpy("logits")
            ok = relative_l2(logits, repository.reference(SEED_OF_VERSION[version], x)) < TOLERANCE
            with self.lock:
                self.answered[version] = self.answered.get(version, 0) + 1
                if not ok:
                    self.wrong.append(version)

    def stop(self):
        self.done.set()
        for t in self.threads:
            t.join(timeout=120)


def wait_for(predicate, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


class ModelControlTest(unittest.TestCase):
    def assert_only_absent(self, load, loading=False):
        """Every failed request was NOT_FOUND naming the model (or, with `loading`, UNAVAILABLE
        naming it as loading); every answer was right."""
        for status, message in load.errors:
            if loading and status in ("StatusCode.UNAVAILABLE", "503"):
                self.assertIn(f"'{MODEL}' is loading", message)
                continue
            self.assertIn(status, ("StatusCode.NOT_FOUND", "404"), message)
            self.assertIn(f"'{MODEL}' is not served", message)
        self.assertEqual(load.wrong, [])


class PollMode(ModelControlTest):
    def test_versions_come_and_go_while_requests_run(self):
        root = os.path.join(repository.path, "polled")
        shutil.copytree(os.path.join(repository.path, MODEL), os.path.join(root, MODEL))
        daemon = Daemon("--model-repository", root, "--devices", "cpu:0,cpu:0",
                        "--model-control-mode", "poll", "--repository-poll-seconds", "0.2")
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{daemon.port}")
        versions = lambda: list(client.get_model_metadata(MODEL).versions)  # noqa: E731
        load = Load(daemon)
        try:
            self.assertTrue(wait_for(lambda: load.answered.get(2, 0) >= 4))
            # A new version appears: requests move to it, none fails.
            staging = os.path.join(repository.path, "staging")  # Outside the polled tree.
            os.makedirs(staging)
            shutil.copy(os.path.join(root, MODEL, "1", "model.onnx"), staging)
            os.rename(staging, os.path.join(root, MODEL, "3"))
            self.assertTrue(wait_for(lambda: versions() == ["3"]), versions())
            self.assertTrue(wait_for(lambda: load.answered.get(3, 0) >= 4))
            # It goes away again: back to version 2.
            shutil.rmtree(os.path.join(root, MODEL, "3"))
            self.assertTrue(wait_for(lambda: versions() == ["2"]), versions())
            count = load.answered.get(2, 0)
            self.assertTrue(wait_for(lambda: load.answered.get(2, 0) >= count + 4))
            with load.lock:
                self.assertEqual(load.errors, [])
                self.assertEqual(load.wrong, [])
            # The whole model goes: it is unloaded, and requests are NOT_FOUND.
            shutil.rmtree(os.path.join(root, MODEL))
            self.assertTrue(wait_for(lambda: not client.is_model_ready(MODEL)))
            with load.lock:
                load.errors.clear()
            self.assertTrue(wait_for(lambda: len(load.errors) >= 4))
        finally:
            load.stop()
            daemon.stop()
        self.assert_only_absent(load)


class ExplicitMode(ModelControlTest):
    def test_unload_while_requests_are_queued(self):
        daemon = Daemon("--model-repository", repository.path, "--devices", "cpu:0,cpu:0",
                        "--model-control-mode", "explicit", "--load-model", MODEL)
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{daemon.port}")
        load = Load(daemon, threads=3)
        try:
            self.assertTrue(wait_for(lambda: sum(load.answered.values()) >= 6))
            for _ in range(3):
                client.unload_model(MODEL)
                self.assertTrue(wait_for(lambda: len(load.errors) >= 2))
                client.load_model(MODEL)
                count = sum(load.answered.values())
                self.assertTrue(wait_for(lambda: sum(load.answered.values()) >= count + 4))
        finally:
            load.stop()
            daemon.stop()
        self.assert_only_absent(load, loading=True)
        self.assertEqual(set(load.answered), {2})


def model_file(version):
    with open(os.path.join(repository.path, MODEL, str(version), "model.onnx"), "rb") as f:
        return f.read()


class UploadMode(ModelControlTest):
    def test_uploads_replace_the_model_while_requests_run(self):
        root = tempfile.mkdtemp()
        limit = len(model_file(1)) + 4096
        daemon = Daemon("--model-upload-root", root, "--model-control-mode", "explicit",
                        "--devices", "cpu:0,cpu:0", "--max-upload-bytes", str(limit))
        grpc_client = grpcclient.InferenceServerClient(f"127.0.0.1:{daemon.port}")
        http_client = httpclient.InferenceServerClient(f"127.0.0.1:{daemon.http_port}")
        load = None
        try:
            grpc_client.load_model(MODEL, files={"file:1/model.onnx": model_file(1)})
            self.assertTrue(grpc_client.is_model_ready(MODEL))
            load = Load(daemon, threads=1)
            self.assertTrue(wait_for(lambda: load.answered.get(1, 0) >= 4))
            # Version 2 replaces it over HTTP (base64 in the JSON body), with a configuration.
            http_client.load_model(MODEL, config=json.dumps({"max_batch_size": 8}),
                                   files={"file:2/model.onnx": model_file(2)})
            self.assertTrue(wait_for(lambda: load.answered.get(2, 0) >= 4))
            self.assertEqual(sorted(os.listdir(os.path.join(root, MODEL))), ["2", "config.pbtxt"])

            refusals = [
                ({"file:../escape/model.onnx": model_file(1)}, None, "INVALID_ARGUMENT",
                 "parameters.file:../escape/model.onnx: expected VERSION/FILE"),
                ({"file:3/model.onnx": b"not onnx"}, None, "INVALID_ARGUMENT",
                 "not an ONNX model"),
                ({"file:3/model.onnx": model_file(1)}, {"max_batch_size": 8, "unknown": 1},
                 "INVALID_ARGUMENT", "parameters.config: not a model configuration"),
                ({"file:3/model.onnx": model_file(1)}, {"backend": "tensorrt"},
                 "INVALID_ARGUMENT", "backend: expected 'onnxruntime'"),
                ({"file:3/model.onnx": model_file(1) + bytes(8192)}, None, "RESOURCE_EXHAUSTED",
                 f"more than --max-upload-bytes {limit}"),
            ]
            for files, config, status, message in refusals:
                with self.assertRaises(InferenceServerException) as refused:
                    grpc_client.load_model(MODEL, files=files,
                                           config=json.dumps(config) if config else None)
                self.assertEqual(refused.exception.status(), f"StatusCode.{status}")
                self.assertIn(message, refused.exception.message())
            # Nothing of theirs stayed; version 2 still answers.
            self.assertEqual(sorted(os.listdir(root)), [MODEL])
            self.assertEqual(sorted(os.listdir(os.path.join(root, MODEL))), ["2", "config.pbtxt"])
            count = load.answered.get(2, 0)
            self.assertTrue(wait_for(lambda: load.answered.get(2, 0) >= count + 4))
        finally:
            if load is not None:
                load.stop()
            daemon.stop()
            shutil.rmtree(root)
        self.assert_only_absent(load, loading=True)
        self.assertEqual(set(load.answered), {1, 2})


if __name__ == "__main__":
    unittest.main(verbosity=2)
