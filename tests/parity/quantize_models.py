#!/usr/bin/env python3
"""Quantizes float ONNX models to int8 with ONNX Runtime's quantization tool, as users do.

It writes reference inputs and ONNX Runtime's outputs with them, for the int8 parity tests and
benchmarks.

Usage (.venv-triton's interpreter, scripts/triton-venv.sh: onnxruntime, onnx >= 1.13, which
onnxruntime.quantization imports, and Debian's torch, for export_torch_models' input specs):
    .venv-triton/bin/python tests/parity/quantize_models.py SRC_DIR OUT_DIR [--models a,b] [--force]

SRC_DIR holds float models as tests/parity/export_torch_models.py writes them:
SRC_DIR/NAME/model.onnx, whose inputs and outputs are those of NAME's entry in that script's
registry. Each model first goes through onnxruntime.quantization.quant_pre_process (symbolic and
ONNX shape inference, then ONNX Runtime's basic graph optimizations; all offline), which
quantize_static and quantize_dynamic warn about when it was skipped. Then, for a model whose
inputs are all float (images), it writes
    OUT_DIR/NAME_qdq/model.onnx      quantize_static(quant_format=QuantFormat.QDQ)
    OUT_DIR/NAME_qop/model.onnx      quantize_static(quant_format=QuantFormat.QOperator)
    OUT_DIR/NAME_qdq_per_channel/model.onnx
                                     quantize_static(quant_format=QuantFormat.QDQ,
                                                     per_channel=True): a scale per output
                                     channel of each weight, as users often choose
all calibrated (CalibrationMethod.MinMax) on CALIBRATION_SAMPLES seeded standard-normal inputs
of batch 1; and for a model with int64 token ids (bert_encoder)
    OUT_DIR/NAME_dynamic/model.onnx  quantize_dynamic, after giving each Gemm its own copy of a
                                     weight that other nodes also read (unshare_gemm_weights:
                                     quantize_dynamic would transpose a shared one in place)
Every other argument keeps ONNX Runtime's default; under onnxruntime 1.31.1 these are, for
quantize_static: activation_type QInt8, weight_type QInt8, per_channel False, reduce_range False,
extra_options ActivationSymmetric False and WeightSymmetric True (so int8 activations with a
calibrated zero point, int8 weights per tensor with zero point 0, int32 biases); and for
quantize_dynamic: weight_type QInt8 (symmetric, per tensor), uint8 activations (the only type it
supports), MatMulConstBOnly True. The opset stays the float model's (13, or 17 for transformers)
and dim 0 of every input and output stays "batch" (checked).

Beside each quantized model.onnx:
    b{B}_input_{i}.npy      inputs for batch B in 1, 8, made by export_torch_models.make_inputs
                            (seeded; float32 images, or int64 token ids and masks). The images
                            come from other seeds than the calibration inputs; the batch-1 files
                            equal the float export's b1_input_{i}.npy.
    b{B}_output_{j}.npy     ONNX Runtime's outputs for them on CPUExecutionProvider (default
                            session options, so default graph optimizations)
    manifest.json           input/output names, dtypes and shapes, files per batch, the
                            quantization call and its defaults, the float model's sha256, this
                            script's hash and the onnxruntime and onnx versions
The manifest is written last; a model whose manifest names this script's hash, the same float
model and the same onnxruntime and onnx versions, and whose files all exist, is skipped, so reruns
are cheap. Exit status: 0 when every requested model was quantized (or cached), 1 otherwise; a
model that fails is reported on stderr and the others are still quantized.
"""

import argparse
import hashlib
import inspect
import json
import os
import sys
import tempfile
import time
import traceback

import numpy as np
import onnx
import onnxruntime
from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                      quant_pre_process, quantize_dynamic, quantize_static)

from export_torch_models import make_inputs, registry_entry

BATCHES = (1, 8)
CALIBRATION_SAMPLES = 16
DEFAULT_MODELS = ("resnet18", "mobilenet_v2")
# The keyword arguments of quantize_static and quantize_dynamic left at their defaults, recorded
# in the manifest as this onnxruntime has them.
DEFAULTED_ARGS = ("activation_type", "weight_type", "per_channel", "reduce_range")


def sha256_of(path):
    """The hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_token_model(inputs):
    """Whether a model's input specs (export_torch_models' registry) include int64 token ids."""
    return any(len(spec) > 2 and spec[2] == "ids" for spec in inputs)


def variants_of(name, inputs):
    """[(output folder name, quantization record)] for model `name`: QDQ and QOperator static
    quantization for image models, dynamic quantization for token models."""
    if is_token_model(inputs):
        return [(f"{name}_dynamic", {"function": "quantize_dynamic",
                                     "defaults": defaults_of(quantize_dynamic)})]
    return [(f"{name}_{suffix}", {"function": "quantize_static", "quant_format": fmt.name,
                                  "calibrate_method": CalibrationMethod.MinMax.name,
                                  "calibration_samples": CALIBRATION_SAMPLES,
                                  "per_channel": per_channel,
                                  "defaults": defaults_of(quantize_static)})
            for suffix, fmt, per_channel in (("qdq", QuantFormat.QDQ, False),
                                             ("qop", QuantFormat.QOperator, False),
                                             ("qdq_per_channel", QuantFormat.QDQ, True))]


def defaults_of(function):
    """The defaults of DEFAULTED_ARGS in `function`'s signature (QuantType values by name)."""
    parameters = inspect.signature(function).parameters
    return {k: getattr(parameters[k].default, "name", parameters[k].default)
            for k in DEFAULTED_ARGS if k in parameters}


class SeededCalibration(CalibrationDataReader):
    """CALIBRATION_SAMPLES inputs of batch 1, each from its own seed (make_inputs seeds the
    reference inputs from the model's name and batch alone, so none is shared)."""

    def __init__(self, name, inputs):
        self.name = name
        self.inputs = inputs
        self.sample = 0

    def get_next(self):
        if self.sample == CALIBRATION_SAMPLES:
            return None
        arrays = make_inputs(f"{self.name}/calibration/{self.sample}", self.inputs, 1)
        self.sample += 1
        return {spec[0]: a for spec, a in zip(self.inputs, arrays)}


def unshare_gemm_weights(model_path):
    """Gives every Gemm with transB=1 its own copy of a weight initializer that other nodes also
    read, in place; returns the number of copies made.

    quantize_dynamic turns such a Gemm into MatMul by transposing its weight initializer in
    place, assuming no other node reads it (onnxruntime/quantization/onnx_model.py,
    __replace_gemm_with_matmul). bert_encoder's 4 encoder layers are copies of one layer, so
    torch.onnx.export keeps one out_proj weight and feeds the other layers through Identity
    nodes (quant_pre_process then shares it directly); the layers that read the transposed
    initializer would multiply by the untransposed weight (logits 80 % off in rel L2)."""
    model = onnx.load(model_path)
    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    readers = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    copies = 0
    for index, node in enumerate(graph.node):
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        if node.op_type != "Gemm" or trans_b != 1 or readers.get(node.input[1], 0) < 2:
            continue
        weight = node.input[1]
        if weight not in initializers:
            continue
        copy = onnx.TensorProto()
        copy.CopyFrom(initializers[weight])
        copy.name = f"{weight}_gemm{index}"
        graph.initializer.append(copy)
        node.input[1] = copy.name
        readers[weight] -= 1
        copies += 1
    if copies:
        onnx.save(model, model_path)
    return copies


def quantize(name, inputs, record, src_model, dst_model):
    """Runs quant_pre_process on `src_model`, then the quantization `record` names, into
    `dst_model`. Returns the number of weights unshare_gemm_weights copied (dynamic only)."""
    copies = 0
    with tempfile.TemporaryDirectory(dir=os.path.dirname(dst_model)) as tmp:
        pre = os.path.join(tmp, "pre.onnx")
        quant_pre_process(src_model, pre)
        out = os.path.join(tmp, "model.onnx")
        if record["function"] == "quantize_dynamic":
            copies = unshare_gemm_weights(pre)
            quantize_dynamic(pre, out)
        else:
            quantize_static(pre, out, SeededCalibration(name, inputs),
                            quant_format=QuantFormat[record["quant_format"]],
                            calibrate_method=CalibrationMethod[record["calibrate_method"]],
                            per_channel=record["per_channel"])
        os.replace(out, dst_model)
    return copies


def check_batch_dim(model_path):
    """Raises unless dim 0 of every graph input and output is the symbolic "batch"."""
    graph = onnx.load(model_path, load_external_data=False).graph
    for value in list(graph.input) + list(graph.output):
        dims = value.type.tensor_type.shape.dim
        if not dims or dims[0].dim_param != "batch":
            raise RuntimeError(f"{model_path}: dim 0 of {value.name} is not \"batch\"")


def opset_of(model_path):
    """The ai.onnx opset a model imports."""
    model = onnx.load(model_path, load_external_data=False)
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def run_onnxruntime(model_path, input_names, arrays):
    """ONNX Runtime's outputs (CPU, default session options) for `arrays`."""
    session = onnxruntime.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip(input_names, arrays)))


def script_hash():
    """The sha256 of this script."""
    return sha256_of(os.path.abspath(__file__))


def _cached(model_dir, digest, source_sha256):
    """Whether model_dir's manifest matches this script, the float model and the versions, and
    every file it names exists."""
    try:
        with open(os.path.join(model_dir, "manifest.json")) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return False
    if (manifest.get("script_sha256") != digest
            or manifest.get("source", {}).get("sha256") != source_sha256
            or manifest.get("onnxruntime") != onnxruntime.__version__
            or manifest.get("onnx") != onnx.__version__):
        return False
    files = [manifest.get("model", "")]
    for entry in manifest.get("batches", []):
        files += entry["inputs"] + entry["outputs"]
    return all(os.path.isfile(os.path.join(model_dir, f)) for f in files)


def quantize_one(name, src_dir, out_dir, digest, force):
    """Writes every quantized variant of model `name` (variants_of) with its references."""
    _, inputs, output_names = registry_entry(name)
    src_model = os.path.join(src_dir, name, "model.onnx")
    source_sha256 = sha256_of(src_model)
    input_names = [spec[0] for spec in inputs]
    for variant, record in variants_of(name, inputs):
        model_dir = os.path.join(out_dir, variant)
        if not force and _cached(model_dir, digest, source_sha256):
            print(f"{variant}: cached", flush=True)
            continue
        start = time.monotonic()
        os.makedirs(model_dir, exist_ok=True)
        manifest_path = os.path.join(model_dir, "manifest.json")
        if os.path.exists(manifest_path):
            os.remove(manifest_path)  # Stale until rewritten below.
        model_path = os.path.join(model_dir, "model.onnx")
        copies = quantize(name, inputs, record, src_model, model_path)
        check_batch_dim(model_path)
        batches = []
        for batch in BATCHES:
            arrays = make_inputs(name, inputs, batch)
            results = run_onnxruntime(model_path, input_names, arrays)
            if len(results) != len(output_names):
                raise RuntimeError(f"{variant}: {len(results)} outputs, expected "
                                   f"{len(output_names)}")
            entry = {"batch": batch, "inputs": [], "outputs": []}
            for i, a in enumerate(arrays):
                entry["inputs"].append(f"b{batch}_input_{i}.npy")
                np.save(os.path.join(model_dir, entry["inputs"][-1]), a)
            for j, r in enumerate(results):
                entry["outputs"].append(f"b{batch}_output_{j}.npy")
                np.save(os.path.join(model_dir, entry["outputs"][-1]), r)
            batches.append(entry)
        manifest = {
            "name": variant,
            "model": "model.onnx",
            "opset": opset_of(model_path),
            "source": {"name": name, "sha256": source_sha256},
            "quantization": dict(record, pre_process=True, unshared_gemm_weights=copies),
            "inputs": [{"name": n, "dtype": str(a.dtype), "shape": ["batch"] + list(a.shape[1:])}
                       for n, a in zip(input_names, arrays)],
            "outputs": [{"name": n, "dtype": str(r.dtype), "shape": ["batch"] + list(r.shape[1:])}
                        for n, r in zip(output_names, results)],
            "batches": batches,
            "script_sha256": digest,
            "onnxruntime": onnxruntime.__version__,
            "onnx": onnx.__version__,
        }
        with tempfile.NamedTemporaryFile("w", dir=model_dir, delete=False, suffix=".tmp") as f:
            json.dump(manifest, f, indent=1)
        os.replace(f.name, manifest_path)
        print(f"{variant}: quantized in {time.monotonic() - start:.1f} s", flush=True)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("src_dir", help="where the float NAME/model.onnx folders are")
    parser.add_argument("out_dir", help="where NAME_qdq/, NAME_qop/, NAME_dynamic/ are written")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help="comma-separated names of export_torch_models' registry "
                        f"(default {','.join(DEFAULT_MODELS)}; bert_encoder for dynamic "
                        "quantization)")
    parser.add_argument("--force", action="store_true", help="ignore the cache")
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = []
    for n in names:
        try:
            registry_entry(n)
        except KeyError:
            unknown.append(n)
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}: not in export_torch_models.py")
    digest = script_hash()
    failed = []
    for name in names:
        try:
            quantize_one(name, args.src_dir, args.out_dir, digest, args.force)
        except Exception:  # One model's failure must not stop the others.
            traceback.print_exc()
            print(f"{name}: FAILED", file=sys.stderr, flush=True)
            failed.append(name)
    if failed:
        print(f"quantization failed for: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
