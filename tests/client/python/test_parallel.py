"""replicad.parallel (issue #40): a PyTorch CNN goes up in one line, trains an epoch of
Fashion-MNIST on the daemon's two CPU slots, and comes back into the module, which then answers
in PyTorch as the daemon does: the same accuracy as evaluate, the same scores as predict. The
`with` block unloads the model; state_dict() is the downloaded file's initializers."""

import os

import numpy as np
import onnx
import pytest
import torch
import torch.utils.data
from onnx import numpy_helper
from torch import nn

import replicad

# PyTorch's eval-mode forward of the synced module against the daemon's predict: the same
# float32 graph computed by two runtimes, equal up to float32 rounding. On every logit
# |PyTorch - daemon| <= 1e-5 * max(1, |daemon|): absolute below 1, relative above.
SCORE_TOLERANCE = 1e-5
# PyTorch's test accuracy against the one evaluate reports (issue #40): 0.5 percentage points.
ACCURACY_TOLERANCE = 0.005
# An epoch of 6000 images is enough to learn something; chance is 10%.
MIN_ACCURACY = 0.70
TRAIN_ROWS = 6000
BATCH = 64


class FashionCnn(nn.Module):
    """Two conv blocks with BatchNorm, Dropout and a linear classifier of 10 classes."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
        self.dropout = nn.Dropout(0.2)
        self.classifier = nn.Linear(16 * 7 * 7, 10)

    def forward(self, image):
        return self.classifier(self.dropout(torch.flatten(self.features(image), 1)))


def fashion_cnn(seed=40):
    torch.manual_seed(seed)
    return FashionCnn()


def upload_daemon(serve, tmp_path):
    return serve("--model-upload-root", str(tmp_path / "uploads"),
                 "--model-control-mode", "explicit")


def torch_scores(net, x, batch=1000):
    net.eval()
    with torch.no_grad():
        return np.concatenate([net(torch.from_numpy(x[i:i + batch])).numpy()
                               for i in range(0, len(x), batch)])


def state_of(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_train_an_epoch_and_answer_in_pytorch_as_the_daemon_does(
        tmp_path, serve, client_of, fashion_mnist):
    x, y, x_test, y_test = fashion_mnist
    daemon = upload_daemon(serve, tmp_path)
    net = fashion_cnn()
    untrained = state_of(net)
    with replicad.parallel(net, devices=["cpu", "cpu"], address=daemon.target) as pm:
        assert pm.name.startswith("fashioncnn-") and pm.module is net
        assert not pm.loaded  # No example_inputs: the upload waits for the first data.
        assert pm.compile(optimizer="sgd", lr=0.05, momentum=0.9) is None
        history = pm.fit(x[:TRAIN_ROWS], y[:TRAIN_ROWS], batch_size=BATCH, epochs=1, verbose=0)
        assert pm.loaded and history.step == -(-TRAIN_ROWS // BATCH)
        assert pm.training.config.optimizer.learning_rate == pytest.approx(0.05)
        info = pm.client.model(pm.name)
        assert len(info.slots) == 2 and [s.name for s in info.inputs] == ["image"]
        scores = pm.evaluate(x_test, y_test, batch_size=256)
        served = pm.predict(x_test)["output"]
        name, client = pm.name, pm.client
        # Nothing came back yet: the module is as it was until sync (here: the block's end).
        assert all(torch.equal(net.state_dict()[k], v) for k, v in untrained.items())

    # Leaving the block synced the weights into net and unloaded the model.
    assert not torch.equal(net.classifier.weight, untrained["classifier.weight"])
    assert not torch.equal(net.features[1].running_mean, untrained["features.1.running_mean"])
    local = torch_scores(net, x_test)
    assert local.shape == served.shape == (len(x_test), 10)
    difference = np.abs(local - served)
    scaled = difference / np.maximum(1, np.abs(served))
    local_accuracy = float((local.argmax(axis=1) == y_test).mean())
    print(f"daemon accuracy {scores['accuracy']:.4f}, PyTorch accuracy {local_accuracy:.4f}, "
          f"max |difference| {difference.max():.2e} (scaled {scaled.max():.2e}; logits up to "
          f"{np.abs(served).max():.1f})")
    assert scaled.max() <= SCORE_TOLERANCE, scaled.max()
    assert abs(local_accuracy - scores["accuracy"]) <= ACCURACY_TOLERANCE, \
        (local_accuracy, scores["accuracy"])
    assert scores["accuracy"] >= MIN_ACCURACY, scores
    with pytest.raises(replicad.NotFound):
        client_of(daemon).predict(name, x_test[:2])
    with pytest.raises(ValueError, match="closed channel"):  # The client parallel made.
        client.models()
    assert name not in [m.name for m in client_of(daemon).models()]
    assert not (tmp_path / "uploads" / name).exists()  # close() removed its files.
    with pytest.raises(RuntimeError, match=f"'{name}' is closed"):
        pm.predict(x_test[:2])


def test_state_dict_save_and_a_shared_client(tmp_path, serve, client_of, fashion_mnist):
    x, y = fashion_mnist[0][:256], fashion_mnist[1][:256]
    client = client_of(upload_daemon(serve, tmp_path))
    net = fashion_cnn(seed=1)
    untrained = state_of(net)
    pm = replicad.parallel(net, devices=1, example_inputs=torch.zeros(2, 1, 28, 28),
                           name="mine", client=client)
    assert pm.loaded and "mine" in [m.name for m in client.models()]  # Uploaded at once.
    assert pm.sync() == 0  # Untrained: the module's own weights come back.
    assert all(torch.equal(net.state_dict()[k], v) for k, v in untrained.items())
    assert pm.compile(optimizer="adam", lr=1e-3).config.optimizer.learning_rate == \
        pytest.approx(1e-3)
    pm.fit(x, y, batch_size=64, epochs=1, verbose=0)  # 4 steps

    state = pm.state_dict()
    trained = {i.name: numpy_helper.to_array(i) for i in client.get_model("mine").graph.initializer}
    for key, value in state.items():
        if key.endswith("num_batches_tracked"):
            continue
        np.testing.assert_array_equal(value.numpy(), trained[key], err_msg=key)
        assert torch.equal(net.state_dict()[key], value), key
    assert not np.array_equal(trained["features.0.weight"], untrained["features.0.weight"])
    assert not np.array_equal(trained["features.5.running_var"],
                              untrained["features.5.running_var"])

    path = tmp_path / "mine.onnx"
    assert pm.save(path) == replicad.Checkpoint(str(path), 4)
    saved = onnx.load(str(path))
    onnx.checker.check_model(saved)
    # The file as downloaded (each download has a checkpoint id of its own in its metadata).
    assert {p.key: p.value for p in saved.metadata_props}["replicad.step"] == "4"
    for initializer in saved.graph.initializer:
        np.testing.assert_array_equal(numpy_helper.to_array(initializer),
                                      trained[initializer.name], err_msg=initializer.name)

    # Another module of the same class takes the weights too.
    other = fashion_cnn(seed=2)
    assert pm.load_weights_into(other) == 4
    assert torch.equal(other.classifier.bias, net.classifier.bias)

    client.unload_model("mine")  # Behind its back: close() still closes.
    pm.close()
    pm.close()  # Once is enough; the client given stays open.
    assert "mine" not in [m.name for m in client.models()]


def test_an_exception_unloads_without_syncing_and_a_dataloader_uploads(
        tmp_path, serve, client_of, fashion_mnist):
    x, y = fashion_mnist[0][:128], fashion_mnist[1][:128]
    daemon = upload_daemon(serve, tmp_path)
    client = client_of(daemon)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=32)
    net = fashion_cnn(seed=3)
    untrained = state_of(net)
    with pytest.raises(KeyError, match="stop here"):
        with replicad.parallel(net, address=daemon.target, name="interrupted") as pm:
            history = pm.fit(loader, epochs=1, verbose=0)  # Example inputs: batch 0's images.
            assert history.step == 4 and "interrupted" in [m.name for m in client.models()]
            raise KeyError("stop here")
    assert all(torch.equal(net.state_dict()[k], v) for k, v in untrained.items())
    assert "interrupted" not in [m.name for m in client.models()]


def test_refusals_before_anything_is_sent():
    net = fashion_cnn()
    with pytest.raises(TypeError, match="torch.nn.Module.*bytes"):
        replicad.parallel(b"an onnx file")
    with pytest.raises(ValueError, match="devices\\[1\\]: 'cpu:1'"):
        replicad.parallel(net, devices=["cpu", "cpu:1"])
    with pytest.raises(ValueError, match="devices: expected >= 1"):
        replicad.parallel(net, devices=0)
    with replicad.Client("localhost:1") as client:
        with pytest.raises(ValueError, match="token: options of a new client"):
            replicad.parallel(net, client=client, token="x")
    with replicad.parallel(net, address="localhost:1", sync_on_exit=False) as pm:
        assert not pm.loaded and pm.sync() == 0
        # compile waits for the upload, but what the client would refuse is refused now.
        with pytest.raises(ValueError, match="optimizer: expected one of adam, rmsprop, sgd"):
            pm.compile(optimizer="adagrad")
        with pytest.raises(TypeError, match="configure_training: .*learning_rate"):
            pm.compile(learning_rate=0.1)
        with pytest.raises(ValueError, match="fit: x is a dict.*example_inputs"):
            pm.fit({"image": np.zeros((2, 1, 28, 28), np.float32)}, np.zeros(2, np.int64))
        with pytest.raises(ValueError, match="predict: x is an iterator"):
            pm.predict(iter([(np.zeros((2, 1, 28, 28), np.float32), np.zeros(2))]))
        with pytest.raises(RuntimeError, match="save: model 'fashioncnn-[0-9a-f]{8}' is not on "
                                               "the server yet"):
            pm.save(os.devnull)
    with pytest.raises(RuntimeError, match="evaluate: .* is closed"):
        pm.evaluate(np.zeros((2, 1, 28, 28), np.float32), np.zeros(2, np.int64))
