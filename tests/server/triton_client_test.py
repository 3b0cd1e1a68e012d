"""replicad driven by Triton's own clients: tritonclient.grpc and grpc.health.v1.

Run with: .venv-triton/bin/python tests/server/triton_client_test.py   (ctest runs it; the
venv comes from scripts/triton-venv.sh, the daemon from $REPLICAD_BIN_DIR or build/bin).

A Triton-layout repository (squeeze/1/model.onnx, squeeze/2/model.onnx: torchvision's
squeezenet1_1 with weights=None and two seeds) is served by one daemon in explicit model
control; without a config.pbtxt Triton's default version policy serves the latest version. Outputs through tritonclient must equal PyTorch's within 1e-4 relative L2.

Checked: health, metadata, config, index, statistics, inference with raw and typed contents and over
a stream (outputs equal PyTorch's within 1e-4 relative L2; a bad request's error comes back in the
stream), bad inputs (datatype, model, version, shape, byte count, unsupported parameters) with their
codes and messages, reloads while three clients infer (none fails or sees another version's output),
unload and load. The model has two versions served on 2 slots.
"""

import os
import sys
import threading
import unittest

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testing"))
from replicad_daemon import Daemon  # noqa: E402
from squeeze_repository import IMAGE, MODEL, SqueezeRepository, images, relative_l2  # noqa: E402

TOLERANCE = 1e-4  # Relative L2 of replicad's outputs against PyTorch's (float32, 2 slots).


def setUpModule():
    global repository, daemon, client, reference
    repository = SqueezeRepository()
    reference = repository.reference
    daemon = Daemon("--model-repository", repository.path, "--devices", "cpu:0,cpu:0",
                    "--model-control-mode", "explicit", "--load-model", "*",
                    "--max-batch-size", "64")
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{daemon.port}")


def tearDownModule():
    daemon.stop()
    repository.cleanup()


def infer(batch=3, version="", seed=1, **kwargs):
    x = images(batch, seed)
    inputs = [grpcclient.InferInput("image", list(x.shape), "FP32")]
    inputs[0].set_data_from_numpy(x)
    outputs = [grpcclient.InferRequestedOutput("logits")]
    result = client.infer(MODEL, inputs, model_version=version, outputs=outputs, **kwargs)
    return x, result


class HealthAndMetadata(unittest.TestCase):
    def test_live_and_ready(self):
        self.assertTrue(client.is_server_live())
        self.assertTrue(client.is_server_ready())
        self.assertTrue(client.is_model_ready(MODEL))
        self.assertTrue(client.is_model_ready(MODEL, "2"))
        self.assertFalse(client.is_model_ready(MODEL, "1"))  # Not the latest.
        self.assertFalse(client.is_model_ready(MODEL, "3"))
        self.assertFalse(client.is_model_ready("nope"))

    def test_server_metadata_lists_exactly_what_works(self):
        metadata = client.get_server_metadata()
        self.assertEqual(metadata.name, "replicad")
        # cuda_shared_memory where the daemon was built with CUDA (tests/CMakeLists.txt says).
        cuda = ["cuda_shared_memory"] if os.environ.get("REPLICAD_WITH_CUDA") == "1" else []
        self.assertEqual(sorted(metadata.extensions),
                         ["binary_tensor_data"] + cuda + ["model_configuration", "model_repository",
                                                          "statistics", "system_shared_memory"])

    def test_model_metadata_has_a_leading_batch_dim(self):
        metadata = client.get_model_metadata(MODEL)
        self.assertEqual(metadata.name, MODEL)
        self.assertEqual(list(metadata.versions), ["2"])
        self.assertEqual(metadata.platform, "onnxruntime_onnx")
        self.assertEqual(metadata.inputs[0].name, "image")
        self.assertEqual(metadata.inputs[0].datatype, "FP32")
        self.assertEqual(list(metadata.inputs[0].shape), [-1, *IMAGE])
        self.assertEqual(list(metadata.outputs[0].shape), [-1, 1000])

    def test_model_config(self):
        config = client.get_model_config(MODEL).config
        self.assertEqual(config.name, MODEL)
        self.assertEqual(config.max_batch_size, 64)
        self.assertEqual(list(config.input[0].dims), list(IMAGE))
        self.assertEqual(config.input[0].data_type, 11)  # TYPE_FP32
        self.assertEqual(len(config.instance_group), 1)
        self.assertEqual(config.instance_group[0].count, 2)
        self.assertEqual(config.instance_group[0].kind, 2)  # KIND_CPU

    def test_repository_index(self):
        index = client.get_model_repository_index()
        rows = {(m.name, m.version): m.state for m in index.models}
        self.assertEqual(rows, {(MODEL, "2"): "READY"})

    def test_grpc_health(self):
        channel = grpc.insecure_channel(f"127.0.0.1:{daemon.port}")
        stub = health_pb2_grpc.HealthStub(channel)
        answer = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        self.assertEqual(answer.status, health_pb2.HealthCheckResponse.SERVING)


class Inference(unittest.TestCase):
    def test_latest_version_matches_pytorch(self):
        x, result = infer(batch=5, request_id="req-7")
        response = result.get_response()
        self.assertEqual(response.model_version, "2")
        self.assertEqual(response.id, "req-7")
        logits = result.as_numpy("logits")
        self.assertEqual(logits.shape, (5, 1000))
        self.assertLess(relative_l2(logits, reference(2, x)), TOLERANCE)

    def test_version_by_number(self):
        x, result = infer(batch=2, version="2", seed=3)
        self.assertEqual(result.get_response().model_version, "2")
        self.assertLess(relative_l2(result.as_numpy("logits"), reference(2, x)), TOLERANCE)
        with self.assertRaises(InferenceServerException) as caught:
            infer(batch=1, version="1")  # On disk, but the version policy serves the latest.
        self.assertEqual(caught.exception.status(), "StatusCode.NOT_FOUND")
        self.assertIn("has no version 1; ready versions: 2", caught.exception.message())

    def test_typed_contents_and_unused_parameters(self):
        x = images(2, seed=4)
        request = service_pb2.ModelInferRequest(model_name=MODEL, id="typed")
        tensor = request.inputs.add(name="image", datatype="FP32", shape=list(x.shape))
        tensor.contents.fp32_contents.extend(x.ravel().tolist())
        request.parameters["sequence_start"].bool_param = False  # Tolerated, unused.
        request.parameters["priority"].uint64_param = 1
        request.parameters["timeout"].int64_param = 60_000_000
        stub = service_pb2_grpc.GRPCInferenceServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{daemon.port}"))
        response = stub.ModelInfer(request, timeout=60)
        self.assertEqual(response.id, "typed")
        self.assertEqual(response.outputs[0].datatype, "FP32")
        logits = np.frombuffer(response.raw_output_contents[0], np.float32).reshape(2, 1000)
        self.assertLess(relative_l2(logits, reference(2, x)), TOLERANCE)

    def test_statistics_count_inferences(self):
        before = client.get_inference_statistics(MODEL, "2").model_stats[0]
        infer(batch=4)
        after = client.get_inference_statistics(MODEL, "2").model_stats[0]
        self.assertEqual(after.inference_count - before.inference_count, 4)
        self.assertEqual(after.execution_count - before.execution_count, 1)
        self.assertEqual(after.inference_stats.success.count - before.inference_stats.success.count, 1)
        self.assertGreater(after.inference_stats.compute_infer.ns, before.inference_stats.compute_infer.ns)
        self.assertIn(4, [b.batch_size for b in after.batch_stats])


class UnixSocket(unittest.TestCase):
    """`--listen unix:PATH`: tritonclient connects to the same URL and gets the same answers."""

    def test_infer_over_a_unix_socket_matches_pytorch(self):
        path = os.path.join(repository.path, "replicad.sock")
        local = Daemon("--model-repository", repository.path, "--devices", "cpu:0",
                       "--model-control-mode", "explicit", "--load-model", "*",
                       "--listen", f"unix:{path}")
        over_socket = None
        try:
            self.assertEqual(local.target, f"unix:{path}")
            self.assertIsNone(local.port)
            over_socket = grpcclient.InferenceServerClient(local.target)
            self.assertTrue(over_socket.is_server_ready())
            x = images(3, seed=9)
            inputs = [grpcclient.InferInput("image", list(x.shape), "FP32")]
            inputs[0].set_data_from_numpy(x)
            result = over_socket.infer(MODEL, inputs)
            self.assertLess(relative_l2(result.as_numpy("logits"), reference(2, x)), TOLERANCE)
        finally:
            if over_socket is not None:
                over_socket.close()
            local.stop()
        self.assertFalse(os.path.exists(path))  # Removed on a clean stop.
        self.assertNotIn("WARNING", "".join(local.output))


class Streaming(unittest.TestCase):
    def test_stream_answers_every_request_and_reports_errors_in_band(self):
        answers, lock, all_in = {}, threading.Lock(), threading.Event()

        def on_answer(result, error):
            with lock:
                if error is not None:
                    answers[error.message()] = error
                else:
                    answers[result.get_response().id] = result
                if len(answers) == 4:
                    all_in.set()

        stream = grpcclient.InferenceServerClient(f"127.0.0.1:{daemon.port}")
        stream.start_stream(callback=on_answer)
        sent = {}
        for i in range(3):
            x = images(i + 1, seed=10 + i)
            tensor = grpcclient.InferInput("image", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            stream.async_stream_infer(MODEL, [tensor], request_id=f"s{i}")
            sent[f"s{i}"] = x
        bad = grpcclient.InferInput("image", [1, 3, 8, 8], "FP32")
        bad.set_data_from_numpy(np.zeros((1, 3, 8, 8), np.float32))
        stream.async_stream_infer(MODEL, [bad], request_id="bad")
        self.assertTrue(all_in.wait(120))
        stream.stop_stream()
        for request_id, x in sent.items():
            logits = answers[request_id].as_numpy("logits")
            self.assertLess(relative_l2(logits, reference(2, x)), TOLERANCE)
        errors = [k for k in answers if k not in sent]
        self.assertEqual(len(errors), 1)
        self.assertIn("INVALID_ARGUMENT", errors[0])
        self.assertIn("dim 2 expected 64, received 8", errors[0])


class BadInput(unittest.TestCase):
    def expect_error(self, status, fragments, fn):
        with self.assertRaises(InferenceServerException) as caught:
            fn()
        self.assertEqual(caught.exception.status(), status)
        for fragment in fragments:
            self.assertIn(fragment, caught.exception.message())

    def send(self, datatype="FP32", shape=(2, *IMAGE), data=None, model=MODEL, version=""):
        inputs = [grpcclient.InferInput("image", list(shape), datatype)]
        if data is None:
            data = np.zeros(shape, np.float64 if datatype == "FP64" else np.float32)
        inputs[0].set_data_from_numpy(data)
        client.infer(model, inputs, model_version=version)

    def test_other_datatypes_name_the_type(self):
        self.expect_error("StatusCode.INVALID_ARGUMENT",
                          ["inputs[0] 'image'.datatype", "UINT8 or BOOL", "'FP64'"],
                          lambda: self.send(datatype="FP64"))
        # A type replicad holds, for an input of another: the input, both types.
        self.expect_error("StatusCode.INVALID_ARGUMENT",
                          ["inputs[0] 'image'", "expected float32, received float16"],
                          lambda: self.send(datatype="FP16",
                                            data=np.zeros((2, *IMAGE), np.float16)))

    def test_unknown_model_and_version(self):
        self.expect_error("StatusCode.NOT_FOUND", ["model_name: 'nope' is not served", MODEL],
                          lambda: self.send(model="nope"))
        self.expect_error("StatusCode.NOT_FOUND", ["has no version 9; ready versions: 2"],
                          lambda: self.send(version="9"))
        self.expect_error("StatusCode.INVALID_ARGUMENT", ["model_version", "'x1'"],
                          lambda: self.send(version="x1"))

    def test_wrong_shape(self):
        # The byte count, and the rest of docs/api.md's bad-input table, is checked through both
        # protocol doors in triton_http_test.py.
        self.expect_error("StatusCode.INVALID_ARGUMENT", ["dim 2 expected 64, received 32"],
                          lambda: self.send(shape=(2, 3, 32, 64)))

    def test_unsupported_output_parameter_is_refused(self):
        inputs = [grpcclient.InferInput("image", [1, *IMAGE], "FP32")]
        inputs[0].set_data_from_numpy(images(1))
        outputs = [grpcclient.InferRequestedOutput("logits", class_count=3)]
        self.expect_error("StatusCode.UNIMPLEMENTED", ["classification"],
                          lambda: client.infer(MODEL, inputs, outputs=outputs))

    def test_daemon_still_serves(self):
        x, result = infer(batch=1)
        self.assertLess(relative_l2(result.as_numpy("logits"), reference(2, x)), TOLERANCE)


class ModelControl(unittest.TestCase):
    def test_reload_while_requests_run_fails_none(self):
        errors, done = [], threading.Event()

        def load():
            while not done.is_set():
                try:
                    x, result = infer(batch=2)
                    if relative_l2(result.as_numpy("logits"), reference(2, x)) >= TOLERANCE:
                        errors.append("wrong output")
                except InferenceServerException as e:
                    errors.append(str(e))

        threads = [threading.Thread(target=load) for _ in range(3)]
        for t in threads:
            t.start()
        for _ in range(3):
            client.load_model(MODEL)  # Reload: in-flight requests finish on the old one.
        done.set()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])

    def test_unload_then_load(self):
        client.unload_model(MODEL)
        self.assertFalse(client.is_model_ready(MODEL))
        self.assertFalse(client.is_server_ready())  # No model left.
        index = {m.name: (m.state, m.reason) for m in client.get_model_repository_index().models}
        self.assertEqual(index[MODEL], ("UNAVAILABLE", "unloaded"))
        with self.assertRaises(InferenceServerException) as caught:
            infer(batch=1)
        self.assertEqual(caught.exception.status(), "StatusCode.NOT_FOUND")
        client.load_model(MODEL)
        self.assertTrue(client.is_model_ready(MODEL))
        x, result = infer(batch=1)
        self.assertLess(relative_l2(result.as_numpy("logits"), reference(2, x)), TOLERANCE)

    def test_load_of_a_model_the_repository_lacks(self):
        with self.assertRaises(InferenceServerException) as caught:
            client.load_model("absent")
        self.assertEqual(caught.exception.status(), "StatusCode.NOT_FOUND")
        self.assertIn("no model 'absent'", caught.exception.message())


if __name__ == "__main__":
    unittest.main(verbosity=2)
