"""A Triton model repository with config.pbtxt files, served by replicad, seen through tritonclient.

Run with: .venv-triton/bin/python tests/server/triton_repository_test.py   (ctest runs it; the
venv comes from scripts/triton-venv.sh, the daemon from $REPLICAD_BIN_DIR or build/bin).

The models are replicad's embedded default model (`replicad default-model`: image
float32[N,1,28,28] -> logits, probabilities float32[N,10]) in Triton's layout:
  mnist/  versions 1, 2, 3; config.pbtxt: max_batch_size 8, instance_group count 2 KIND_CPU,
          version_policy specific [1, 3], dynamic_batching, and a harmless `parameters`
  every/  versions 1, 2; config.pbtxt: version_policy all, nothing else
  bad/    version 1; config.pbtxt sets sequence_batching, which replicad does not honour

Checked through tritonclient: ModelConfig reports the file as loaded; versions follow the policy;
batches up to max_batch_size run on each version and a larger one is invalid; the unsupported field
is named by an explicit load, stops a start-up in none mode, and, with --no-exit-on-error, fails
that model alone; the doors open before the models load; a changed config.pbtxt reloads the model in
poll mode.
"""

import os
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testing"))
from replicad_daemon import Daemon  # noqa: E402

MNIST_CONFIG = """
name: "mnist"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "image" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 1, 28, 28 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
version_policy: { specific { versions: [ 1, 3 ] } }
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
"""
EVERY_CONFIG = 'backend: "onnxruntime"\nversion_policy: { all {} }\n'
BAD_CONFIG = 'max_batch_size: 8\nsequence_batching { max_sequence_idle_microseconds: 5000 }\n'
KIND_CPU = 2  # inference.ModelInstanceGroup.KIND_CPU


def bin_dir():
    return os.environ.get("REPLICAD_BIN_DIR",
                          os.path.join(os.path.dirname(__file__), "../../build/bin"))


def add_model(repository, name, versions, config):
    for version in versions:
        path = os.path.join(repository, name, str(version), "model.onnx")
        os.makedirs(os.path.dirname(path))
        subprocess.run([os.path.join(bin_dir(), "replicad"), "default-model", "--output", path],
                       check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(repository, name, "config.pbtxt"), "w") as f:
        f.write(config)


def setUpModule():
    global repository, daemon, client
    repository = tempfile.TemporaryDirectory()
    add_model(repository.name, "mnist", (1, 2, 3), MNIST_CONFIG)
    add_model(repository.name, "every", (1, 2), EVERY_CONFIG)
    add_model(repository.name, "bad", (1,), BAD_CONFIG)
    daemon = Daemon("--model-repository", repository.name, "--devices", "cpu:0",
                    "--model-control-mode", "explicit", "--load-model", "mnist",
                    "--load-model", "every")
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{daemon.port}")


def tearDownModule():
    daemon.stop()
    repository.cleanup()


def infer(batch, version=""):
    x = np.zeros((batch, 1, 28, 28), dtype=np.float32)
    inputs = [grpcclient.InferInput("image", list(x.shape), "FP32")]
    inputs[0].set_data_from_numpy(x)
    return client.infer("mnist", inputs, model_version=version)


class ConfigIsHonoured(unittest.TestCase):
    def test_model_config_reports_the_file(self):
        config = client.get_model_config("mnist").config
        self.assertEqual(config.name, "mnist")
        self.assertEqual(config.platform, "onnxruntime_onnx")
        self.assertEqual(config.backend, "onnxruntime")
        self.assertEqual(config.max_batch_size, 8)
        self.assertEqual(len(config.instance_group), 1)
        self.assertEqual(config.instance_group[0].count, 2)
        self.assertEqual(config.instance_group[0].kind, KIND_CPU)
        self.assertEqual(list(config.version_policy.specific.versions), [1, 3])
        self.assertEqual(list(config.dynamic_batching.preferred_batch_size), [4, 8])
        self.assertEqual(config.dynamic_batching.max_queue_delay_microseconds, 100)
        self.assertEqual([(i.name, list(i.dims)) for i in config.input], [("image", [1, 28, 28])])
        # The file lists logits; probabilities is completed from the model.
        self.assertEqual([(o.name, list(o.dims)) for o in config.output],
                         [("logits", [10]), ("probabilities", [10])])

    def test_versions_follow_the_policy(self):
        self.assertTrue(client.is_model_ready("mnist", "1"))
        self.assertFalse(client.is_model_ready("mnist", "2"))
        self.assertTrue(client.is_model_ready("mnist", "3"))
        self.assertEqual(list(client.get_model_metadata("mnist").versions), ["1", "3"])
        self.assertEqual(list(client.get_model_metadata("every").versions), ["1", "2"])
        self.assertTrue(client.is_model_ready("every", "1"))
        self.assertTrue(client.is_model_ready("every", "2"))
        every = client.get_model_config("every").config
        self.assertTrue(every.version_policy.HasField("all"))

    def test_batches_up_to_max_batch_size_run_on_each_version(self):
        for version in ("1", "3", ""):
            self.assertEqual(infer(8, version).as_numpy("logits").shape, (8, 10))

    def test_a_batch_over_max_batch_size_is_invalid(self):
        with self.assertRaises(InferenceServerException) as caught:
            infer(9)
        self.assertEqual(caught.exception.status(), "StatusCode.INVALID_ARGUMENT")
        self.assertIn("8", caught.exception.message())


class UnsupportedFieldIsRefused(unittest.TestCase):
    def test_explicit_load_names_the_field(self):
        with self.assertRaises(InferenceServerException) as caught:
            client.load_model("bad")
        self.assertEqual(caught.exception.status(), "StatusCode.INVALID_ARGUMENT")
        message = caught.exception.message()
        self.assertIn("'sequence_batching' is not supported", message)
        self.assertIn(os.path.join("bad", "config.pbtxt"), message)
        self.assertFalse(client.is_model_ready("bad"))
        index = {m.name: m for m in client.get_model_repository_index().models}
        self.assertEqual(index["bad"].state, "UNAVAILABLE")
        self.assertIn("sequence_batching", index["bad"].reason)

    def test_startup_in_none_mode_stops_naming_the_field(self):
        with tempfile.TemporaryDirectory() as only_bad:
            add_model(only_bad, "bad", (1,), BAD_CONFIG)
            with self.assertRaises(RuntimeError) as caught:
                Daemon("--model-repository", only_bad, "--devices", "cpu:0")
            self.assertIn("'sequence_batching' is not supported", str(caught.exception))


class StartupLoading(unittest.TestCase):
    def test_the_doors_open_before_the_models_load(self):
        """Live at once; not ready, and each model UNAVAILABLE as loading, until the load ends."""
        with tempfile.TemporaryDirectory() as many:
            for i in range(6):
                add_model(many, f"m{i}", (1,), "")
            # One load at a time, each warming up to 4096 rows: the load lasts a while.
            process = subprocess.Popen(
                [os.path.join(bin_dir(), "replicad"), "serve", "--model-repository", many,
                 "--devices", "cpu:0", "--listen", "127.0.0.1:0", "--http-listen", "",
                 "--metrics-listen", "", "--model-load-threads", "1",
                 "--warmup-max-rows", "4096"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                lines = []
                port = None
                while port is None:
                    line = process.stdout.readline()
                    self.assertTrue(line, "".join(lines))
                    lines.append(line)
                    self.assertNotIn("ready: ", line, "ready before it listened")
                    if "gRPC listening on port" in line:
                        port = int(line.split("port ")[1].split()[0])
                early = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
                self.assertTrue(early.is_server_live())
                ready, model_ready = early.is_server_ready(), early.is_model_ready("m5")
                x = np.zeros((1, 1, 28, 28), dtype=np.float32)
                inputs = [grpcclient.InferInput("image", list(x.shape), "FP32")]
                inputs[0].set_data_from_numpy(x)
                try:
                    early.infer("m5", inputs)
                    refused = None
                except InferenceServerException as e:
                    refused = e
                rest = []
                while not any("ready: " in line for line in rest):
                    line = process.stdout.readline()
                    self.assertTrue(line, "".join(lines + rest))
                    rest.append(line)
                # Asked within milliseconds of the listening line, m5 loading last of six.
                self.assertFalse(ready)
                self.assertFalse(model_ready)
                self.assertIsNotNone(refused)
                self.assertEqual(refused.status(), "StatusCode.UNAVAILABLE")
                self.assertRegex(refused.message(), "'m5' (is loading|is not ready)")
                self.assertIn("ready: 6 model version(s)", rest[-1])
                self.assertTrue(early.is_server_ready())
                self.assertTrue(early.is_model_ready("m5"))
                self.assertEqual(early.infer("m5", inputs).as_numpy("logits").shape, (1, 10))
            finally:
                process.terminate()
                process.communicate(timeout=60)

    def test_a_broken_model_fails_alone_without_exit_on_error(self):
        with tempfile.TemporaryDirectory() as mixed:
            add_model(mixed, "mnist", (1,), MNIST_CONFIG.replace("[ 1, 3 ]", "[ 1 ]"))
            add_model(mixed, "bad", (1,), BAD_CONFIG)
            tolerant = Daemon("--model-repository", mixed, "--devices", "cpu:0",
                              "--no-exit-on-error")
            try:
                tolerant_client = grpcclient.InferenceServerClient(f"127.0.0.1:{tolerant.port}")
                self.assertTrue(tolerant_client.is_server_ready())
                self.assertTrue(tolerant_client.is_model_ready("mnist"))
                self.assertFalse(tolerant_client.is_model_ready("bad"))
                index = {m.name: m for m in tolerant_client.get_model_repository_index().models}
                self.assertEqual(index["bad"].state, "UNAVAILABLE")
                self.assertIn("'sequence_batching' is not supported", index["bad"].reason)
                self.assertIn("'sequence_batching' is not supported", "".join(tolerant.output))
            finally:
                tolerant.stop()
            # By default the same repository stops the daemon, as Triton's --exit-on-error.
            with self.assertRaises(RuntimeError) as caught:
                Daemon("--model-repository", mixed, "--devices", "cpu:0")
            self.assertIn("a startup model did not load", str(caught.exception))


class PollFollowsTheConfig(unittest.TestCase):
    def test_a_changed_config_reloads_the_model(self):
        with tempfile.TemporaryDirectory() as polled:
            add_model(polled, "mnist", (1, 2, 3), MNIST_CONFIG)
            watcher = Daemon("--model-repository", polled, "--devices", "cpu:0",
                             "--model-control-mode", "poll", "--repository-poll-seconds", "0.2")
            try:
                polled_client = grpcclient.InferenceServerClient(f"127.0.0.1:{watcher.port}")
                self.assertEqual(polled_client.get_model_config("mnist").config.max_batch_size, 8)
                with open(os.path.join(polled, "mnist", "config.pbtxt"), "w") as f:
                    # A preferred size above max_batch_size would fail the reload.
                    f.write(MNIST_CONFIG.replace("max_batch_size: 8", "max_batch_size: 4")
                            .replace("[ 4, 8 ]", "[ 4 ]").replace("[ 1, 3 ]", "[ 2 ]"))
                deadline = time.time() + 30
                while (polled_client.get_model_config("mnist").config.max_batch_size != 4
                       and time.time() < deadline):
                    time.sleep(0.1)
                self.assertEqual(polled_client.get_model_config("mnist").config.max_batch_size, 4)
                self.assertEqual(list(polled_client.get_model_metadata("mnist").versions), ["2"])
            finally:
                watcher.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
