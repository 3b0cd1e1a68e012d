"""fit of a transformer (issue #38): the BERT-style classifier of tests/parity/
export_torch_models.py (token ids and attention mask of int64, embeddings, 4 encoder layers with
LayerNorm, exact GELU and masked attention, mean pooling over the kept tokens), exported from
PyTorch at opset 17 and fine-tuned through `fit` for one epoch on a synthetic task: class 1
sequences draw their tokens from ids [1, 500), class 0 from [500, 1000), with 32-128 tokens and
the rest padding. The loss over the samples must fall by at least LOSS_DROP, and the same epoch
on 2 slots must equal it on 1 slot: the epoch's mean loss and the loss after it within
SLOT_TOLERANCE relative (split-invariant steps: each slot's part of a batch is summed
exactly)."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "parity"))

LOSS_DROP = 0.3  # From about 0.75 (chance) down.
SLOT_TOLERANCE = 1e-5
SAMPLES = 256
BATCH = 32
LENGTH = 128


@pytest.fixture(scope="module")
def bert_path(tmp_path_factory):
    models = pytest.importorskip("export_torch_models")
    path = str(tmp_path_factory.mktemp("bert") / "bert.onnx")
    module, inputs, outputs = models.build_model("bert_encoder")
    models.export_onnx(module, inputs, outputs, path, models.opset_of("bert_encoder"))
    return path


def synthetic_task():
    rng = np.random.RandomState(0)
    labels = (rng.rand(SAMPLES) < 0.5).astype(np.int64)
    ids = np.where(labels[:, None] == 1, rng.randint(1, 500, size=(SAMPLES, LENGTH)),
                   rng.randint(500, 1000, size=(SAMPLES, LENGTH))).astype(np.int64)
    mask = np.ones((SAMPLES, LENGTH), dtype=np.int64)
    for i, length in enumerate(rng.randint(32, LENGTH + 1, size=SAMPLES)):
        mask[i, length:] = 0
        ids[i, length:] = 0
    return {"input_ids": ids, "attention_mask": mask}, labels


def one_epoch(serve, client_of, path, devices):
    """(loss before, the epoch's mean loss, loss after) of one epoch of fit on `devices`."""
    daemon = serve("--model", f"bert={path}", "--devices", devices, "--threads-per-slot", "1")
    client = client_of(daemon)
    x, y = synthetic_task()
    client.configure_training("bert", optimizer="adam", lr=1e-3)
    before = client.evaluate("bert", x, y, batch_size=64)["loss"]
    history = client.fit("bert", x, y, batch_size=BATCH, epochs=1, seed=0, verbose=0)
    after = client.evaluate("bert", x, y, batch_size=64)["loss"]
    return before, history.history["loss"][0], after


def test_one_epoch_lowers_the_loss_and_two_slots_equal_one(serve, client_of, bert_path):
    before, epoch, after = one_epoch(serve, client_of, bert_path, "cpu:0")
    assert after <= before - LOSS_DROP, (before, epoch, after)
    _, epoch2, after2 = one_epoch(serve, client_of, bert_path, "cpu:0,cpu:0")
    assert epoch2 == pytest.approx(epoch, rel=SLOT_TOLERANCE)
    assert after2 == pytest.approx(after, rel=SLOT_TOLERANCE)
