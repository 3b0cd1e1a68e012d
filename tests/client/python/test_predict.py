"""predict against a real daemon: a torchvision model equals PyTorch, large arrays are cut
into requests and reassembled in order, and models with several inputs take dicts and
lists."""

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "parity"))
from export_torch_models import build_model, export_onnx  # noqa: E402

# Relative L2 against PyTorch, as tests/parity states it for every model there.
PARITY_TOLERANCE = 1e-4


def relative_l2(actual, expected):
    return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30))


def export(tmp_path, name):
    model, inputs, outputs = build_model(name)
    path = str(tmp_path / f"{name}.onnx")
    export_onnx(model, inputs, outputs, path)
    return model, inputs, outputs, path


def test_torchvision_model_equals_pytorch_in_batches(tmp_path, serve, client_of):
    model, inputs, outputs, path = export(tmp_path, "resnet18")
    (input_name, shape), = inputs
    x = np.random.default_rng(15).standard_normal((10,) + tuple(shape)).astype(np.float32)
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    client = client_of(serve("--model", f"resnet18={path}"))
    info = client.model("resnet18")
    assert [s.name for s in info.inputs] == [input_name] and info.inputs[0].shape[0] is None
    whole = client.predict("resnet18", x)[outputs[0]]
    cut = client.predict("resnet18", x, batch_size=4)[outputs[0]]  # 3 requests: 4, 4, 2
    assert cut.shape == expected.shape
    assert relative_l2(whole, expected) <= PARITY_TOLERANCE
    for begin in range(0, 10, 4):  # every request's rows sit where they belong
        assert relative_l2(cut[begin:begin + 4], expected[begin:begin + 4]) <= PARITY_TOLERANCE


def test_large_arrays_keep_their_order(serve, client_of, fashion_mnist):
    x = fashion_mnist[2][:3000]
    client = client_of(serve())
    whole = client.predict("default", x)
    cut = client.predict("default", x, batch_size=700)  # 5 requests, 2 in flight
    rows = client.predict("default", x[[0, 1234, 2999]])["probabilities"]
    assert set(whole) == {"logits", "probabilities"}
    for name in whole:
        assert cut[name].shape == (3000, 10)
        np.testing.assert_allclose(cut[name], whole[name], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cut["probabilities"][[0, 1234, 2999]], rows, rtol=1e-5,
                               atol=1e-6)
    only = client.predict("default", x[:5], outputs=["probabilities"])
    assert list(only) == ["probabilities"]


def test_two_inputs_by_dict_or_list(tmp_path, serve, client_of):
    model, inputs, outputs, path = export(tmp_path, "siamese_pair")
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((5,) + tuple(shape)).astype(np.float32)
              for _, shape in inputs]
    with torch.no_grad():
        expected = model(*[torch.from_numpy(a) for a in arrays])
    expected = expected if isinstance(expected, tuple) else (expected,)
    client = client_of(serve("--model", f"pair={path}"))
    by_dict = client.predict("pair", {name: a for (name, _), a in zip(inputs, arrays)})
    by_list = client.predict("pair", arrays, batch_size=2)
    for name, reference in zip(outputs, expected):
        assert relative_l2(by_dict[name], reference.numpy()) <= PARITY_TOLERANCE
        assert relative_l2(by_list[name], reference.numpy()) <= PARITY_TOLERANCE


def test_float16_and_bfloat16_models_take_and_give_their_types(tmp_path, serve, client_of):
    """A float16 and a bfloat16 model over replicad.v1: float arrays go as the input's type,
    outputs come back in the model's (float16; ml_dtypes.bfloat16), within 1e-2 (float16) and
    2e-2 (bfloat16) relative L2 of PyTorch's float32 on the same rounded inputs; an integer
    array for the float16 input is refused naming the input and both types."""
    import ml_dtypes
    import onnx
    import pytest
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "testing"))
    from onnx_half import to_half  # pylint: disable=import-outside-toplevel

    torch.manual_seed(39)
    module = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(),
                                 torch.nn.Linear(8, 4)).eval()
    fp32 = str(tmp_path / "mlp.onnx")
    torch.onnx.export(module, torch.zeros(1, 16), fp32, opset_version=17, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    paths = {}
    for name, bfloat16 in (("half", False), ("brain", True)):
        paths[name] = str(tmp_path / f"{name}.onnx")
        onnx.save(to_half(onnx.load(fp32), bfloat16=bfloat16), paths[name])
    client = client_of(serve("--model", f"half={paths['half']}", "--model",
                             f"brain={paths['brain']}"))
    assert client.model("half").inputs[0].dtype == "float16"
    assert client.model("half").precision == "fp32"  # Computed in float32 inside.
    assert client.model("brain").outputs[0].dtype == "bfloat16"
    x = np.random.default_rng(39).standard_normal((6, 16)).astype(np.float32)
    for name, numpy_type, bound in (("half", np.float16, 1e-2),
                                    ("brain", ml_dtypes.bfloat16, 2e-2)):
        y = client.predict(name, x)["y"]
        assert y.dtype == numpy_type and y.shape == (6, 4)
        rounded = x.astype(numpy_type).astype(np.float32)
        with torch.no_grad():
            expected = module(torch.from_numpy(rounded)).numpy()
        assert relative_l2(y.astype(np.float32), expected) <= bound
    with pytest.raises(Exception, match=r"'x'.*expected float16, received int64"):
        client.predict("half", np.ones((2, 16), dtype=np.int64))


def test_the_model_says_its_precision(serve, client_of):
    """GetModel's precision: what --precision marked the model's products with."""
    assert client_of(serve()).model("default").precision == "fp32"
    assert client_of(serve("--precision", "bf16")).model("default").precision == "bf16"
