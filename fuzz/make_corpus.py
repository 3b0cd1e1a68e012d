#!/usr/bin/python3
"""Writes the seed corpora of the fuzzers, fuzz/corpus/<fuzzer>/<seed>.

Run with: /usr/bin/python3 fuzz/make_corpus.py   (Debian's python3-numpy and
python3-onnx, and protoc for the protobuf seeds; from the repository root.)

Seeds are small valid inputs plus near misses (each a few hundred bytes, all
under 4 KiB), so that the fuzzers start at the interesting code. The output
is deterministic; rerunning it rewrites the same files and leaves the
others in the corpus folders alone.
"""
import gzip
import io
import os
import struct
import subprocess

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def seed(fuzzer, name, data):
    folder = os.path.join(ROOT, fuzzer)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    assert len(data) <= 4096, (fuzzer, name, len(data))
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def npy(array, version=None):
    out = io.BytesIO()
    if version is None:
        np.save(out, array)
    else:
        np.lib.format.write_array(out, array, version=version)
    return out.getvalue()


def npy_seeds():
    f = "npy_reader_fuzzer"
    seed(f, "f4_2x3", npy(np.arange(6, dtype="<f4").reshape(2, 3)))
    seed(f, "i8_4", npy(np.arange(4, dtype="<i8")))
    seed(f, "f2_2x3", npy(np.arange(6, dtype="<f2").reshape(2, 3)))
    seed(f, "f4_scalar", npy(np.float32(1.5).reshape(())))
    seed(f, "f4_0x3", npy(np.zeros((0, 3), dtype="<f4")))
    seed(f, "f4_v2", npy(np.ones((1, 1, 2, 2), dtype="<f4"), version=(2, 0)))
    seed(f, "f4_v3", npy(np.ones((2,), dtype="<f4"), version=(3, 0)))
    seed(f, "f8_refused", npy(np.ones((2,), dtype="<f8")))
    seed(f, "fortran_refused", npy(np.asfortranarray(np.ones((2, 3), dtype="<f4"))))
    seed(f, "truncated", npy(np.ones((4, 4), dtype="<f4"))[:-5])
    seed(f, "trailing", npy(np.ones((2,), dtype="<i8")) + b"\0\0\0\0")


def idx(magic, dims, payload, compress=False):
    data = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + payload
    if compress:
        data = gzip.compress(data, mtime=0)
    return data


def idx_pair(images, labels):
    return struct.pack(">I", len(images)) + images + labels


def idx_seeds():
    f = "idx_reader_fuzzer"
    pixels = bytes(range(0, 256, 14))[:18]
    images = idx(0x803, [2, 3, 3], pixels)
    labels = idx(0x801, [2], b"\x03\x07")
    seed(f, "plain", idx_pair(images, labels))
    seed(f, "gzipped", idx_pair(idx(0x803, [2, 3, 3], pixels, True), idx(0x801, [2], b"\x03\x07", True)))
    seed(f, "empty_set", idx_pair(idx(0x803, [0, 28, 28], b""), idx(0x801, [0], b"")))
    seed(f, "bad_magic", idx_pair(idx(0x801, [2, 3, 3], pixels), labels))
    seed(f, "count_mismatch", idx_pair(images, idx(0x801, [3], b"\x01\x02\x03")))
    seed(f, "truncated", idx_pair(images[:-4], labels))
    seed(f, "huge_claim", idx_pair(idx(0x803, [0xFFFFFFFF, 0xFFFF, 0xFFFF], pixels), labels))


def tensor(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def model(nodes, inputs, outputs, initializers=(), opset=13, ir_version=None, also_opsets=()):
    graph = helper.make_graph(nodes, "seed", inputs, outputs, list(initializers))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in also_opsets]
    m = helper.make_model(graph, opset_imports=opsets, producer_name="replicad-seed")
    m.ir_version = ir_version or (7 if opset >= 13 else 6 if opset >= 11 else 4 if opset >= 9 else 3)
    return m.SerializeToString()


def value(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def onnx_seeds():
    f = "onnx_import_fuzzer"
    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    # The fuzz model of fuzz_daemon.cc: Gemm, Add of a second input, Softmax.
    seed(f, "mlp", model(
        [helper.make_node("Gemm", ["x", "W", "b"], ["gemm"], transB=1),
         helper.make_node("Add", ["gemm", "offset"], ["logits"]),
         helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1)],
        [value("x", ["N", 4]), value("offset", ["N", 3])],
        [value("logits", ["N", 3]), value("probabilities", ["N", 3])],
        [tensor("W", w), tensor("b", np.zeros(3, np.float32))]))
    # Conv -> BatchNormalization -> Relu -> MaxPool -> Flatten: the optimizer's folds.
    seed(f, "conv_bn_relu", model(
        [helper.make_node("Conv", ["image", "cw", "cb"], ["conv"], kernel_shape=[3, 3],
                          pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["conv", "s", "o", "m", "v"], ["bn"]),
         helper.make_node("Relu", ["bn"], ["relu"]),
         helper.make_node("MaxPool", ["relu"], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("Flatten", ["pool"], ["flat"], axis=1)],
        [value("image", ["N", 1, 4, 4])], [value("flat", ["N", 8])],
        [tensor("cw", np.full((2, 1, 3, 3), 0.1, np.float32)), tensor("cb", np.zeros(2, np.float32)),
         tensor("s", np.ones(2, np.float32)), tensor("o", np.zeros(2, np.float32)),
         tensor("m", np.zeros(2, np.float32)), tensor("v", np.ones(2, np.float32))]))
    # Shape ops whose rules read constant inputs.
    seed(f, "reshape_transpose", model(
        [helper.make_node("Constant", [], ["shape"], value=tensor("c", np.array([0, 3, 2], np.int64))),
         helper.make_node("Reshape", ["x", "shape"], ["r"]),
         helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1]),
         helper.make_node("ReduceMean", ["t"], ["y"], axes=[2], keepdims=0)],
        [value("x", ["N", 6])], [value("y", ["N", 2])]))
    seed(f, "int64_concat", model(
        [helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
         helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT)],
        [value("a", ["N", 2], TensorProto.INT64), value("b", ["N", 1], TensorProto.INT64)],
        [value("y", ["N", 3])]))
    # Opset 9: brought to 11 by ONNX's version converter.
    seed(f, "opset9", model(
        [helper.make_node("Gemm", ["x", "W", "b"], ["y"], transB=1),
         helper.make_node("Dropout", ["y"], ["z"])],
        [value("x", [1, 4])], [value("z", [1, 3])],
        [tensor("W", w), tensor("b", np.zeros(3, np.float32))], opset=9))
    seed(f, "unsupported_op", model(
        [helper.make_node("Hardmax", ["x"], ["y"])], [value("x", ["N", 3])], [value("y", ["N", 3])]))
    # What the fuzzer found (each now refused with InvalidArgument): an opset-4 graph output
    # no node produces (a null dereference in ONNX's converter), a zero MaxPool stride
    # (SIGFPE in ONNX's shape inference), an initializer claiming 8 GiB for 72 bytes.
    seed(f, "found_undefined_output", model(
        [helper.make_node("Relu", ["x"], ["y"])], [value("x", ["N", 3])],
        [value("y", ["N", 3]), value("yy", ["N", 3])], opset=4))
    seed(f, "found_zero_stride", model(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 0])],
        [value("x", ["N", 1, 4, 4])], [value("y", ["N", 1, 2, 2])]))
    huge = tensor("w", np.zeros(18, np.float32))
    del huge.dims[:]
    huge.dims.extend([2, 1073741822])
    seed(f, "found_huge_initializer", model(
        [helper.make_node("Relu", ["x"], ["y"])], [value("x", ["N", 2])],
        [value("y", ["N", 2])], [huge]))
    # And a rank-0 B of an opset-4 Gemm (read out of range by ONNX's Gemm 6-to-7 adapter).
    seed(f, "found_old_gemm_scalar", model(
        [helper.make_node("Gemm", ["x", "W", "b"], ["y"], transB=1)], [value("x", [1, 4])],
        [value("y", [1, 3])], [tensor("W", np.float32(1)), tensor("b", np.zeros(3, np.float32))],
        opset=4, ir_version=4))
    # The same at opset 6, where ONNX's Gemm shape inference read it out of range first.
    seed(f, "found_old_gemm_scalar_opset6", model(
        [helper.make_node("Gemm", ["x", "W", "b"], ["y"], transB=1)], [value("x", [1, 4])],
        [value("y", [1, 3])], [tensor("W", np.float32(1)), tensor("b", np.zeros(3, np.float32))],
        opset=6, ir_version=4))
    # And that Gemm in a model importing the default domain twice, at 108 and at 6.
    seed(f, "found_default_domain_twice", model(
        [helper.make_node("Gemm", ["x", "W", "b"], ["y"], transB=1)], [value("x", [1, 4])],
        [value("y", [1, 3])], [tensor("W", np.float32(1)), tensor("b", np.zeros(3, np.float32))],
        opset=108, ir_version=4, also_opsets=[("", 6)]))
    # And a Constant's INT64 value of dims [41] in 1 byte (ONNX's shape inference wrote it
    # through a null pointer).
    short = tensor("c", np.array([0, 3, 2], np.int64))
    short.raw_data = b"\x01"
    del short.dims[:]
    short.dims.append(41)
    seed(f, "found_short_constant", model(
        [helper.make_node("Constant", [], ["shape"], value=short),
         helper.make_node("Reshape", ["x", "shape"], ["y"])],
        [value("x", ["N", 6])], [value("y", ["N", 3, 2])]))
    seed(f, "opset18_refused", model(
        [helper.make_node("Relu", ["x"], ["y"])], [value("x", ["N", 3])], [value("y", ["N", 3])],
        opset=18))


def config_seeds():
    f = "model_config_fuzzer"
    seed(f, "minimal", 'name: "fuzz"\nmax_batch_size: 8\n')
    seed(f, "full", """name: "fuzz"
platform: "onnxruntime_onnx"
backend: "onnxruntime"
default_model_filename: "model.onnx"
max_batch_size: 16
version_policy { latest { num_versions: 2 } }
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] format: FORMAT_NONE },
        { name: "offset" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "probabilities" data_type: TYPE_FP32 dims: [ 3 ] } ]
instance_group [ { name: "cpus" kind: KIND_CPU count: 2 }, { kind: KIND_AUTO } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  preserve_ordering: true
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5000
                         allow_timeout_override: true max_queue_size: 10 }
  priority_queue_policy { key: 2 value { max_queue_size: 3 } }
}
parameters { key: "intra_op_thread_count" value { string_value: "1" } }
""")
    seed(f, "gpus", 'max_batch_size: 0\ninstance_group { kind: KIND_GPU count: 2 gpus: [ 0, 1 ] }\n'
         'input { name: "x" data_type: TYPE_FP32 dims: [ -1, 4 ] }\n')
    seed(f, "specific_versions", 'version_policy { specific { versions: [ 1, 3 ] } }\n')
    seed(f, "all_versions", 'version_policy { all { } }\nmax_batch_size: 4\n')
    seed(f, "refused_field", 'max_batch_size: 4\nsequence_batching { }\n')
    seed(f, "wrong_dims", 'max_batch_size: 4\ninput { name: "x" data_type: TYPE_INT64 dims: [ 5 ] }\n')
    seed(f, "parse_error", 'max_batch_size: "four"\n')
    # Allocated 2^31 slots before the bound on instances (now refused).
    seed(f, "huge_count", 'instance_group { kind: KIND_CPU count: 2147483647 }\n')


def protoc_encode(message, proto, text):
    return subprocess.run(
        ["protoc", "--proto_path=proto", f"--encode={message}", proto],
        input=text.encode(), stdout=subprocess.PIPE, check=True).stdout


def octal(data):
    return "".join("\\%03o" % b for b in data)


def floats(*values):
    return octal(struct.pack("<%df" % len(values), *values))


def v1_tensor(field, name, dtype, shape, raw):
    dims = " ".join("shape: %d" % d for d in shape)
    return '%s { name: "%s" dtype: %s %s raw: "%s" }' % (field, name, dtype, dims, raw)


def v1_seeds():
    f = "replicad_v1_request_fuzzer"
    proto = "replicad/v1/replicad.proto"
    x = v1_tensor("inputs", "x", "DATA_TYPE_FLOAT32", [2, 4], floats(*range(8)))
    offset = v1_tensor("inputs", "offset", "DATA_TYPE_FLOAT32", [2, 3], floats(*[0.5] * 6))

    def predict(text):
        return b"\0" + protoc_encode("replicad.v1.PredictRequest", proto, text)

    def train(text):
        return b"\1" + protoc_encode("replicad.v1.TrainStepRequest", proto, text)

    seed(f, "predict", predict('model: "fuzz" %s %s' % (x, offset)))
    seed(f, "predict_one_output", predict('model: "fuzz" %s %s output_names: "probabilities"' % (x, offset)))
    seed(f, "predict_wrong_dtype", predict('model: "fuzz" %s %s' % (
        x, v1_tensor("inputs", "offset", "DATA_TYPE_INT64", [2, 3], octal(bytes(48))))))
    seed(f, "predict_missing_input", predict('model: "fuzz" %s' % x))
    seed(f, "predict_unknown_model", predict('model: "nope" %s %s' % (x, offset)))
    seed(f, "train_labels", train('model: "fuzz" %s %s %s' % (
        x, offset, v1_tensor("targets", "", "DATA_TYPE_INT64", [2], octal(struct.pack("<2q", 0, 2))))))
    seed(f, "train_probabilities", train('model: "fuzz" %s %s %s' % (
        x, offset, v1_tensor("targets", "", "DATA_TYPE_FLOAT32", [2, 3], floats(1, 0, 0, 0, 0.5, 0.5)))))


def oip_request(inputs, extra=""):
    text = 'model_name: "fuzz" id: "seed" ' + extra
    raws = []
    for name, shape, contents, raw in inputs:
        dims = " ".join("shape: %d" % d for d in shape)
        body = ("contents { %s }" % contents) if contents else ""
        text += ' inputs { name: "%s" datatype: "FP32" %s %s }' % (name, dims, body)
        if raw is not None:
            raws.append(raw)
    for raw in raws:
        text += ' raw_input_contents: "%s"' % raw
    return text


def oip_grpc_seeds():
    f = "oip_grpc_request_fuzzer"
    proto = "inference/grpc_service.proto"

    def encode(selector, message, text):
        return bytes([selector]) + protoc_encode("inference." + message, proto, text)

    raw = oip_request([("x", [2, 4], "", floats(*range(8))), ("offset", [2, 3], "", floats(*[0] * 6))])
    typed = oip_request([("x", [1, 4], "fp32_contents: [1, 2, 3, 4]", None),
                         ("offset", [1, 3], "fp32_contents: [0, 0, 0]", None)],
                        'model_version: "1" parameters { key: "priority" value { int64_param: 1 } } '
                        'parameters { key: "timeout" value { int64_param: 100000 } } '
                        'outputs { name: "logits" }')
    shm = oip_request([("x", [1, 4], "", None), ("offset", [1, 3], "fp32_contents: [0, 0, 0]", None)])
    shm = shm.replace('inputs { name: "x" datatype: "FP32" shape: 1 shape: 4  }',
                      'inputs { name: "x" datatype: "FP32" shape: 1 shape: 4 parameters { key: '
                      '"shared_memory_region" value { string_param: "r" } } parameters { key: '
                      '"shared_memory_byte_size" value { int64_param: 16 } } }')
    seed(f, "infer_raw", encode(0, "ModelInferRequest", raw))
    seed(f, "infer_typed", encode(0, "ModelInferRequest", typed))
    seed(f, "infer_shared_memory", encode(0, "ModelInferRequest", shm))
    seed(f, "infer_bad_version", encode(0, "ModelInferRequest", raw.replace('id: "seed"', 'model_version: "x1" id: "seed"')))
    seed(f, "stream_raw", encode(1, "ModelInferRequest", raw))
    seed(f, "stream_typed", encode(1, "ModelInferRequest", typed))
    seed(f, "metadata", encode(2, "ModelMetadataRequest", 'name: "fuzz" version: "1"'))
    seed(f, "config", encode(3, "ModelConfigRequest", 'name: "fuzz"'))


def http_json_seeds():
    f = "oip_http_request_fuzzer"
    body = ('{"id": "seed", "inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4], '
            '"data": [[1, 2, 3, 4], [5, 6, 7, 8]]}, {"name": "offset", "datatype": "FP32", '
            '"shape": [2, 3], "data": [0, 0, 0, 0.5, 0.5, 0.5]}]}')
    seed(f, "infer_json", body)
    seed(f, "infer_outputs", body[:-1] + ', "outputs": [{"name": "probabilities", '
         '"parameters": {"binary_data": true}}], "parameters": {"priority": 1}}')
    header = ('{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], '
              '"parameters": {"binary_data_size": 16}}, {"name": "offset", "datatype": "FP32", '
              '"shape": [1, 3], "parameters": {"binary_data_size": 12}}], '
              '"parameters": {"binary_data_output": true}}')
    binary = struct.pack("<7f", 1, 2, 3, 4, 0, 0, 0)
    seed(f, "infer_binary", ("POST /v2/models/fuzz/versions/1/infer %d\n" % len(header)).encode()
         + header.encode() + binary)
    seed(f, "infer_int64", '{"inputs": [{"name": "x", "datatype": "INT64", "shape": [1, 4], '
         '"data": [1, 2, 3, 4]}]}')
    seed(f, "infer_nested_bad", '{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], '
         '"data": [[[[1e39]]]]}], "outputs": {}}')
    for name, line in [("metadata", "GET /v2/models/fuzz"), ("config", "GET /v2/models/fuzz/config"),
                       ("stats", "GET /v2/models/stats"), ("ready", "GET /v2/models/fuzz/versions/1/ready"),
                       ("server", "GET /v2"), ("health", "HEAD /v2/health/ready"),
                       ("quoted_name", "GET /v2/models/f%75zz/config"),
                       ("shared_memory", "GET /v2/systemsharedmemory/status")]:
        seed(f, name, line + "\n")
    seed(f, "index", 'POST /v2/repository/index\n{"ready": true}')
    seed(f, "load", 'POST /v2/repository/models/fuzz/load\n{"parameters": {"config": "{}"}}')


def http_seeds():
    f = "http_request_fuzzer"
    seed(f, "get_metrics", "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
    seed(f, "head_healthz", "HEAD /healthz?probe=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    seed(f, "http10", "GET /healthz HTTP/1.0\r\n\r\n")
    seed(f, "pipelined", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    seed(f, "post_body", "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
    seed(f, "chunked", "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
         "5\r\nhello\r\n0\r\n\r\n")
    seed(f, "gzip_coding", "POST /x HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nabc")
    seed(f, "expect_continue", "PUT /metrics HTTP/1.1\r\nExpect: 100-continue\r\n"
         "Content-Length: 3\r\n\r\nabc")
    seed(f, "too_long_body", "POST /metrics HTTP/1.1\r\nContent-Length: 999999\r\n\r\nabc")
    seed(f, "bad_request_line", "GET\t/ HTTP/9.9\r\n\r\n")
    seed(f, "partial", "GET /metrics HTTP/1.1\r\nHost: x\r\n")


def training_config_seeds():
    f = "training_config_fuzzer"
    # As protobuf's TextFormat wrote it into checkpoints, and as the core writes it.
    seed(f, "proto_printed", 'loss: LOSS_SOFTMAX_CROSS_ENTROPY\noutput: "logits"\noptimizer {\n'
         '  kind: OPTIMIZER_SGD\n  learning_rate: 0.02\n  momentum: 0.9\n  epsilon: 1e-08\n}\n'
         'reduction: GRADIENT_REDUCTION_ALLREDUCE\nsync_batch_norm: true\n'
         'checkpoint_dir: "/tmp/r\\303\\251sum\\303\\251"\n')
    seed(f, "every_field", 'loss: LOSS_MEAN_SQUARED_ERROR\noutput: "y"\noptimizer {\n'
         '  kind: OPTIMIZER_ADAM\n  learning_rate: 0.001\n  momentum: 0\n  nesterov: false\n'
         '  weight_decay: 0\n  beta1: 0.9\n  beta2: 0.999\n  epsilon: 1e-08\n  alpha: 0.99\n}\n'
         'reduction: GRADIENT_REDUCTION_PS\nps_device: "cpu:0"\nsync_batch_norm: false\n'
         'seed: 7\ncheckpoint_every_steps: 3\ncheckpoint_dir: "runs"\n'
         'non_finite_steps: NON_FINITE_STEPS_SKIP\n')
    seed(f, "unknown_fields", '# comment\nfuture { a: 1 b { c: "}" } }\nloss: 2\nx: "y"\n')
    seed(f, "unterminated", 'optimizer {\n  kind: OPTIMIZER_SGD\n')


def main():
    # Only this script's own seeds are rewritten: the other files of a corpus
    # (inputs kept from long runs, named by their SHA-1) stay.
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    npy_seeds()
    idx_seeds()
    onnx_seeds()
    config_seeds()
    v1_seeds()
    oip_grpc_seeds()
    http_json_seeds()
    http_seeds()
    training_config_seeds()


if __name__ == "__main__":
    main()
