"""numpy arrays to and from replicad.v1.Tensor, and the casts the client allows itself.

replicad's tensors are float32 or int64. The client casts what converts without surprise:
float16/float64 to float32 (as Keras does) and narrower or unsigned integers to int64.
Anything else (bool, complex, strings, objects) is refused here, before a call. A float
array sent where the model takes int64 (or the reverse) is not cast: the server answers
INVALID_ARGUMENT naming the input, the expected and the received type.
"""

import numpy as np

from replicad.v1 import replicad_pb2 as pb

_WIRE = {np.dtype(np.float32): pb.DATA_TYPE_FLOAT32, np.dtype(np.int64): pb.DATA_TYPE_INT64}
_NUMPY = {pb.DATA_TYPE_FLOAT32: np.dtype("<f4"), pb.DATA_TYPE_INT64: np.dtype("<i8")}


def dtype_name(wire_type):
    """'float32' or 'int64' for a replicad.v1.DataType, else its enum name."""
    numpy_type = _NUMPY.get(wire_type)
    return numpy_type.name if numpy_type is not None else pb.DataType.Name(wire_type)


def as_array(value, what):
    """`value` (a numpy array, a PyTorch tensor, a list) as a float32 or int64 numpy array.

    `what` names it in errors ("input 'x'", "targets").
    """
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch.Tensor, without importing torch
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    kind = array.dtype.kind
    if kind == "f":
        return array.astype(np.float32, copy=False)
    if kind in "iu":
        if array.dtype == np.uint64 and array.size and array.max() > np.iinfo(np.int64).max:
            raise ValueError(f"{what}: uint64 values above 2^63-1 do not fit int64")
        return array.astype(np.int64, copy=False)
    raise TypeError(f"{what}: expected a float or integer array, received dtype {array.dtype}")


def to_tensor(name, array):
    """A replicad.v1.Tensor holding `array` (already float32 or int64, see as_array)."""
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
