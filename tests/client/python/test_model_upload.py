"""Bring your own model (issue #40): load_model sends a PyTorch module (exported for training),
an onnx.ModelProto, bytes or a file to the server (LoadModel, written under
--model-upload-root); predict answers as PyTorch does; what the server trains comes back into
the module with load_weights_into; get_model streams the model back at any size; and what the
server refuses reaches the caller with its code and message, loading nothing."""

import json
import subprocess
import sys

import grpc
import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from torch import nn

import replicad
from replicad import model_files
from replicad.v1 import replicad_pb2 as pb
from replicad.v1 import replicad_pb2_grpc as pb_grpc

ADMIN_TOKEN = "admin-token-0123456789abcdef"
TRAIN_TOKEN = "train-token-abcdefghijklmnop"
TOLERANCE = 1e-5


class SmallCnn(nn.Module):
    """A CNN for 8x8x1 images with BatchNormalization and Dropout, 3 classes."""

    def __init__(self, classes=3):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4),
                                      nn.ReLU(), nn.MaxPool2d(2))
        self.dropout = nn.Dropout(0.25)
        self.fc = nn.Linear(4 * 4 * 4, classes)

    def forward(self, image):
        return self.fc(self.dropout(torch.flatten(self.features(image), 1)))


class TiedNet(nn.Module):
    """An embedding whose weight the output layer shares, and a layer forward never uses."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(10, 4)
        self.out = nn.Linear(4, 10, bias=False)
        self.out.weight = self.embedding.weight
        self.unused = nn.Linear(2, 2)

    def forward(self, ids):
        return self.out(torch.tanh(self.embedding(ids)))


def small_cnn(seed=40, classes=3):
    torch.manual_seed(seed)
    net = SmallCnn(classes)
    with torch.no_grad():  # Running statistics other than 0 and 1, so that copying them shows.
        net.features[1].running_mean.uniform_(-0.5, 0.5)
        net.features[1].running_var.uniform_(0.5, 2.0)
    return net


def images(n, seed=0):
    return np.random.default_rng(seed).standard_normal((n, 1, 8, 8)).astype(np.float32)


def torch_eval(net, x):
    training = net.training
    net.eval()
    with torch.no_grad():
        y = net(torch.from_numpy(x)).numpy()
    net.train(training)
    return y


def state_of(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def assert_state_equal(module, state):
    now = module.state_dict()
    assert list(now) == list(state)
    for key, value in state.items():
        assert torch.equal(now[key], value), key


def initializers(proto):
    return {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}


def upload_daemon(serve, tmp_path, *flags):
    return serve("--model-upload-root", str(tmp_path / "uploads"),
                 "--model-control-mode", "explicit", *flags)


# ---- The client alone ----------------------------------------------------------------------

def test_the_client_imports_neither_torch_nor_onnx():
    code = ("import sys, replicad; replicad.Client('localhost:1').close(); "
            "sys.exit(sorted({'torch', 'onnx'} & set(sys.modules)) != [])")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_export_is_for_training_and_leaves_the_module_as_it_was():
    net = small_cnn()
    net.train()
    net.features[1].eval()  # A frozen BatchNorm in a module that trains keeps its mode.
    before = state_of(net)
    proto = onnx.load_from_string(model_files.model_bytes(net, torch.zeros(2, 1, 8, 8)))
    assert_state_equal(net, before)  # The export's forward pass moved no running statistic.
    assert net.training and net.fc.training and not net.features[1].training
    assert proto.opset_import[0].version == model_files.OPSET
    assert [i.name for i in proto.graph.input] == ["image"]
    assert [o.name for o in proto.graph.output] == ["output"]
    for value in list(proto.graph.input) + list(proto.graph.output):
        assert value.type.tensor_type.shape.dim[0].dim_param == "batch", value.name
    batch_norm, = [n for n in proto.graph.node if n.op_type == "BatchNormalization"]
    assert {a.name: a.i for a in batch_norm.attribute}["training_mode"] == 1
    assert any(n.op_type == "Dropout" for n in proto.graph.node)
    weights = initializers(proto)
    for key, value in before.items():
        if key.endswith("num_batches_tracked"):
            continue
        np.testing.assert_array_equal(weights[key], value.numpy(), err_msg=key)
    names, = [json.loads(p.value) for p in proto.metadata_props
              if p.key == model_files.STATE_DICT_MAP]
    assert names["fc.weight"] == "fc.weight"
    assert names["features.1.num_batches_tracked"] is None


def test_load_state_refuses_a_mismatch_and_changes_nothing():
    proto = onnx.load_from_string(model_files.model_bytes(small_cnn(), torch.zeros(2, 1, 8, 8)))
    wider = small_cnn(seed=1, classes=4)
    deeper = small_cnn(seed=2)
    deeper.head = nn.Linear(3, 3)
    double = small_cnn(seed=3).double()
    for module, words in ((wider, ["'fc.weight'", "float32[4, 64]", "float32[3, 64]",
                                   "'fc.bias'"]),
                          (deeper, ["'head.weight'", "not an initializer", "'head.bias'"]),
                          (double, ["'features.0.weight'", "float64", "float32"])):
        before = state_of(module)
        with pytest.raises(ValueError) as raised:
            model_files.load_state_into(proto, module, "model 'cnn'")
        for word in words + ["model 'cnn'", "nothing was changed"]:
            assert word in str(raised.value), (word, str(raised.value))
        assert_state_equal(module, before)
    # A matching module takes every tensor: parameters and running statistics.
    for initializer in proto.graph.initializer:
        array = numpy_helper.to_array(initializer)
        initializer.CopyFrom(numpy_helper.from_array(array + 1, initializer.name))
    fresh = small_cnn(seed=5)
    before = state_of(fresh)
    copied = model_files.load_state_into(proto, fresh)
    assert "features.1.running_var" in copied and "features.1.num_batches_tracked" not in copied
    weights = initializers(proto)
    for key, value in fresh.state_dict().items():
        if key.endswith("num_batches_tracked"):
            assert torch.equal(value, before[key])
        else:
            np.testing.assert_array_equal(value.numpy(), weights[key], err_msg=key)


def test_tied_and_unused_parameters():
    torch.manual_seed(3)
    net = TiedNet()
    data = model_files.model_bytes(net, torch.zeros(2, 3, dtype=torch.int64))
    proto = onnx.load_from_string(data)
    assert "out.weight" not in initializers(proto)  # One initializer for the tied pair.
    names, = [json.loads(p.value) for p in proto.metadata_props
              if p.key == model_files.STATE_DICT_MAP]
    assert names["out.weight"] == "embedding.weight" and names["unused.weight"] is None
    for initializer in proto.graph.initializer:
        initializer.CopyFrom(numpy_helper.from_array(
            numpy_helper.to_array(initializer) * 2, initializer.name))
    unused = net.unused.weight.detach().clone()
    model_files.load_state_into(proto, net)
    assert torch.equal(net.out.weight, net.embedding.weight)
    np.testing.assert_array_equal(net.embedding.weight.detach().numpy(),
                                  initializers(proto)["embedding.weight"])
    assert torch.equal(net.unused.weight, unused)
    # Without the export's map (a file from elsewhere) the unused layer is a mismatch.
    del proto.metadata_props[:]
    with pytest.raises(ValueError, match="'unused.weight': not an initializer"):
        model_files.load_state_into(proto, net)


def test_models_of_every_kind_become_bytes(tmp_path):
    data = model_files.model_bytes(small_cnn(), torch.zeros(1, 1, 8, 8))
    path = tmp_path / "cnn.onnx"
    path.write_bytes(data)
    assert model_files.model_bytes(data) == data
    assert model_files.model_bytes(str(path)) == data
    assert model_files.model_bytes(path) == data
    assert onnx.load_from_string(model_files.model_bytes(onnx.load(str(path)))) == \
        onnx.load_from_string(data)
    with pytest.raises(ValueError, match="example_inputs: required"):
        model_files.model_bytes(small_cnn())
    with pytest.raises(ValueError, match="example_inputs: only for a torch.nn.Module"):
        model_files.model_bytes(data, torch.zeros(1))
    with pytest.raises(FileNotFoundError, match="absent.onnx"):
        model_files.model_bytes(str(tmp_path / "absent.onnx"))
    with pytest.raises(TypeError, match="model: expected a torch.nn.Module"):
        model_files.model_bytes(3)


def test_instances_become_the_configurations_instance_group():
    def groups(instances, config=None):
        return json.loads(model_files.config_json(config, instances))["instance_group"]

    assert model_files.config_json(None, None) == ""
    assert json.loads(model_files.config_json({"max_batch_size": 8}, None)) == \
        {"max_batch_size": 8}
    assert groups(2) == [{"count": 2, "kind": "KIND_AUTO"}]
    assert groups(["cpu", "cpu", "cpu"]) == [{"count": 3, "kind": "KIND_CPU"}]
    assert groups(["cuda:0", "cuda:1", "cuda:0", "cuda"]) == [
        {"count": 2, "kind": "KIND_GPU", "gpus": [0]},
        {"count": 1, "kind": "KIND_GPU", "gpus": [1]}, {"count": 1, "kind": "KIND_GPU"}]
    assert groups([{"count": 2, "kind": "KIND_CPU"}, "gpu:1"]) == [
        {"count": 2, "kind": "KIND_CPU"}, {"count": 1, "kind": "KIND_GPU", "gpus": [1]}]
    assert json.loads(model_files.config_json({"max_batch_size": 8}, 1)) == {
        "max_batch_size": 8, "instance_group": [{"count": 1, "kind": "KIND_AUTO"}]}
    for instances, error, words in ((0, ValueError, ">= 1"), ([], ValueError, "empty"),
                                    (["cpu:1"], ValueError, "a CPU slot is 'cpu'"),
                                    (["tpu:0"], ValueError, "'tpu:0'"),
                                    (True, TypeError, "bool"), ([1], TypeError, "int")):
        with pytest.raises(error, match=words):
            model_files.config_json(None, instances)
    with pytest.raises(ValueError, match="instance_group already"):
        model_files.config_json({"instance_group": []}, 1)


def test_download_joins_the_pieces_and_checks_their_size():
    class Stub:
        def __init__(self, chunks):
            self.chunks = chunks

        def DownloadModel(self, request, timeout, metadata):  # pylint: disable=invalid-name
            assert request.model == "m"
            return iter(self.chunks)

    client = replicad.Client("localhost:1")
    try:
        client._stub = Stub([pb.ModelChunk(data=b"abc", step=7, total_bytes=5),
                             pb.ModelChunk(data=b"de")])
        assert client.download_model("m") == (b"abcde", 7)
        client._stub = Stub([pb.ModelChunk(data=b"abc", step=7, total_bytes=6),
                             pb.ModelChunk(data=b"de")])
        with pytest.raises(replicad.DataLoss, match="received 5 bytes in 2 pieces.* 6"):
            client.download_model("m")
        client._stub = Stub([])
        with pytest.raises(replicad.DataLoss, match="announced none"):
            client.download_model("m")
    finally:
        client.close()


# ---- Against a daemon ----------------------------------------------------------------------

def test_upload_predict_train_and_copy_the_weights_back(tmp_path, serve, client_of):
    """A PyTorch CNN with BatchNorm: predict equals PyTorch's eval forward; after an epoch of
    fit on the server, load_weights_into makes PyTorch's forward equal the daemon's again."""
    net = small_cnn()
    client = client_of(upload_daemon(serve, tmp_path))
    client.load_model("cnn", net, example_inputs=torch.zeros(2, 1, 8, 8))
    assert "cnn" in [m.name for m in client.models()]
    info = client.model("cnn")
    assert [(s.name, s.shape) for s in info.inputs] == [("image", (None, 1, 8, 8))]
    assert [(s.name, s.shape) for s in info.outputs] == [("output", (None, 3))]
    x = images(12)
    np.testing.assert_allclose(client.predict("cnn", x)["output"], torch_eval(net, x),
                               rtol=TOLERANCE, atol=TOLERANCE)
    assert client.download_model("cnn")[1] == 0

    before = state_of(net)
    client.configure_training("cnn", optimizer="sgd", lr=0.05, momentum=0.9)
    rng = np.random.default_rng(1)
    x_train, y_train = images(64, seed=2), rng.integers(0, 3, 64)
    history = client.fit("cnn", x_train, y_train, batch_size=16, epochs=1, verbose=0)
    assert history.step == 4
    assert client.load_weights_into("cnn", net) == 4
    for key in ("features.0.weight", "fc.bias", "features.1.running_mean",
                "features.1.running_var"):
        assert not torch.equal(net.state_dict()[key], before[key]), key
    np.testing.assert_allclose(client.predict("cnn", x)["output"], torch_eval(net, x),
                               rtol=TOLERANCE, atol=TOLERANCE)
    # A module of another shape is refused, unchanged.
    other = small_cnn(classes=4)
    other_state = state_of(other)
    with pytest.raises(ValueError, match=r"'fc.weight'.*model 'cnn'"):
        client.load_weights_into("cnn", other)
    assert_state_equal(other, other_state)


def test_get_model_round_trip(tmp_path, serve, client_of):
    """A file uploaded by path comes back from get_model with the same graph and weights, and
    after a step with that step's weights."""
    path = tmp_path / "cnn.onnx"
    path.write_bytes(model_files.model_bytes(small_cnn(), torch.zeros(2, 1, 8, 8)))
    sent = onnx.load(str(path))
    client = client_of(upload_daemon(serve, tmp_path))
    client.load_model("cnn", str(path))
    back = client.get_model("cnn")
    assert isinstance(back, onnx.ModelProto)
    assert [n.op_type for n in back.graph.node] == [n.op_type for n in sent.graph.node]
    assert [i.name for i in back.graph.input] == [i.name for i in sent.graph.input]
    weights = initializers(back)
    for name, value in initializers(sent).items():
        np.testing.assert_array_equal(weights[name], value, err_msg=name)
    client.configure_training("cnn", optimizer="sgd", lr=0.1)
    step = client.train_step("cnn", images(8), np.arange(8) % 3)
    data, downloaded_step = client.download_model("cnn")
    assert downloaded_step == step.step == 1
    trained = initializers(onnx.load_from_string(data))
    assert not np.array_equal(trained["fc.weight"], initializers(sent)["fc.weight"])
    # The downloaded file serves: loaded as another model, it answers as the trained one.
    client.load_model("copy", data)
    x = images(5)
    np.testing.assert_allclose(client.predict("copy", x)["output"],
                               client.predict("cnn", x)["output"], rtol=TOLERANCE,
                               atol=TOLERANCE)


def test_a_download_larger_than_a_grpc_message(tmp_path, serve, client_of):
    """~6 MiB of weights come back in pieces, byte-equal, through a client whose messages
    are limited to gRPC's default 4 MiB."""
    torch.manual_seed(6)
    net = nn.Sequential(nn.Linear(1536, 1024), nn.ReLU(), nn.Linear(1024, 4))
    proto = onnx.load_from_string(model_files.model_bytes(net, torch.zeros(2, 1536)))
    assert sum(i.ByteSize() for i in proto.graph.initializer) > 6 << 20
    daemon = upload_daemon(serve, tmp_path)
    client_of(daemon).load_model("wide", proto)
    small = client_of(daemon, max_message_bytes=4 << 20)
    data, step = small.download_model("wide")
    assert step == 0 and len(data) > 6 << 20
    back = initializers(onnx.load_from_string(data))
    for name, value in initializers(proto).items():
        assert back[name].dtype == value.dtype and back[name].tobytes() == value.tobytes(), name
    x = np.random.default_rng(6).standard_normal((3, 1536)).astype(np.float32)
    np.testing.assert_allclose(small.predict("wide", x)["output"], torch_eval(net, x),
                               rtol=TOLERANCE, atol=TOLERANCE)


def test_unload_and_reload(tmp_path, serve, client_of):
    """Loading a name again replaces the model (another output size); unloading removes it."""
    client = client_of(upload_daemon(serve, tmp_path))
    client.load_model("cnn", small_cnn(), example_inputs=torch.zeros(1, 1, 8, 8))
    assert client.predict("cnn", images(2))["output"].shape == (2, 3)
    wider = small_cnn(seed=7, classes=5)
    client.load_model("cnn", wider, example_inputs=torch.zeros(1, 1, 8, 8))
    x = images(4)
    np.testing.assert_allclose(client.predict("cnn", x)["output"], torch_eval(wider, x),
                               rtol=TOLERANCE, atol=TOLERANCE)
    client.unload_model("cnn")
    assert "cnn" not in [m.name for m in client.models()]
    with pytest.raises(replicad.NotFound):
        client.predict("cnn", x)
    # Its files stayed: a load without a model loads them again; remove_upload removes them.
    assert (tmp_path / "uploads" / "cnn").is_dir()
    client.load_model("cnn")
    assert client.predict("cnn", x)["output"].shape == (4, 5)
    client.unload_model("cnn", remove_upload=True)
    assert not (tmp_path / "uploads" / "cnn").exists()
    with pytest.raises(replicad.NotFound):
        client.load_model("cnn")


def test_instances_give_the_model_its_slots(tmp_path, serve, client_of):
    client = client_of(upload_daemon(serve, tmp_path))
    net = small_cnn()
    client.load_model("three", net, example_inputs=torch.zeros(1, 1, 8, 8),
                      instances=["cpu", "cpu", "cpu"])
    assert len(client.model("three").slots) == 3
    client.load_model("one", net, example_inputs=torch.zeros(1, 1, 8, 8), instances=1,
                      config={"max_batch_size": 16})
    info = client.model("one")
    assert len(info.slots) == 1 and info.max_batch_size == 16
    x = images(7)
    for name in ("three", "one"):
        np.testing.assert_allclose(client.predict(name, x)["output"], torch_eval(net, x),
                                   rtol=TOLERANCE, atol=TOLERANCE)


def test_refusals_name_what_is_wrong_and_load_nothing(tmp_path, serve, client_of):
    daemon = upload_daemon(serve, tmp_path)
    client = client_of(daemon)
    data = model_files.model_bytes(small_cnn(), torch.zeros(1, 1, 8, 8))
    # File names that leave the model's directory, or that are no VERSION/FILE: the stub
    # itself, since load_model names the file.
    stub = pb_grpc.ReplicadStub(grpc.insecure_channel(daemon.target))
    for path in ("../x/model.onnx", "../../x/model.onnx", "1/../../x/model.onnx",
                 str(tmp_path / "x" / "model.onnx"), "0/model.onnx", "model.onnx"):
        with pytest.raises(grpc.RpcError) as raised:
            stub.LoadModel(pb.LoadModelRequest(model="escape", files={path: data}), timeout=30)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT, \
            (path, raised.value.code(), raised.value.details())
        assert path in raised.value.details(), (path, raised.value.details())
    assert not (tmp_path / "x").exists() and not (tmp_path / "uploads" / "x").exists()

    with pytest.raises(replicad.InvalidArgument) as raised:
        client.load_model("bad", b"this is not an ONNX file")
    assert model_files.UPLOAD_FILE in raised.value.message, raised.value.message
    assert raised.value.call == "LoadModel"
    with pytest.raises(replicad.InvalidArgument, match="no_such_field"):
        client.load_model("badconfig", data, config={"no_such_field": 1})
    with pytest.raises(replicad.InvalidArgument, match="sequence_batching"):
        client.load_model("badconfig", data, config={"sequence_batching": {}})
    loaded = [m.name for m in client.models()]
    assert not {"escape", "bad", "badconfig"} & set(loaded), loaded
    with pytest.raises(replicad.NotFound):
        client.download_model("bad")
    # A refused reload keeps the model that serves.
    net = small_cnn()
    client.load_model("cnn", net, example_inputs=torch.zeros(2, 1, 8, 8))
    with pytest.raises(replicad.InvalidArgument):
        client.load_model("cnn", b"this is not an ONNX file")
    with pytest.raises(replicad.InvalidArgument):
        client.load_model("cnn", data, config={"no_such_field": 1})
    x = images(3)
    np.testing.assert_allclose(client.predict("cnn", x)["output"], torch_eval(net, x),
                               rtol=TOLERANCE, atol=TOLERANCE)

    # Over --max-upload-bytes, and a daemon without --model-upload-root.
    (tmp_path / "small").mkdir()
    small = client_of(upload_daemon(serve, tmp_path / "small", "--max-upload-bytes", "2048"))
    with pytest.raises(replicad.ResourceExhausted) as raised:
        small.load_model("cnn", data)
    assert "2048" in raised.value.message, raised.value.message
    with pytest.raises(replicad.FailedPrecondition) as raised:
        client_of(serve("--model-control-mode", "explicit")).load_model("cnn", data)
    assert "--model-upload-root" in raised.value.message, raised.value.message


def test_loading_needs_the_admin_role(tmp_path, serve, client_of):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{ADMIN_TOKEN} infer,admin\n{TRAIN_TOKEN} infer,train\n")
    daemon = upload_daemon(serve, tmp_path, "--auth-tokens", str(tokens))
    data = model_files.model_bytes(small_cnn(), torch.zeros(1, 1, 8, 8))
    trainer = client_of(daemon, token=TRAIN_TOKEN)
    with pytest.raises(replicad.PermissionDenied) as raised:
        trainer.load_model("cnn", data)
    assert "admin" in raised.value.message, raised.value.message
    with pytest.raises(replicad.Unauthenticated):
        client_of(daemon, token="").load_model("cnn", data)
    admin = client_of(daemon, token=ADMIN_TOKEN)
    admin.load_model("cnn", data)
    assert admin.predict("cnn", images(2))["output"].shape == (2, 3)
    with pytest.raises(replicad.PermissionDenied):
        trainer.unload_model("cnn")
    admin.unload_model("cnn")
