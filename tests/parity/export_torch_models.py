#!/usr/bin/python3
"""Exports PyTorch models to ONNX with reference inputs and outputs for the parity tests.

Usage (Debian's interpreter, which has python3-torch, python3-torchvision, python3-onnx):
    /usr/bin/python3 tests/parity/export_torch_models.py OUT_DIR [--models a,b] [--force]
    /usr/bin/python3 tests/parity/export_torch_models.py --list

For each model NAME it writes
    OUT_DIR/NAME/model.onnx              opset 13, dim 0 of every input and output is "batch"
    OUT_DIR/NAME/b{B}_input_{i}.npy      float32 inputs for batch B in 1, 3, 16 (seeded)
    OUT_DIR/NAME/b{B}_output_{j}.npy     PyTorch's outputs for them (eval mode)
    OUT_DIR/NAME/manifest.json           input/output names and shapes, files per batch,
                                         the hash of this script and the torch versions
The manifest is written last; a model whose manifest names this script's hash (and the same
torch/torchvision versions) and whose files all exist is skipped, so reruns are cheap.

Every model is built with torch.manual_seed(0) and weights=None: nothing is downloaded.
BatchNorm running statistics and affine parameters are then set to seeded random values
(they would otherwise be the identity, and a kernel that ignored them would still pass).
Exit status: 0 when every requested model was exported (or cached), 1 otherwise; a model that
fails is reported on stderr and the others are still exported.

benchmarks/compare_peers.py imports build_model() and export_onnx() from here.
"""

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
import traceback
import zlib

import numpy as np
import torch
import torch.nn as nn
import torchvision

OPSET = 13
BATCHES = (1, 3, 16)
EXPORT_BATCH = 2  # Dummy batch for tracing; dim 0 is dynamic in the exported graph.


# ---------------------------------------------------------------- Keras-style models

class SeparableConv2d(nn.Module):
    """Keras' SeparableConv2D: a depthwise 3x3 (groups = channels), then a pointwise 1x1."""

    def __init__(self, cin, cout):
        super().__init__()
        self.depthwise = nn.Conv2d(cin, cin, 3, padding=1, groups=cin, bias=False)
        self.pointwise = nn.Conv2d(cin, cout, 1, bias=False)

    def forward(self, x):
        return self.pointwise(self.depthwise(x))


class XceptionEntryBlock(nn.Module):
    """One block of Xception's entry flow: two separable convs with BN, a strided max pool,
    and a strided 1x1 conv + BN on the skip connection, added together."""

    def __init__(self, cin, cout, start_with_relu):
        super().__init__()
        layers = [nn.ReLU()] if start_with_relu else []
        layers += [SeparableConv2d(cin, cout), nn.BatchNorm2d(cout), nn.ReLU(),
                   SeparableConv2d(cout, cout), nn.BatchNorm2d(cout),
                   nn.MaxPool2d(3, stride=2, padding=1)]
        self.main = nn.Sequential(*layers)
        self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=2, bias=False),
                                  nn.BatchNorm2d(cout))

    def forward(self, x):
        return self.main(x) + self.skip(x)


class XceptionSeparable(nn.Module):
    """A small depthwise-separable network shaped like Xception's entry flow: 3x64x64 -> 10."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        self.blocks = nn.Sequential(XceptionEntryBlock(64, 128, start_with_relu=False),
                                    XceptionEntryBlock(128, 256, start_with_relu=True))
        self.head = nn.Sequential(nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(256, num_classes))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


class SiamesePair(nn.Module):
    """One tower applied to two inputs (shared weights), as a Keras functional model calling
    the same sub-model twice: left, right float32[N,1,28,28] -> two embeddings [N,32]."""

    def __init__(self, dim=32):
        super().__init__()
        self.tower = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(16 * 7 * 7, dim))

    def forward(self, left, right):
        return self.tower(left), self.tower(right)


class SmallCnn(nn.Module):
    """The architecture of replicad's embedded default model (core/model/default_model.h):
    image float32[N,1,28,28] -> logits, probabilities [N,10]."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten())
        self.fc = nn.Linear(16 * 7 * 7, 10)

    def forward(self, image):
        logits = self.fc(self.features(image))
        return logits, torch.softmax(logits, dim=-1)


# ---------------------------------------------------------------- the registry

IMAGE_224 = [("input", (3, 224, 224))]

# name -> (constructor, [(input name, shape without the batch dim)], [output names])
MODELS = {
    "resnet18": (lambda: torchvision.models.resnet18(weights=None), IMAGE_224, ["logits"]),
    "mobilenet_v2": (lambda: torchvision.models.mobilenet_v2(weights=None), IMAGE_224,
                     ["logits"]),
    "squeezenet1_1": (lambda: torchvision.models.squeezenet1_1(weights=None), IMAGE_224,
                      ["logits"]),
    "densenet121": (lambda: torchvision.models.densenet121(weights=None), IMAGE_224, ["logits"]),
    "efficientnet_b0": (lambda: torchvision.models.efficientnet_b0(weights=None), IMAGE_224,
                        ["logits"]),
    "xception_separable": (XceptionSeparable, [("input", (3, 64, 64))], ["logits"]),
    "siamese_pair": (SiamesePair, [("left", (1, 28, 28)), ("right", (1, 28, 28))],
                     ["embedding_left", "embedding_right"]),
    "small_cnn": (SmallCnn, [("image", (1, 28, 28))], ["logits", "probabilities"]),
}


def _seed_of(*parts):
    return zlib.crc32("/".join(str(p) for p in parts).encode())


def build_model(name):
    """Returns (module in eval mode, input specs, output names) for a registered model.
    Deterministic: seeded construction and seeded BatchNorm statistics."""
    constructor, inputs, outputs = MODELS[name]
    torch.manual_seed(0)
    model = constructor()
    generator = torch.Generator().manual_seed(_seed_of(name, "batchnorm"))
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                n = module.num_features
                module.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
                module.running_var.copy_(torch.rand(n, generator=generator) + 0.5)
                module.weight.copy_(torch.rand(n, generator=generator) + 0.5)
                module.bias.copy_(torch.randn(n, generator=generator) * 0.1)
    model.eval()
    return model, inputs, outputs


def make_inputs(name, inputs, batch):
    """Seeded standard-normal float32 inputs of [batch, *shape] for each input spec."""
    rng = np.random.default_rng(_seed_of(name, "inputs", batch))
    return [rng.standard_normal((batch,) + tuple(shape), dtype=np.float32)
            for _, shape in inputs]


def export_onnx(model, inputs, outputs, path):
    """torch.onnx.export at opset 13, dim 0 of every input and output dynamic ("batch")."""
    dummy = tuple(torch.zeros((EXPORT_BATCH,) + tuple(shape)) for _, shape in inputs)
    names = [n for n, _ in inputs] + list(outputs)
    tmp = path + ".tmp"
    with torch.no_grad():
        torch.onnx.export(model, dummy, tmp, opset_version=OPSET,
                          input_names=[n for n, _ in inputs], output_names=list(outputs),
                          dynamic_axes={n: {0: "batch"} for n in names},
                          do_constant_folding=True, training=torch.onnx.TrainingMode.EVAL)
    os.replace(tmp, path)


def run_torch(model, arrays):
    with torch.inference_mode():
        result = model(*[torch.from_numpy(a) for a in arrays])
    if isinstance(result, torch.Tensor):
        result = (result,)
    return [r.contiguous().numpy().astype(np.float32, copy=False) for r in result]


def script_hash():
    with open(os.path.abspath(__file__), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _cached(model_dir, digest):
    manifest_path = os.path.join(model_dir, "manifest.json")
    try:
        with open(manifest_path) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return False
    if (manifest.get("script_sha256") != digest or manifest.get("torch") != torch.__version__
            or manifest.get("torchvision") != torchvision.__version__):
        return False
    files = [manifest.get("model", "")]
    for entry in manifest.get("batches", []):
        files += entry["inputs"] + entry["outputs"]
    return all(os.path.isfile(os.path.join(model_dir, f)) for f in files)


def export_one(name, out_dir, digest, force):
    model_dir = os.path.join(out_dir, name)
    if not force and _cached(model_dir, digest):
        print(f"{name}: cached", flush=True)
        return
    start = time.monotonic()
    os.makedirs(model_dir, exist_ok=True)
    manifest_path = os.path.join(model_dir, "manifest.json")
    if os.path.exists(manifest_path):
        os.remove(manifest_path)  # Stale until rewritten below.
    model, inputs, outputs = build_model(name)
    export_onnx(model, inputs, outputs, os.path.join(model_dir, "model.onnx"))
    batches = []
    for batch in BATCHES:
        arrays = make_inputs(name, inputs, batch)
        results = run_torch(model, arrays)
        if len(results) != len(outputs):
            raise RuntimeError(f"{name}: {len(results)} outputs, expected {len(outputs)}")
        entry = {"batch": batch, "inputs": [], "outputs": []}
        for i, a in enumerate(arrays):
            entry["inputs"].append(f"b{batch}_input_{i}.npy")
            np.save(os.path.join(model_dir, entry["inputs"][-1]), a)
        for j, r in enumerate(results):
            entry["outputs"].append(f"b{batch}_output_{j}.npy")
            np.save(os.path.join(model_dir, entry["outputs"][-1]), r)
        batches.append(entry)
    manifest = {
        "name": name,
        "model": "model.onnx",
        "opset": OPSET,
        "inputs": [{"name": n, "shape": ["batch"] + list(s)} for n, s in inputs],
        "outputs": [{"name": n, "shape": ["batch"] + list(r.shape[1:])}
                    for n, r in zip(outputs, results)],
        "batches": batches,
        "script_sha256": digest,
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
    }
    with tempfile.NamedTemporaryFile("w", dir=model_dir, delete=False, suffix=".tmp") as f:
        json.dump(manifest, f, indent=1)
    os.replace(f.name, manifest_path)
    print(f"{name}: exported in {time.monotonic() - start:.1f} s", flush=True)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", nargs="?", help="where NAME/ folders are written")
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated subset of: " + ", ".join(MODELS))
    parser.add_argument("--force", action="store_true", help="ignore the cache")
    parser.add_argument("--list", action="store_true", help="print the model names and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(MODELS))
        return 0
    if not args.out_dir:
        parser.error("OUT_DIR is required")
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    digest = script_hash()
    failed = []
    for name in names:
        try:
            export_one(name, args.out_dir, digest, args.force)
        except Exception:  # One model's failure must not stop the others.
            traceback.print_exc()
            print(f"{name}: FAILED", file=sys.stderr, flush=True)
            failed.append(name)
    if failed:
        print(f"export failed for: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
