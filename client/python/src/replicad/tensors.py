"""numpy arrays to and from replicad.v1.Tensor, and the casts the client allows itself.

replicad's tensors are float32, int64, int32, int8, uint8 or bool. The client casts what
converts without surprise: float16/float64 to float32 (as Keras does), and integers to the
integer type the model's input takes (int64 unless it says otherwise), checking the range;
bool arrays go to bool inputs. Anything else (complex, strings, objects) is refused here,
before a call. A float array sent where the model takes integers (or the reverse) is not cast:
the server answers INVALID_ARGUMENT naming the input, the expected and the received type.
"""

import numpy as np

from replicad.v1 import replicad_pb2 as pb

_NUMPY = {pb.DATA_TYPE_FLOAT32: np.dtype("<f4"), pb.DATA_TYPE_INT64: np.dtype("<i8"),
          pb.DATA_TYPE_INT32: np.dtype("<i4"), pb.DATA_TYPE_INT8: np.dtype("i1"),
          pb.DATA_TYPE_UINT8: np.dtype("u1"), pb.DATA_TYPE_BOOL: np.dtype("bool")}
_WIRE = {numpy_type.newbyteorder("="): wire for wire, numpy_type in _NUMPY.items()}
_INTEGERS = ("int64", "int32", "int8", "uint8")


def dtype_name(wire_type):
    """'float32', 'int64', 'int32', 'int8', 'uint8' or 'bool' for a replicad.v1.DataType, else
    its enum name."""
    numpy_type = _NUMPY.get(wire_type)
    return numpy_type.name if numpy_type is not None else pb.DataType.Name(wire_type)


def as_array(value, what, want=None):
    """`value` (a numpy array, a PyTorch tensor, a list) as a numpy array replicad takes.

    `what` names it in errors ("input 'x'", "targets"); `want` is the dtype name the model's
    input takes ("int32", "bool", ...), or None (floats to float32, integers to int64).
    """
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch.Tensor, without importing torch
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    kind = array.dtype.kind
    if kind == "f":
        return array.astype(np.float32, copy=False)
    if kind == "b" and want == "bool":
        return array
    if kind in "iu":
        target = want if want in _INTEGERS else "int64"
        limits = np.iinfo(target)
        if array.size and (int(array.min()) < limits.min or int(array.max()) > limits.max):
            raise ValueError(f"{what}: values in [{array.min()}, {array.max()}] do not fit "
                             f"{target} ([{limits.min}, {limits.max}])")
        return array.astype(target, copy=False)
    raise TypeError(f"{what}: expected a float or integer array"
                    f"{' (or bool)' if want == 'bool' else ''}, received dtype {array.dtype}")


def to_tensor(name, array):
    """A replicad.v1.Tensor holding `array` (of a dtype replicad takes, see as_array)."""
    array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return pb.Tensor(name=name, dtype=_WIRE[array.dtype.newbyteorder("=")],
                     shape=array.shape, raw=array.tobytes())


def from_tensor(tensor):
    """The numpy array a replicad.v1.Tensor holds (a copy the caller owns)."""
    numpy_type = _NUMPY.get(tensor.dtype)
    if numpy_type is None:
        raise ValueError(f"output '{tensor.name}': unsupported dtype {dtype_name(tensor.dtype)}")
    shape = tuple(tensor.shape)
    expected = int(np.prod(shape, dtype=np.int64)) * numpy_type.itemsize
    if len(tensor.raw) != expected:
        raise ValueError(f"output '{tensor.name}': shape {list(shape)} needs {expected} bytes, "
                         f"received {len(tensor.raw)}")
    return np.frombuffer(tensor.raw, dtype=numpy_type).reshape(shape).astype(
        numpy_type.newbyteorder("="))
