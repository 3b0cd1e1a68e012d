#!/usr/bin/env python3
"""Exports torchvision's detection models with their post-processing and PyTorch's detections.

For tests/parity/detection_parity_test.cc (issue #38): ssdlite320_mobilenet_v3_large and
retinanet_resnet50_fpn, exported whole by torch.onnx.export at opset 17 as torchvision 0.14 traces
them for one image [3, H, W]: the transform (normalisation, a Resize), the backbone and heads, and
the post-processing with NonZero (scores over the threshold), TopK with a K computed from the
count, NonMaxSuppression inside an If (no boxes: no NMS), Gather and GatherND of what they select.
Outputs: boxes [n, 4], scores [n], labels [n] (int64), n depending on the image.

Weights: torchvision's own initialisation leaves an untrained detector's features at 1e-14 and its
scores all within 1e-7 of 1/91, where any two implementations order them differently. So every
convolution is drawn again (He-normal, seeded), normalisation statistics are seeded, and the
classification head's last convolutions are scaled so that scores spread over (0, 1); the score
threshold leaves a few dozen to a few hundred detections per image (fewer than the model's cap of
detections_per_img, so no cut falls between two near-equal scores). Each manifest entry records the
count; the test requires detections, so it cannot pass on empty outputs.

Usage: export_detection_models.py OUT_DIR [--force]. Cached by this script's hash in
OUT_DIR/NAME/manifest.json.
"""
import argparse
import hashlib
import json
import os
import sys
import time
import warnings

import numpy as np
import torch
import torchvision

OPSET = 17

# name -> (constructor kwargs, image size, classification head scale, seed of the images)
MODELS = {
    "ssdlite320_mobilenet_v3_large": (dict(score_thresh=0.6), 320, 0.4, 1),
    # min_size/max_size 320: the transform resizes to 320 instead of 800, so a run costs a
    # fraction of a second on 2 cores; the graph is the same.
    "retinanet_resnet50_fpn": (dict(score_thresh=0.96, min_size=320, max_size=320), 320, 2e-5, 1),
}
IMAGES_PER_MODEL = 2


def reinitialise(model, classification_scale):
    generator = torch.Generator().manual_seed(0)
    frozen = torchvision.ops.FrozenBatchNorm2d
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Conv2d):
                fan_in = module.weight[0].numel()
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator)
                                    * (2.0 / fan_in) ** 0.5)
                if module.bias is not None:
                    module.bias.copy_(torch.randn(module.bias.shape, generator=generator) * 0.1)
            elif isinstance(module, (torch.nn.BatchNorm2d, frozen)):
                n = module.weight.shape[0]
                module.weight.copy_(torch.rand(n, generator=generator) + 0.5)
                module.bias.copy_(torch.randn(n, generator=generator) * 0.1)
                module.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
                module.running_var.copy_(torch.rand(n, generator=generator) + 0.5)
        head = model.head.classification_head
        last = [m for m in head.modules() if isinstance(m, torch.nn.Conv2d)]
        # SSDLite: one 1x1 prediction convolution per level; RetinaNet: cls_logits.
        for module in last if hasattr(head, "module_list") else [head.cls_logits]:
            if module.kernel_size == (1, 1) or module is getattr(head, "cls_logits", None):
                module.weight.mul_(classification_scale)
                module.bias.mul_(classification_scale)


def build(name):
    kwargs, size, scale, _ = MODELS[name]
    torch.manual_seed(0)
    model = getattr(torchvision.models.detection, name)(
        weights=None, weights_backbone=None, num_classes=91, **kwargs)
    reinitialise(model, scale)
    return model.eval(), size


def script_hash():
    with open(__file__, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def export_one(name, out_dir, digest, force):
    model_dir = os.path.join(out_dir, name)
    manifest_path = os.path.join(model_dir, "manifest.json")
    try:
        with open(manifest_path) as f:
            if not force and json.load(f).get("script_sha256") == digest:
                print(f"{name}: cached", flush=True)
                return
    except (OSError, ValueError):
        pass
    start = time.monotonic()
    os.makedirs(model_dir, exist_ok=True)
    if os.path.exists(manifest_path):
        os.remove(manifest_path)
    model, size = build(name)
    seed = MODELS[name][3]
    images = [torch.rand(3, size, size, generator=torch.Generator().manual_seed(seed + i))
              for i in range(IMAGES_PER_MODEL)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, ([images[0]],), os.path.join(model_dir, "model.onnx"),
                          opset_version=OPSET, input_names=["images"],
                          output_names=["boxes", "scores", "labels"])
    entries = []
    for i, image in enumerate(images):
        with torch.no_grad():
            out = model([image])[0]
        entry = {"image": f"image_{i}.npy", "detections": int(out["scores"].shape[0])}
        np.save(os.path.join(model_dir, entry["image"]), image.numpy())
        for key in ("boxes", "scores", "labels"):
            entry[key] = f"{key}_{i}.npy"
            np.save(os.path.join(model_dir, entry[key]), out[key].numpy())
        entries.append(entry)
    manifest = {"name": name, "model": "model.onnx", "images": entries,
                "script_sha256": digest, "torch": torch.__version__,
                "torchvision": torchvision.__version__}
    with open(manifest_path + ".tmp", "w") as f:
        json.dump(manifest, f, indent=1)
    os.replace(manifest_path + ".tmp", manifest_path)
    print(f"{name}: exported in {time.monotonic() - start:.1f} s, detections "
          f"{[e['detections'] for e in entries]}", flush=True)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--force", action="store_true", help="ignore the cache")
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args(argv)
    digest = script_hash()
    for name in args.models.split(","):
        export_one(name, args.out_dir, digest, args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
