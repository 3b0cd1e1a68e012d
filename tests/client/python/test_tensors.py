"""replicad.tensors: the casts the client makes for each dtype a model's input takes, and the
round trip through replicad.v1.Tensor of every dtype replicad holds."""

import numpy as np
import pytest

from replicad import tensors
from replicad.tensors import as_array, from_tensor, to_tensor
from replicad.v1 import replicad_pb2 as pb


def test_integers_go_to_the_type_the_input_takes():
    ids = np.array([[1, 2], [3, 4]], dtype=np.int64)
    assert as_array(ids, "input 'ids'").dtype == np.int64
    assert as_array(ids, "input 'ids'", "int32").dtype == np.int32
    assert as_array(ids.astype(np.uint16), "input 'ids'", "uint8").dtype == np.uint8
    assert as_array([0.5, 1.5], "input 'x'", "int32").dtype == np.float32  # Floats are not cast.
    with pytest.raises(ValueError, match=r"do not fit int8 \(\[-128, 127\]\)"):
        as_array(np.array([0, 300]), "input 'ids'", "int8")


def test_bool_arrays_go_only_to_bool_inputs():
    mask = np.array([True, False])
    assert as_array(mask, "input 'mask'", "bool").dtype == np.bool_
    with pytest.raises(TypeError, match="received dtype bool"):
        as_array(mask, "input 'x'", "float32")


@pytest.mark.parametrize("dtype, wire", [
    (np.float32, pb.DATA_TYPE_FLOAT32), (np.int64, pb.DATA_TYPE_INT64),
    (np.int32, pb.DATA_TYPE_INT32), (np.int8, pb.DATA_TYPE_INT8),
    (np.uint8, pb.DATA_TYPE_UINT8), (np.bool_, pb.DATA_TYPE_BOOL),
    (np.float16, pb.DATA_TYPE_FLOAT16)])
def test_every_dtype_round_trips(dtype, wire):
    array = (np.arange(6).reshape(2, 3) % 3).astype(dtype)
    tensor = to_tensor("t", array)
    assert tensor.dtype == wire
    assert len(tensor.raw) == array.nbytes
    back = from_tensor(tensor)
    assert back.dtype == array.dtype
    np.testing.assert_array_equal(back, array)


def test_floats_go_to_the_float_type_the_input_takes():
    x = np.array([1.0, 1.0 + 2.0 ** -11, 65504.0], dtype=np.float64)
    half = as_array(x, "input 'x'", "float16")
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, x.astype(np.float16))  # Ties to even: 1 + 2^-11 -> 1.
    assert as_array(half, "input 'x'").dtype == np.float32


def _bfloat16_bits(values):
    """bfloat16 bits by the definition: round float32 to 8 significant bits, ties to even."""
    out = []
    for v in np.asarray(values, dtype=np.float32):
        bits = int(np.array(v).view(np.uint32))
        upper, lower = bits >> 16, bits & 0xFFFF
        if lower > 0x8000 or (lower == 0x8000 and upper & 1):
            upper += 1
        out.append(upper)
    return out


@pytest.mark.parametrize("with_ml_dtypes", [True, False])
def test_bfloat16_rounds_to_nearest_even_and_comes_back(monkeypatch, with_ml_dtypes):
    if with_ml_dtypes:
        pytest.importorskip("ml_dtypes")
    else:
        monkeypatch.setattr(tensors, "_BFLOAT16", None)
    x = np.array([[1.0, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8], [-2.5, 3.0e38, 1.0e-40]],
                 dtype=np.float32)
    tensor = to_tensor("t", as_array(x, "input 'x'", "bfloat16"))
    assert tensor.dtype == pb.DATA_TYPE_BFLOAT16
    assert list(np.frombuffer(tensor.raw, dtype="<u2")) == _bfloat16_bits(x.ravel())
    back = from_tensor(tensor)
    assert back.shape == (2, 3)
    expected = (np.array(_bfloat16_bits(x.ravel()), dtype=np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(np.asarray(back, dtype=np.float32).ravel(), expected)
    if not with_ml_dtypes:
        assert back.dtype == np.float32
