"""Bad input raises the exception of the server's code with the server's message, and trains
nothing; what the client refuses itself is refused before any call."""

import numpy as np
import pytest

import replicad


@pytest.fixture
def trained(serve, client_of, fashion_mnist):
    """A client of a fresh daemon configured for SGD, and the logits of 8 test images."""
    client = client_of(serve())
    client.configure_training("default", optimizer="sgd", lr=0.1)
    x_test = fashion_mnist[2][:8]
    return client, x_test, client.predict("default", x_test)["logits"]


def test_bad_batches_raise_the_servers_error_and_train_nothing(trained, fashion_mnist):
    client, x_test, before = trained
    x, y = fashion_mnist[0][:4], fashion_mnist[1][:4]
    cases = [
        # (x, y, words the server's message must hold)
        (x.astype(np.int64), y, ["image", "float32", "int64"]),
        (x[:, :, :27], y, ["image", "27"]),
        (x, y + 10, ["[0, 10)", str(int(y[0]) + 10)]),
        (x, y.astype(np.float32), ["targets"]),
        (x, y[:3], ["3", "4"]),
        (np.where(np.arange(x.size).reshape(x.shape) == 5, np.nan, x), y, ["NaN"]),
    ]
    for bad_x, bad_y, words in cases:
        with pytest.raises(replicad.InvalidArgument) as raised:
            client.train_step("default", bad_x, bad_y)
        message = str(raised.value)
        assert raised.value.call == "TrainStep"
        for word in words:
            assert word in message, (word, message)
    with pytest.raises(replicad.InvalidArgument) as raised:
        client.fit("default", x, y + 10, batch_size=4, verbose=0)
    assert raised.value.step == 0 and "[0, 10)" in str(raised.value), str(raised.value)

    # Unchanged weights. Not bit for bit: the scheduler splits the 8 images across the slots
    # by their measured speed, and another split runs other batch sizes' kernels (1e-6 apart
    # seen under TSan); one SGD step at lr 0.1 moves these logits by far more than 1e-5.
    np.testing.assert_allclose(client.predict("default", x_test)["logits"], before, rtol=1e-5,
                               atol=1e-5)
    assert client.train_step("default", x, y).step == 1  # no bad batch counted as a step


def test_predict_and_lookup_errors(trained):
    client, x_test, _ = trained
    with pytest.raises(replicad.NotFound) as raised:
        client.model("nope")
    assert "nope" in str(raised.value)
    with pytest.raises(replicad.InvalidArgument) as raised:
        client.predict("default", {"picture": x_test})
    assert "picture" in str(raised.value)
    with pytest.raises(replicad.InvalidArgument) as raised:
        client.predict("default", x_test, outputs=["logits", "nope"])
    assert "nope" in str(raised.value)
    with pytest.raises(replicad.InvalidArgument) as raised:
        client.predict("default", x_test[:, :, :, :20])
    assert "20" in str(raised.value)


def test_what_the_client_refuses_before_calling(trained, fashion_mnist):
    client, x_test, _ = trained
    x, y = fashion_mnist[0][:4], fashion_mnist[1][:4]
    with pytest.raises(TypeError, match="bool"):
        client.predict("default", x_test > 0.5)
    with pytest.raises(ValueError, match="different numbers of rows"):
        client.fit("default", x, y[:3], verbose=0)
    with pytest.raises(ValueError, match="y is None"):
        client.fit("default", x, verbose=0)
    with pytest.raises(ValueError, match="iterator"):
        client.fit("default", iter([(x, y)]), verbose=0)
    with pytest.raises(ValueError, match=rf"labels in \[0, 10\), received {y[0] + 12}"):
        client.evaluate("default", x, y + 12)
    with pytest.raises(ValueError, match="optimizer"):
        client.configure_training("default", optimizer="adagrad")
    with pytest.raises(ValueError, match="batch_size"):
        client.predict("default", x_test, batch_size=0)
    with pytest.raises(ValueError, match="tls_cert and tls_key"):
        replicad.Client("localhost:1", tls_cert="c.pem")
    assert client.train_step("default", x, y).step == 1
