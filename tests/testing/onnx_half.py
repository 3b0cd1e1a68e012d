"""A float32 ONNX model rewritten as a float16 (or bfloat16) one, as users convert theirs.

`to_half(model, bfloat16=False)` turns every float32 tensor of the graph into float16: the
inputs and outputs, initializers, value_info, Constant values and Cast targets. That is what
onnxconverter-common's `convert_float_to_float16(model, keep_io_types=False)` writes for a
network of ops that all take float16 (torchvision's classifiers: Conv, Relu, MaxPool, Add,
GlobalAveragePool, Flatten, Gemm), and what `torch.onnx.export` writes for `model.half()` on a
GPU. bfloat16 values are float32's rounded to nearest even, as PyTorch rounds them.
"""

import numpy as np
from onnx import TensorProto, numpy_helper


def float_to_bfloat16_bits(array):
    """float32 values -> bfloat16 bit patterns (uint16), rounded to nearest even."""
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, ((bits >> 16) | 0x40).astype(np.uint16), rounded)


def bfloat16_bits_to_float(bits):
    """bfloat16 bit patterns (uint16) -> float32 values."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _half_tensor(tensor, bfloat16):
    values = numpy_helper.to_array(tensor)
    out = TensorProto()
    out.name = tensor.name
    out.dims.extend(tensor.dims)
    if bfloat16:
        out.data_type = TensorProto.BFLOAT16
        out.raw_data = float_to_bfloat16_bits(values).tobytes()
    else:
        out.data_type = TensorProto.FLOAT16
        out.raw_data = values.astype("<f2").tobytes()
    return out


def _convert_graph(graph, target, bfloat16):
    for i, init in enumerate(graph.initializer):
        if init.data_type == TensorProto.FLOAT:
            graph.initializer[i].CopyFrom(_half_tensor(init, bfloat16))
    for infos in (graph.input, graph.output, graph.value_info):
        for info in infos:
            if info.type.tensor_type.elem_type == TensorProto.FLOAT:
                info.type.tensor_type.elem_type = target
    for node in graph.node:
        for attr in node.attribute:
            if attr.name == "to" and node.op_type == "Cast" and attr.i == TensorProto.FLOAT:
                attr.i = target
            if attr.HasField("t") and attr.t.data_type == TensorProto.FLOAT:
                attr.t.CopyFrom(_half_tensor(attr.t, bfloat16))
            for sub in attr.graphs:
                _convert_graph(sub, target, bfloat16)
            if attr.HasField("g"):
                _convert_graph(attr.g, target, bfloat16)


def to_half(model, bfloat16=False):
    """The float16 (bfloat16) form of `model`, an onnx.ModelProto (changed in place, returned)."""
    _convert_graph(model.graph, TensorProto.BFLOAT16 if bfloat16 else TensorProto.FLOAT16,
                   bfloat16)
    return model
