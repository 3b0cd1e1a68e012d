"""bool, int32, int8 and uint8 tensors through Triton's clients (issue #38): a model whose inputs
and outputs hold them, served by replicad, driven by tritonclient.grpc (raw contents) and
tritonclient.http (JSON and binary tensors), with the values checked against numpy.

Run with: .venv-triton/bin/python tests/server/triton_dtypes_test.py   (ctest runs it; the venv
comes from scripts/triton-venv.sh, the daemon from $REPLICAD_BIN_DIR or build/bin).

The model: ids INT32 [N, 4], mask BOOL [N, 4], level UINT8 [N, 4], offset INT8 [N, 4];
score = Where(mask, ids + level + offset as float, -1) FP32, unmasked = Not(mask) BOOL,
doubled = ids + ids INT32 (wrapping as numpy's). Checked: the metadata's datatypes and the
config's data types; every output over gRPC, HTTP JSON and HTTP binary; JSON true/false
for BOOL both ways; an INT8 value out of range and a number for BOOL answered 400 naming the
element; typed gRPC contents for INT32 answered UNIMPLEMENTED naming raw_input_contents.
"""

import os
import sys
import tempfile
import unittest

import numpy as np
import onnx
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testing"))
from replicad_daemon import Daemon  # noqa: E402

INPUTS = (("ids", TensorProto.INT32, "INT32", np.int32), ("mask", TensorProto.BOOL, "BOOL", np.bool_),
          ("level", TensorProto.UINT8, "UINT8", np.uint8), ("offset", TensorProto.INT8, "INT8", np.int8))
OUTPUTS = (("score", TensorProto.FLOAT, "FP32"), ("unmasked", TensorProto.BOOL, "BOOL"),
           ("doubled", TensorProto.INT32, "INT32"))


def write_model(path):
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Cast", [name], [name + "_f"], to=f) for name in ("ids", "level", "offset")]
    nodes += [helper.make_node("Add", ["ids_f", "level_f"], ["s1"]),
              helper.make_node("Add", ["s1", "offset_f"], ["s2"]),
              helper.make_node("Where", ["mask", "s2", "minus_one"], ["score"]),
              helper.make_node("Not", ["mask"], ["unmasked"]),
              helper.make_node("Add", ["ids", "ids"], ["doubled"])]
    graph = helper.make_graph(
        nodes, "dtypes",
        [helper.make_tensor_value_info(n, t, ["batch", 4]) for n, t, _, _ in INPUTS],
        [helper.make_tensor_value_info(n, t, ["batch", 4]) for n, t, _ in OUTPUTS],
        [helper.make_tensor("minus_one", f, [], [-1.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def make_inputs(rows):
    rng = np.random.default_rng(rows)
    return {"ids": rng.integers(-2**31, 2**31, size=(rows, 4), dtype=np.int32),
            "mask": rng.random((rows, 4)) < 0.5,
            "level": rng.integers(0, 256, size=(rows, 4), dtype=np.uint8),
            "offset": rng.integers(-128, 128, size=(rows, 4), dtype=np.int8)}


def expected(x):
    total = (x["ids"].astype(np.float32) + x["level"].astype(np.float32)) + \
        x["offset"].astype(np.float32)
    return {"score": np.where(x["mask"], total, np.float32(-1)).astype(np.float32),
            "unmasked": ~x["mask"],
            "doubled": (x["ids"].astype(np.int64) * 2).astype(np.int32)}  # Wraps, as numpy's +.


def setUpModule():
    global workdir, daemon, http, grpc_client
    workdir = tempfile.TemporaryDirectory()
    path = os.path.join(workdir.name, "model.onnx")
    write_model(path)
    daemon = Daemon("--model", f"dtypes={path}", "--devices", "cpu:0,cpu:0")
    http = httpclient.InferenceServerClient(f"127.0.0.1:{daemon.http_port}")
    grpc_client = grpcclient.InferenceServerClient(f"127.0.0.1:{daemon.port}")


def tearDownModule():
    daemon.stop()
    workdir.cleanup()


class Dtypes(unittest.TestCase):
    def check(self, outputs, x):
        want = expected(x)
        for name, _, _ in OUTPUTS:
            got = outputs(name)
            self.assertEqual(got.dtype, want[name].dtype, name)
            np.testing.assert_array_equal(got, want[name], err_msg=name)

    def test_metadata_and_config_name_the_datatypes(self):
        metadata = http.get_model_metadata("dtypes")
        self.assertEqual({t["name"]: t["datatype"] for t in metadata["inputs"]},
                         {n: d for n, _, d, _ in INPUTS})
        self.assertEqual({t["name"]: t["datatype"] for t in metadata["outputs"]},
                         {n: d for n, _, d in OUTPUTS})
        config = grpc_client.get_model_config("dtypes").config
        self.assertEqual({t.name: t.data_type for t in config.input},
                         {"ids": 8, "mask": 1, "level": 2, "offset": 6})  # TYPE_INT32, BOOL, ...

    def test_grpc_raw_contents(self):
        for rows in (1, 3, 8):
            x = make_inputs(rows)
            inputs = []
            for name, _, datatype, _ in INPUTS:
                inputs.append(grpcclient.InferInput(name, [rows, 4], datatype))
                inputs[-1].set_data_from_numpy(x[name])
            result = grpc_client.infer("dtypes", inputs)
            self.check(result.as_numpy, x)

    def test_http_json_and_binary(self):
        for binary in (False, True):
            x = make_inputs(5)
            inputs = []
            for name, _, datatype, _ in INPUTS:
                inputs.append(httpclient.InferInput(name, [5, 4], datatype))
                inputs[-1].set_data_from_numpy(x[name], binary_data=binary)
            outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n, _, _ in OUTPUTS]
            result = http.infer("dtypes", inputs, outputs=outputs)
            self.check(result.as_numpy, x)
            if not binary:
                unmasked = result.get_output("unmasked")["data"]
                self.assertTrue(all(isinstance(v, bool) for v in unmasked), unmasked[:4])

    def test_bad_json_values_name_the_element(self):
        x = make_inputs(1)
        for name, values, message in (
                ("offset", [1, 2, 3, 200], "[3]: expected an integer in [-128, 127] for datatype INT8"),
                ("mask", [True, False, 1, True], "[2]: expected true or false for datatype BOOL")):
            inputs = []
            for n, _, datatype, _ in INPUTS:
                inputs.append(httpclient.InferInput(n, [1, 4], datatype))
                if n == name:
                    inputs[-1]._raw_data = None
                    inputs[-1]._parameters = {}
                    inputs[-1]._data = values
                else:
                    inputs[-1].set_data_from_numpy(x[n], binary_data=False)
            with self.assertRaises(InferenceServerException) as raised:
                http.infer("dtypes", inputs)
            self.assertEqual(raised.exception.status(), "400")
            self.assertIn(message, raised.exception.message())

    def test_typed_grpc_contents_of_the_new_types_are_unimplemented(self):
        request = service_pb2.ModelInferRequest(model_name="dtypes")
        x = make_inputs(1)
        for name, _, datatype, _ in INPUTS:
            tensor = request.inputs.add(name=name, datatype=datatype, shape=[1, 4])
            if name == "mask":
                tensor.contents.bool_contents.extend(bool(v) for v in x[name].ravel())
            elif name == "level":
                tensor.contents.uint_contents.extend(int(v) for v in x[name].ravel())
            else:
                tensor.contents.int_contents.extend(int(v) for v in x[name].ravel())
        stub = grpc_client._client_stub
        with self.assertRaises(Exception) as raised:
            stub.ModelInfer(request)
        self.assertIn("UNIMPLEMENTED", str(raised.exception.code()))
        self.assertIn("raw_input_contents", raised.exception.details())


if __name__ == "__main__":
    unittest.main()
