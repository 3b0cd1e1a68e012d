"""replicad.tensors: the casts the client makes for each dtype a model's input takes, and the
round trip through replicad.v1.Tensor of every dtype replicad holds."""

import numpy as np
import pytest

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
    (np.uint8, pb.DATA_TYPE_UINT8), (np.bool_, pb.DATA_TYPE_BOOL)])
def test_every_dtype_round_trips(dtype, wire):
    array = (np.arange(6).reshape(2, 3) % 3).astype(dtype)
    tensor = to_tensor("t", array)
    assert tensor.dtype == wire
    assert len(tensor.raw) == array.nbytes
    back = from_tensor(tensor)
    assert back.dtype == array.dtype
    np.testing.assert_array_equal(back, array)
