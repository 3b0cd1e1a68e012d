"""A Triton-layout repository of torchvision's squeezenet1_1 for the protocol tests.

squeeze/1/model.onnx and squeeze/2/model.onnx: weights=None with seeds 1 and 2, exported
with a dynamic batch; `reference(version, x)` is PyTorch's answer for comparison.
"""

import os
import tempfile

import numpy as np
import torch
import torchvision

MODEL = "squeeze"
IMAGE = (3, 64, 64)


def export(seed, path):
    torch.manual_seed(seed)
    model = torchvision.models.squeezenet1_1(weights=None).eval()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.onnx.export(model, torch.zeros(2, *IMAGE), path, input_names=["image"],
                      output_names=["logits"], opset_version=13,
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
    return model


class SqueezeRepository:
    """A temporary repository with versions 1 and 2; cleanup() removes it."""

    def __init__(self):
        self.directory = tempfile.TemporaryDirectory()
        self.path = self.directory.name
        self.models = {v: export(v, os.path.join(self.path, MODEL, str(v), "model.onnx"))
                       for v in (1, 2)}

    def reference(self, version, x):
        """PyTorch's logits of the model exported as `version`."""
        with torch.no_grad():
            return self.models[version](torch.from_numpy(x)).numpy()

    def cleanup(self):
        self.directory.cleanup()


def relative_l2(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def images(batch, seed=1):
    return np.random.default_rng(seed).standard_normal((batch, *IMAGE)).astype(np.float32)
