#!/usr/bin/python3
"""Exports classifiers whose logits depend on their input: a stand-in for trained weights.

Usage (Debian's interpreter, which has python3-torch and python3-torchvision):
    /usr/bin/python3 benchmarks/calibrated_models.py OUT_DIR --models mobilenet_v2,resnet50
        [--batches 16] [--batch 16]

A seeded, untrained classifier (tests/parity/export_torch_models.py's build_model) answers
nearly every input with the same class: its BatchNorm statistics (seeded values) do not match
the activations, so one direction dominates the features and the logits' spread over classes is
about 1% of their size. Top-1 agreement between two precisions then measures one margin, not
the model. Here each BatchNorm's running statistics are recomputed on --batches batches of
seeded standard-normal images (the distribution precision_bench.py's samples come from;
momentum None: the plain average over the batches, as torch's BatchNorm documents), as after
training, so that the features are normalised and different inputs win different classes.
Nothing is downloaded. Writes OUT_DIR/NAME/model.onnx (opset and form as the parity export).
Models without BatchNorm (the encoder) are exported as build_model makes them.
"""

import argparse
import os
import sys

import torch
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "parity"))

import export_torch_models as zoo  # noqa: E402


def recalibrate(model, image_shape, batches, batch, seed):
    """Recomputes every BatchNorm's running statistics on seeded normal images; eval mode after."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return 0
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None
        norm.train()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn((batch, *image_shape), generator=generator))
    model.eval()
    return len(norms)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--models", default="mobilenet_v2,resnet50")
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args(argv)
    for name in args.models.split(","):
        model, inputs, outputs = zoo.build_model(name)
        calibrated = 0
        if len(inputs) == 1 and len(inputs[0][1]) == 3:
            calibrated = recalibrate(model, inputs[0][1], args.batches, args.batch, seed=2039)
        os.makedirs(os.path.join(args.out_dir, name), exist_ok=True)
        zoo.export_onnx(model, inputs, outputs, os.path.join(args.out_dir, name, "model.onnx"),
                        zoo.opset_of(name))
        print(f"{name}: {calibrated} BatchNorm layers recalibrated on "
              f"{args.batches} x {args.batch} images", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
