"""The client against a daemon with TLS, mutual TLS and bearer tokens (certificates made
here with the openssl command)."""

import subprocess

import numpy as np
import pytest

import replicad

INFER_TOKEN = "infer-only-token-0123456789"
TRAIN_TOKEN = "train-token-abcdefghijklmnop"


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_signed(d, ca, name, extension):
    (d / f"{name}.ext").write_text(extension)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout",
            f"{name}.key", "-out", f"{name}.csr", cwd=d)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt",
            cwd=d)


@pytest.fixture
def pki(tmp_path):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=ca",
            "-keyout", "ca.key", "-out", "ca.crt", cwd=tmp_path)
    make_signed(tmp_path, "ca", "server",
                "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    make_signed(tmp_path, "ca", "client", "extendedKeyUsage=clientAuth\n")
    (tmp_path / "tokens").write_text(f"{INFER_TOKEN} infer\n{TRAIN_TOKEN} infer,train\n")
    return tmp_path


def test_tls_and_tokens(pki, serve, client_of, monkeypatch):
    daemon = serve("--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key"),
                   "--auth-tokens", str(pki / "tokens"))
    x = np.zeros((2, 1, 28, 28), np.float32)
    ca = str(pki / "ca.crt")

    with pytest.raises(replicad.Unauthenticated):
        client_of(daemon, tls_ca=ca).models()
    reader = client_of(daemon, tls_ca=ca, token=INFER_TOKEN)
    assert reader.predict("default", x)["logits"].shape == (2, 10)
    with pytest.raises(replicad.PermissionDenied) as raised:
        reader.train_step("default", x, [1, 2])
    assert "train" in str(raised.value)
    with pytest.raises(replicad.PermissionDenied) as raised:  # TrainSteps: the same role
        list(reader.train_steps("default", [(x, [1, 2])]))
    assert "train" in str(raised.value) and raised.value.call == "TrainSteps"
    monkeypatch.setenv("REPLICAD_TOKEN", TRAIN_TOKEN)  # the default token
    trainer = client_of(daemon, tls_ca=ca)
    trainer.configure_training("default", optimizer="sgd")
    assert trainer.train_step("default", x, [1, 2]).step == 1
    assert [r.step for r in trainer.train_steps("default", [(x, [1, 2])] * 2)] == [2, 3]
    # Plain text to a TLS port fails as the channel does: UNAVAILABLE.
    with pytest.raises(replicad.Unavailable):
        client_of(daemon, token=INFER_TOKEN, timeout=10).models()


def test_mutual_tls(pki, serve, client_of):
    daemon = serve("--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key"),
                   "--tls-client-ca", str(pki / "ca.crt"))
    ca = str(pki / "ca.crt")
    mutual = client_of(daemon, tls_ca=ca, tls_cert=str(pki / "client.crt"),
                       tls_key=str(pki / "client.key"))
    assert [m.name for m in mutual.models()] == ["default"]
    with pytest.raises(replicad.Unavailable):
        client_of(daemon, tls_ca=ca, timeout=10).models()
    with pytest.raises(FileNotFoundError, match="tls_ca"):
        replicad.Client("localhost:1", tls_ca=str(pki / "absent.crt"))
