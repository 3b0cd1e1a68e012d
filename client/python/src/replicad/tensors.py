"""numpy arrays to and from replicad.v1.Tensor, and the casts the client allows itself.

replicad's tensors are float32, float16, bfloat16, int64, int32, int8, uint8 or bool. The
client casts what converts without surprise: floats to the float type the model's input takes
(float32 unless it says float16 or bfloat16; float64 to float32 as Keras does), and integers to
the integer type the model's input takes (int64 unless it says otherwise), checking the range;
bool arrays go to bool inputs. Anything else (complex, strings, objects) is refused here,
before a call. A float array sent where the model takes integers (or the reverse) is not cast:
the server answers INVALID_ARGUMENT naming the input, the expected and the received type.

bfloat16 arrays are ml_dtypes.bfloat16 when ml_dtypes is installed (what JAX and TensorFlow
use). Without it, an array for a bfloat16 input is rounded here from float32 (to nearest even,
as PyTorch rounds), and a bfloat16 output comes back as float32 holding the same values.
"""

import numpy as np

from replicad.v1 import replicad_pb2 as pb

try:
    import ml_dtypes  # pylint: disable=import-error
    _BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:
    _BFLOAT16 = None

# Without ml_dtypes, bfloat16 values travel between as_array and to_tensor as their bits under
# this marker dtype (never handed to the caller).
_BFLOAT16_BITS = np.dtype([("bfloat16", "<u2")])

_NUMPY = {pb.DATA_TYPE_FLOAT32: np.dtype("<f4"), pb.DATA_TYPE_INT64: np.dtype("<i8"),
          pb.DATA_TYPE_INT32: np.dtype("<i4"), pb.DATA_TYPE_INT8: np.dtype("i1"),
          pb.DATA_TYPE_UINT8: np.dtype("u1"), pb.DATA_TYPE_BOOL: np.dtype("bool"),
          pb.DATA_TYPE_FLOAT16: np.dtype("<f2")}
_WIRE = {numpy_type.newbyteorder("="): wire for wire, numpy_type in _NUMPY.items()}
_WIRE[_BFLOAT16_BITS] = pb.DATA_TYPE_BFLOAT16
if _BFLOAT16 is not None:
    _WIRE[_BFLOAT16] = pb.DATA_TYPE_BFLOAT16
_INTEGERS = ("int64", "int32", "int8", "uint8")
_NAMES = {pb.DATA_TYPE_BFLOAT16: "bfloat16"}


def dtype_name(wire_type):
    """'float32', 'float16', 'bfloat16', 'int64', 'int32', 'int8', 'uint8' or 'bool' for a
    replicad.v1.DataType, else its enum name."""
    if wire_type in _NAMES:
        return _NAMES[wire_type]
    numpy_type = _NUMPY.get(wire_type)
    return numpy_type.name if numpy_type is not None else pb.DataType.Name(wire_type)


def _bfloat16(array):
    """A float array rounded to bfloat16: ml_dtypes' type, or the bits under _BFLOAT16_BITS."""
    if _BFLOAT16 is not None:
        return array.astype(_BFLOAT16)
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    rounded = np.where(nan, ((bits >> 16) | 0x40).astype(np.uint16), rounded)
    return rounded.view(_BFLOAT16_BITS)


def as_array(value, what, want=None):
    """`value` (a numpy array, a PyTorch tensor, a list) as a numpy array replicad takes.

    `what` names it in errors ("input 'x'", "targets"); `want` is the dtype name the model's
    input takes ("int32", "bool", ...), or None (floats to float32, integers to int64).
    """
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch.Tensor, without importing torch
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    kind = array.dtype.kind
    if kind == "f" or array.dtype == _BFLOAT16:
        if want == "bfloat16":
            return array if array.dtype == _BFLOAT16 else _bfloat16(array)
        return array.astype(np.float16 if want == "float16" else np.float32, copy=False)
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
    if array.dtype.fields is None:
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    else:
        array = np.ascontiguousarray(array)
    return pb.Tensor(name=name, dtype=_WIRE[array.dtype.newbyteorder("=")
                                            if array.dtype.fields is None else array.dtype],
                     shape=array.shape, raw=array.tobytes())


def from_tensor(tensor):
    """The numpy array a replicad.v1.Tensor holds (a copy the caller owns)."""
    if tensor.dtype == pb.DATA_TYPE_BFLOAT16:
        return _from_bfloat16(tensor)
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


def _from_bfloat16(tensor):
    """A bfloat16 output: ml_dtypes.bfloat16, else float32 holding the same values."""
    shape = tuple(tensor.shape)
    expected = int(np.prod(shape, dtype=np.int64)) * 2
    if len(tensor.raw) != expected:
        raise ValueError(f"output '{tensor.name}': shape {list(shape)} needs {expected} bytes, "
                         f"received {len(tensor.raw)}")
    bits = np.frombuffer(tensor.raw, dtype="<u2").reshape(shape)
    if _BFLOAT16 is not None:
        return bits.astype(np.uint16).view(_BFLOAT16).copy()
    return (bits.astype(np.uint32) << 16).view(np.float32)
