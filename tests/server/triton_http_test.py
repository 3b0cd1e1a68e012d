"""replicad's HTTP/REST door driven by Triton's own client: tritonclient.http, JSON and binary
tensors, system shared memory (also through tritonclient.grpc), and hostile bodies sent raw.

Run with: .venv-triton/bin/python tests/server/triton_http_test.py   (ctest runs it; the
venv comes from scripts/triton-venv.sh, the daemon from $REPLICAD_BIN_DIR or build/bin).

One daemon serves the squeezenet repository (tests/testing/squeeze_repository.py) in
explicit model control with a 4 MiB HTTP body limit. Outputs through tritonclient must
equal PyTorch's within 1e-4 relative L2, whichever way the tensors travel.

Checked: health, metadata (integer shapes), config (enum names), statistics, index, load and unload;
inference with JSON tensors, binary tensors, both mixed and nested JSON data; system shared memory
through tritonclient.utils.shared_memory on both doors (inputs read from and outputs written into
regions, misaligned and overlapping ranges, status, unregister, and each error); CUDA shared
memory's registration, status, unregister and refusals on both doors (CudaSharedMemory); docs/api.md's
bad-input table case by case through tritonclient.grpc and tritonclient.http; hostile bodies sent
raw (malformed JSON, invalid UTF-8, wrong member types, deep nesting, FP32 overflow, duplicate
outputs, binary sizes that do not add up, a body over the limit: 413), unknown routes and methods,
20 kB names (messages cut to 4 KiB); a shared-memory object truncated after registering fails its
request and the daemon lives on.
"""

import base64
import http.client
import json
import os
import sys
import unittest

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testing"))
from replicad_daemon import Daemon  # noqa: E402
from squeeze_repository import IMAGE, MODEL, SqueezeRepository, images, relative_l2  # noqa: E402

TOLERANCE = 1e-4  # Relative L2 of replicad's outputs against PyTorch's (float32, 2 slots).
BODY_LIMIT = 4 << 20


def setUpModule():
    global repository, daemon, client, grpc_client
    repository = SqueezeRepository()
    daemon = Daemon("--model-repository", repository.path, "--devices", "cpu:0,cpu:0",
                    "--model-control-mode", "explicit", "--load-model", "*",
                    "--max-batch-size", "64", "--http-max-body-bytes", str(BODY_LIMIT))
    client = httpclient.InferenceServerClient(f"127.0.0.1:{daemon.http_port}")
    grpc_client = grpcclient.InferenceServerClient(f"127.0.0.1:{daemon.port}")


def tearDownModule():
    daemon.stop()
    repository.cleanup()


def infer(x, binary_input, binary_output, version=""):
    inputs = [httpclient.InferInput("image", list(x.shape), "FP32")]
    inputs[0].set_data_from_numpy(x, binary_data=binary_input)
    outputs = [httpclient.InferRequestedOutput("logits", binary_data=binary_output)]
    return client.infer(MODEL, inputs, model_version=version, outputs=outputs, request_id="r1")


def raw(method, path, body=b"", headers=None):
    """One request on a fresh connection: (status, headers, parsed JSON body or None)."""
    connection = http.client.HTTPConnection("127.0.0.1", daemon.http_port, timeout=120)
    connection.request(method, path, body=body, headers=headers or {})
    response = connection.getresponse()
    data = response.read()
    connection.close()
    parsed = json.loads(data) if data and response.getheader("Content-Type") == "application/json" else None
    return response.status, dict(response.getheaders()), parsed


class HealthAndMetadata(unittest.TestCase):
    def test_live_and_ready(self):
        self.assertTrue(client.is_server_live())
        self.assertTrue(client.is_server_ready())
        self.assertTrue(client.is_model_ready(MODEL))
        self.assertTrue(client.is_model_ready(MODEL, "2"))
        self.assertFalse(client.is_model_ready(MODEL, "1"))
        self.assertFalse(client.is_model_ready("nope"))

    def test_server_metadata_lists_exactly_what_works(self):
        metadata = client.get_server_metadata()
        self.assertEqual(metadata["name"], "replicad")
        # cuda_shared_memory where the daemon was built with CUDA (tests/CMakeLists.txt says).
        cuda = ["cuda_shared_memory"] if os.environ.get("REPLICAD_WITH_CUDA") == "1" else []
        self.assertEqual(sorted(metadata["extensions"]),
                         ["binary_tensor_data"] + cuda + ["model_configuration", "model_repository",
                                                          "statistics", "system_shared_memory"])

    def test_model_metadata_has_integer_shapes_with_a_leading_batch_dim(self):
        metadata = client.get_model_metadata(MODEL)
        self.assertEqual(metadata["versions"], ["2"])
        self.assertEqual(metadata["platform"], "onnxruntime_onnx")
        self.assertEqual(metadata["inputs"], [{"name": "image", "datatype": "FP32",
                                               "shape": [-1, *IMAGE]}])
        self.assertEqual(metadata["outputs"][0]["shape"], [-1, 1000])

    def test_model_config_prints_integers_and_enum_names(self):
        config = client.get_model_config(MODEL)
        self.assertEqual(config["name"], MODEL)
        self.assertEqual(config["max_batch_size"], 64)
        self.assertEqual(config["input"][0]["dims"], list(IMAGE))
        self.assertEqual(config["input"][0]["data_type"], "TYPE_FP32")
        self.assertEqual(config["instance_group"][0]["kind"], "KIND_CPU")
        self.assertEqual(config["instance_group"][0]["count"], 2)

    def test_statistics_count_inferences(self):
        before = client.get_inference_statistics(MODEL, "2")["model_stats"][0]
        infer(images(4), True, True)
        after = client.get_inference_statistics(MODEL, "2")["model_stats"][0]
        self.assertEqual(after["inference_count"] - before["inference_count"], 4)
        success = after["inference_stats"]["success"]["count"]
        self.assertEqual(success - before["inference_stats"]["success"]["count"], 1)
        self.assertIsInstance(after["inference_stats"]["compute_infer"]["ns"], int)
        everything = client.get_inference_statistics()["model_stats"]
        self.assertEqual([s["name"] for s in everything], [MODEL])

    def test_repository_index_and_load_unload(self):
        index = client.get_model_repository_index()
        self.assertIn({"name": MODEL, "version": "2", "state": "READY", "reason": ""}, index)
        client.unload_model(MODEL)
        self.assertFalse(client.is_model_ready(MODEL))
        with self.assertRaises(InferenceServerException) as caught:
            infer(images(1), True, True)
        self.assertEqual(caught.exception.status(), "404")
        client.load_model(MODEL)
        self.assertTrue(client.is_model_ready(MODEL))
        with self.assertRaises(InferenceServerException) as caught:
            client.load_model(MODEL, config=json.dumps({"max_batch_size": 2}))
        self.assertEqual(caught.exception.status(), "501")
        self.assertIn("parameters.config", caught.exception.message())
        status, _, _ = raw("POST", f"/v2/repository/models/{MODEL}/load",
                           json.dumps({"parameters": {"unload_dependents": False}}))
        self.assertEqual(status, 200)  # Tolerated: it changes nothing here.


class Inference(unittest.TestCase):
    def check(self, binary_input, binary_output):
        x = images(3, seed=5)
        result = infer(x, binary_input, binary_output)
        self.assertEqual(result.get_response()["id"], "r1")
        self.assertEqual(result.get_response()["model_version"], "2")
        logits = result.as_numpy("logits")
        self.assertEqual(logits.shape, (3, 1000))
        self.assertLess(relative_l2(logits, repository.reference(2, x)), TOLERANCE)

    def test_json_tensors_match_pytorch(self):
        self.check(binary_input=False, binary_output=False)

    def test_binary_tensors_match_pytorch(self):
        self.check(binary_input=True, binary_output=True)

    def test_mixed_binary_and_json(self):
        self.check(binary_input=True, binary_output=False)
        self.check(binary_input=False, binary_output=True)

    def test_version_by_number(self):
        x = images(2, seed=6)
        logits = infer(x, True, True, version="2").as_numpy("logits")
        self.assertLess(relative_l2(logits, repository.reference(2, x)), TOLERANCE)

    def test_nested_json_data_is_read_row_major(self):
        x = images(1, seed=7)
        body = {"inputs": [{"name": "image", "datatype": "FP32", "shape": list(x.shape),
                            "data": x.tolist()}]}
        status, _, answer = raw("POST", f"/v2/models/{MODEL}/infer", json.dumps(body))
        self.assertEqual(status, 200)
        logits = np.array(answer["outputs"][0]["data"], np.float32).reshape(1, 1000)
        self.assertLess(relative_l2(logits, repository.reference(2, x)), TOLERANCE)


class SharedMemory(unittest.TestCase):
    """Inputs and outputs through POSIX shared memory, over both protocols."""

    def setUp(self):
        self.x = images(2, seed=8)
        self.in_bytes = self.x.nbytes
        self.out_bytes = 2 * 1000 * 4
        self.regions = [shm.create_shared_memory_region("in", "/replicad_test_in", self.in_bytes),
                        shm.create_shared_memory_region("out", "/replicad_test_out",
                                                        self.out_bytes + 64)]
        shm.set_shared_memory_region(self.regions[0], [self.x])

    def tearDown(self):
        client.unregister_system_shared_memory()
        for region in self.regions:
            shm.destroy_shared_memory_region(region)

    def run_through(self, infer_client, module, output_offset=0):
        infer_client.register_system_shared_memory("in", "/replicad_test_in", self.in_bytes)
        infer_client.register_system_shared_memory("out", "/replicad_test_out",
                                                   self.out_bytes + 64)
        inputs = [module.InferInput("image", list(self.x.shape), "FP32")]
        inputs[0].set_shared_memory("in", self.in_bytes)
        outputs = [module.InferRequestedOutput("logits")]
        outputs[0].set_shared_memory("out", self.out_bytes, offset=output_offset)
        result = infer_client.infer(MODEL, inputs, outputs=outputs)
        self.assertIsNotNone(result.get_output("logits"))
        logits = shm.get_contents_as_numpy(self.regions[1], np.float32, [2 * 1000 + 16])
        logits = logits[output_offset // 4:output_offset // 4 + 2000].reshape(2, 1000)
        self.assertLess(relative_l2(logits, repository.reference(2, self.x)), TOLERANCE)

    def test_http(self):
        self.run_through(client, httpclient)
        status = client.get_system_shared_memory_status()
        self.assertEqual(sorted(r["name"] for r in status), ["in", "out"])
        self.assertEqual(client.get_system_shared_memory_status("in"),
                         [{"name": "in", "key": "/replicad_test_in", "offset": 0,
                           "byte_size": self.in_bytes}])

    def test_grpc_with_an_output_offset(self):
        self.run_through(grpc_client, grpcclient, output_offset=64)
        status = grpc_client.get_system_shared_memory_status()
        self.assertEqual(sorted(status.regions), ["in", "out"])
        grpc_client.unregister_system_shared_memory("in")
        self.assertEqual(sorted(grpc_client.get_system_shared_memory_status().regions), ["out"])

    def expect_error(self, status, fragments, fn):
        with self.assertRaises(InferenceServerException) as caught:
            fn()
        self.assertEqual(caught.exception.status(), status)
        for fragment in fragments:
            self.assertIn(fragment, caught.exception.message())

    def test_errors_name_the_region_and_the_sizes(self):
        client.register_system_shared_memory("in", "/replicad_test_in", self.in_bytes)
        client.register_system_shared_memory("small", "/replicad_test_out", 16)
        self.expect_error("400", ["already in manager"],
                          lambda: client.register_system_shared_memory(
                              "in", "/replicad_test_in", self.in_bytes))
        self.expect_error("404", ["/replicad_no_such_key"],
                          lambda: client.register_system_shared_memory(
                              "x", "/replicad_no_such_key", 16))
        self.expect_error("404", ["Unable to find system shared memory region: 'nope'"],
                          lambda: client.get_system_shared_memory_status("nope"))

        def send(input_region="in", input_offset=0, output_region=None):
            inputs = [httpclient.InferInput("image", list(self.x.shape), "FP32")]
            inputs[0].set_shared_memory(input_region, self.in_bytes, offset=input_offset)
            outputs = [httpclient.InferRequestedOutput("logits")]
            if output_region:
                outputs[0].set_shared_memory(output_region, self.out_bytes)
            client.infer(MODEL, inputs, outputs=outputs)

        self.expect_error("404", ["Unable to find shared memory region: 'gone'",
                                  "inputs[0] 'image'"], lambda: send(input_region="gone"))
        self.expect_error("400", ["inputs[0] 'image'.parameters.shared_memory_offset"],
                          lambda: send(input_offset=self.in_bytes))
        self.expect_error("400", ["Invalid offset + byte size", "'small'"],
                          lambda: send(output_region="small"))
        self.expect_error("StatusCode.NOT_FOUND", ["Unable to find shared memory region: 'gone'"],
                          lambda: grpc_client.infer(MODEL, [self.grpc_input("gone")]))

    def test_unaligned_and_overlapping_ranges_are_copied_with_the_same_answer(self):
        # The daemon reads and writes aligned ranges in place; an input at an
        # odd offset, which the output then overwrites, must be copied first.
        both = shm.create_shared_memory_region("both", "/replicad_test_both", self.in_bytes + 2)
        self.regions.append(both)
        shm.set_shared_memory_region(both, [self.x], offset=2)
        grpc_client.register_system_shared_memory("both", "/replicad_test_both", self.in_bytes + 2)
        inputs = [grpcclient.InferInput("image", list(self.x.shape), "FP32")]
        inputs[0].set_shared_memory("both", self.in_bytes, offset=2)
        outputs = [grpcclient.InferRequestedOutput("logits")]
        outputs[0].set_shared_memory("both", self.out_bytes)
        grpc_client.infer(MODEL, inputs, outputs=outputs)
        logits = shm.get_contents_as_numpy(both, np.float32, [2 * 1000]).reshape(2, 1000)
        self.assertLess(relative_l2(logits, repository.reference(2, self.x)), TOLERANCE)

    def test_an_object_shrunk_after_registering_fails_the_request_not_the_daemon(self):
        # A daemon that mapped the region would die of SIGBUS here.
        client.register_system_shared_memory("in", "/replicad_test_in", self.in_bytes)
        client.register_system_shared_memory("out", "/replicad_test_out", self.out_bytes + 64)
        os.truncate("/dev/shm/replicad_test_out", 100)
        inputs = [httpclient.InferInput("image", list(self.x.shape), "FP32")]
        inputs[0].set_shared_memory("in", self.in_bytes)
        outputs = [httpclient.InferRequestedOutput("logits")]
        outputs[0].set_shared_memory("out", self.out_bytes)
        self.expect_error("400", ["shared memory region 'out'", "now holds 100 bytes"],
                          lambda: client.infer(MODEL, inputs, outputs=outputs))
        os.truncate("/dev/shm/replicad_test_in", 10)
        self.expect_error("StatusCode.INVALID_ARGUMENT",
                          ["shared memory region 'in'", "now holds 10 bytes"],
                          lambda: grpc_client.infer(MODEL, [self.grpc_input("in")]))
        self.assertTrue(client.is_server_live())

    def grpc_input(self, region):
        tensor = grpcclient.InferInput("image", list(self.x.shape), "FP32")
        tensor.set_shared_memory(region, self.in_bytes)
        return tensor


class CudaSharedMemory(unittest.TestCase):
    """The cuda_shared_memory extension's doors through tritonclient (gRPC and HTTP) where no
    client GPU allocation exists here: refusals name the region, the field and the values (a
    handle of the wrong size; a well-sized handle that CUDA cannot open: no GPU on this machine,
    or not an exported allocation on one), status and unregister answer as Triton's, and the
    names are shared with system regions. Reading and writing a real GPU allocation: the gpu test
    cuda_ipc_memory_test; with stand-ins, shared_memory_registry_test."""

    def setUp(self):
        if os.environ.get("REPLICAD_WITH_CUDA") != "1":
            self.skipTest("the daemon was built without CUDA")
        self.handle = base64.b64encode(bytes(range(64)))  # What get_raw_handle returns.

    def tearDown(self):
        client.unregister_cuda_shared_memory()
        client.unregister_system_shared_memory()

    expect_error = SharedMemory.expect_error

    def test_refusals_status_and_unregister_through_both_doors(self):
        unopened = "failed to register CUDA shared memory region 'gpu': failed to open CUDA IPC"
        self.expect_error("400", [unopened],
                          lambda: client.register_cuda_shared_memory("gpu", self.handle, 0, 64))
        self.expect_error("StatusCode.INVALID_ARGUMENT", [unopened],
                          lambda: grpc_client.register_cuda_shared_memory("gpu", self.handle, 0,
                                                                          64))
        short = base64.b64encode(bytes(10))
        for door, status in ((client, "400"), (grpc_client, "StatusCode.INVALID_ARGUMENT")):
            self.expect_error(status, ["raw_handle holds 10 bytes, expected the 64"],
                              lambda: door.register_cuda_shared_memory("gpu", short, 0, 64))
            self.expect_error(status, ["byte_size is 0"],
                              lambda: door.register_cuda_shared_memory("gpu", self.handle, 0, 0))
        self.expect_error("StatusCode.INVALID_ARGUMENT", ["device_id is -2"],
                          lambda: grpc_client.register_cuda_shared_memory("gpu", self.handle, -2,
                                                                          64))
        self.assertEqual(client.get_cuda_shared_memory_status(), [])
        self.assertEqual(len(grpc_client.get_cuda_shared_memory_status().regions), 0)
        self.expect_error("404", ["Unable to find cuda shared memory region: 'nope'"],
                          lambda: client.get_cuda_shared_memory_status("nope"))
        client.unregister_cuda_shared_memory("nope")  # Unknown names are fine, as in Triton.
        grpc_client.unregister_cuda_shared_memory()
        self.assertTrue(client.is_server_live())

    def test_names_are_shared_with_system_regions(self):
        region = shm.create_shared_memory_region("sys", "/replicad_test_cuda_names", 64)
        try:
            client.register_system_shared_memory("both", "/replicad_test_cuda_names", 64)
            self.expect_error("400", ["registered as system shared memory, not CUDA"],
                              lambda: client.get_cuda_shared_memory_status("both"))
            client.unregister_cuda_shared_memory("both")  # Another kind's name: left alone.
            self.assertEqual(len(client.get_system_shared_memory_status()), 1)
        finally:
            client.unregister_system_shared_memory()
            shm.destroy_shared_memory_region(region)

    def test_hostile_register_bodies_are_refused_by_field(self):
        path = "/v2/cudasharedmemory/region/gpu/register"
        for body, fragments in (
                ("{}", ["raw_handle: expected {\"b64\""]),
                ('{"raw_handle": "abc", "device_id": 0, "byte_size": 64}', ["raw_handle"]),
                ('{"raw_handle": {"b64": "%%%"}, "device_id": 0, "byte_size": 64}',
                 ["raw_handle"]),
                ('{"raw_handle": {"b64": "%s"}, "device_id": -1, "byte_size": 64}'
                 % self.handle.decode(), ["device_id: expected a non-negative integer, "
                                          "received -1"]),
                ('{"raw_handle": {"b64": "%s"}, "device_id": 0}' % self.handle.decode(),
                 ["byte_size: expected a non-negative integer, received none"]),
                ("[1]", ["expected a JSON object"])):
            got, _, answer = raw("POST", path, body)
            self.assertEqual(got, 400, (body, answer))
            for fragment in fragments:
                self.assertIn(fragment, answer["error"], body)
        got, _, answer = raw("POST", "/v2/cudasharedmemory/register", "{}")
        self.assertEqual(got, 400, answer)
        self.assertIn("'region name' is necessary", answer["error"])


class BadInputTable(unittest.TestCase):
    """docs/api.md's bad-input table, each case through both Open Inference Protocol doors."""

    def send(self, module, infer_client, model=MODEL, name="image", datatype="FP32",
             shape=(2, *IMAGE), data_shape=None, outputs=()):
        x = np.zeros(data_shape or shape, np.int64 if datatype == "INT64" else np.float32)
        tensor = module.InferInput(name, list(shape), datatype)
        tensor.set_data_from_numpy(x) if module is grpcclient else tensor.set_data_from_numpy(x, binary_data=True)
        requested = [module.InferRequestedOutput(o) for o in outputs]
        infer_client.infer(model, [tensor], outputs=requested or None)

    def check(self, grpc_code, http_status, fragments, **request):
        for module, infer_client, expected in ((grpcclient, grpc_client, grpc_code),
                                               (httpclient, client, http_status)):
            with self.subTest(door=module.__name__):
                with self.assertRaises(InferenceServerException) as caught:
                    self.send(module, infer_client, **request)
                self.assertEqual(caught.exception.status(), expected)
                for fragment in fragments:
                    self.assertIn(fragment, caught.exception.message())

    def test_unknown_model(self):
        self.check("StatusCode.NOT_FOUND", "404", ["'nope' is not served", MODEL], model="nope")

    def test_unknown_input(self):
        self.check("StatusCode.INVALID_ARGUMENT", "400",
                   ["inputs[0].name", "no input 'img'", "image float32[?,3,64,64]"], name="img")

    def test_wrong_dtype(self):
        self.check("StatusCode.INVALID_ARGUMENT", "400",
                   ["inputs[0] 'image'", "expected float32, received int64"], datatype="INT64")

    def test_wrong_rank_and_fixed_dim(self):
        self.check("StatusCode.INVALID_ARGUMENT", "400", ["expected rank 4", "received rank 3"],
                   shape=(2, 3, 64))
        self.check("StatusCode.INVALID_ARGUMENT", "400", ["dim 1 expected 3, received 4"],
                   shape=(2, 4, 64, 64))

    def test_byte_count_not_matching_the_shape(self):
        # tritonclient checks this itself, so the requests are built by hand.
        request = service_pb2.ModelInferRequest(model_name=MODEL)
        request.inputs.add(name="image", datatype="FP32", shape=[4, *IMAGE])
        request.raw_input_contents.append(b"\0" * 98304)
        stub = service_pb2_grpc.GRPCInferenceServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{daemon.port}"))
        with self.assertRaises(grpc.RpcError) as caught:
            stub.ModelInfer(request, timeout=60)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("holds 98304 bytes; float32[4,3,64,64] needs 196608",
                      caught.exception.details())
        header = json.dumps({"inputs": [{"name": "image", "datatype": "FP32", "shape": [4, *IMAGE],
                                         "parameters": {"binary_data_size": 98304}}]})
        status, _, answer = raw("POST", f"/v2/models/{MODEL}/infer",
                                header.encode() + b"\0" * 98304,
                                {"Inference-Header-Content-Length": str(len(header))})
        self.assertEqual(status, 400)
        self.assertIn("holds 98304 bytes; float32[4,3,64,64] needs 196608", answer["error"])

    def test_empty_batch(self):
        self.check("StatusCode.INVALID_ARGUMENT", "400", ["inputs[0]", "the batch is empty"],
                   shape=(0, *IMAGE))

    def test_batch_over_the_maximum(self):
        self.check("StatusCode.INVALID_ARGUMENT", "400", ["65", "64"], shape=(65, *IMAGE))

    def test_unknown_output(self):
        self.check("StatusCode.INVALID_ARGUMENT", "400",
                   ["outputs[0]", "no output 'nope'", "logits"], outputs=["nope"])


class BadInput(unittest.TestCase):
    def expect(self, status, fragments, method, path, body=b"", headers=None):
        got, _, answer = raw(method, path, body, headers)
        self.assertEqual(got, status, answer)
        for fragment in fragments:
            self.assertIn(fragment, answer["error"])

    def infer_body(self, **tensor):
        image = {"name": "image", "datatype": "FP32", "shape": [1, *IMAGE],
                 "data": [0.0] * int(np.prod(IMAGE))}
        image.update(tensor)
        return json.dumps({"inputs": [image]})

    def test_malformed_json(self):
        self.expect(400, ["request body: malformed JSON"], "POST", f"/v2/models/{MODEL}/infer",
                    b'{"inputs": [')
        self.expect(400, ["expected a JSON object, received array"], "POST",
                    f"/v2/models/{MODEL}/infer", b"[1, 2]")
        self.expect(400, ["inputs: expected an array"], "POST", f"/v2/models/{MODEL}/infer",
                    b'{"inputs": 3}')

    def test_bad_tensors_name_the_field(self):
        path = f"/v2/models/{MODEL}/infer"
        self.expect(400, ["inputs[0] 'image'.datatype", "UINT8 or BOOL", "'FP64'"], "POST", path,
                    self.infer_body(datatype="FP64"))
        self.expect(400, ["inputs[0] 'image'", "expected float32, received float16"], "POST", path,
                    self.infer_body(datatype="FP16"))
        self.expect(400, ["dim 2 expected 64, received 32"], "POST", path,
                    self.infer_body(shape=[1, 3, 32, 64]))
        self.expect(400, ["inputs[0] 'image'.data[2]", "expected a number", "string"], "POST",
                    path, self.infer_body(data=[0.0, 1.0, "x"]))
        self.expect(400, ["inputs[0] 'image'.shape", "expected an array of integers"], "POST",
                    path, self.infer_body(shape=[1, 3, 64.5, 64]))
        self.expect(400, ["inputs[0] 'image'.data", "nested deeper than 32"], "POST", path,
                    self.infer_body(data=json.loads("[" * 40 + "]" * 40)))
        self.expect(400, ["inputs[0]", "no data"], "POST", path,
                    json.dumps({"inputs": [{"name": "image", "datatype": "FP32",
                                            "shape": [1, *IMAGE]}]}))

    def test_binary_sizes_that_do_not_match(self):
        path = f"/v2/models/{MODEL}/infer"
        header = json.dumps({"inputs": [{"name": "image", "datatype": "FP32",
                                         "shape": [1, *IMAGE],
                                         "parameters": {"binary_data_size": 4 * 3 * 64 * 64}}]})
        body = header.encode() + b"\0" * 100
        self.expect(400, ["binary_data_size", "run past the 100 bytes"], "POST", path, body,
                    {"Inference-Header-Content-Length": str(len(header))})
        self.expect(400, ["Inference-Header-Content-Length", "received '99999999'"], "POST",
                    path, body, {"Inference-Header-Content-Length": "99999999"})
        extra = header.encode() + b"\0" * (4 * 3 * 64 * 64 + 8)
        self.expect(400, ["add up to 49152 bytes", "holds 49160 bytes"], "POST", path, extra,
                    {"Inference-Header-Content-Length": str(len(header))})

    def test_unknown_model_version_and_route(self):
        self.expect(404, ["model_name: 'nope' is not served", MODEL], "POST",
                    "/v2/models/nope/infer", self.infer_body())
        self.expect(404, ["has no version 9; ready versions: 2"], "POST",
                    f"/v2/models/{MODEL}/versions/9/infer", self.infer_body())
        self.expect(400, ["model_version", "'x1'"], "POST",
                    f"/v2/models/{MODEL}/versions/x1/infer", self.infer_body())
        self.expect(404, ["no route for"], "GET", "/v2/nothing/here")
        self.expect(404, ["no route for"], "GET", "/v1/models")
        got, headers, _ = raw("GET", f"/v2/models/{MODEL}/infer")
        self.assertEqual((got, headers["Allow"]), (405, "POST"))
        self.expect(501, ["trace", "not supported"], "GET", "/v2/trace/setting")

    def test_unsupported_parameters_are_refused_by_name(self):
        body = json.loads(self.infer_body())
        body["outputs"] = [{"name": "logits", "parameters": {"classification": 3}}]
        self.expect(501, ["outputs[0] 'logits'.parameters.classification"], "POST",
                    f"/v2/models/{MODEL}/infer", json.dumps(body))
        body["outputs"] = [{"name": "logits", "parameters": {"binary_data": "yes"}}]
        self.expect(400, ["binary_data: expected a boolean"], "POST",
                    f"/v2/models/{MODEL}/infer", json.dumps(body))

    def test_invalid_utf8_is_answered_with_json(self):
        body = self.infer_body().encode()[:-1] + b', "id": "\xff"}'
        self.expect(400, ["request body: malformed JSON"], "POST", f"/v2/models/{MODEL}/infer",
                    body)
        self.expect(404, ["is not served"], "GET", "/v2/models/%ff")

    def test_duplicate_outputs_and_fp32_overflow_are_refused(self):
        body = json.loads(self.infer_body())
        body["outputs"] = [{"name": "logits"}, {"name": "logits"}]
        self.expect(400, ["outputs[1] 'logits': already requested as outputs[0]"], "POST",
                    f"/v2/models/{MODEL}/infer", json.dumps(body))
        self.expect(400, ["inputs[0] 'image'.data[1]: 3.5e+38 is outside FP32's range"], "POST",
                    f"/v2/models/{MODEL}/infer", self.infer_body(data=[0.0, 3.5e38]))

    def test_unknown_actions_are_404_whatever_the_method(self):
        for method in ("GET", "POST", "DELETE"):
            self.expect(404, ["no route for"], method, f"/v2/models/{MODEL}/generate")

    def test_long_names_are_cut_in_messages(self):
        with self.assertRaises(InferenceServerException) as caught:
            grpc_client.get_model_metadata("m" * 20000)
        self.assertEqual(caught.exception.status(), "StatusCode.NOT_FOUND")
        self.assertIn("more bytes)", caught.exception.message())
        self.expect(404, ["more bytes)"], "GET", "/v2/models/" + "m" * 20000)

    def test_body_over_the_limit_is_413(self):
        got, _, answer = raw("POST", f"/v2/models/{MODEL}/infer", b"\0" * (BODY_LIMIT + 1))
        self.assertEqual(got, 413)
        self.assertIn(f"larger than this server's limit of {BODY_LIMIT} bytes", answer["error"])

    def test_daemon_still_serves(self):
        x = images(1, seed=9)
        logits = infer(x, True, True).as_numpy("logits")
        self.assertLess(relative_l2(logits, repository.reference(2, x)), TOLERANCE)


if __name__ == "__main__":
    unittest.main(verbosity=2)
