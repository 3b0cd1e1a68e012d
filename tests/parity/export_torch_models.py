#!/usr/bin/python3
"""Exports PyTorch models to ONNX with reference inputs and outputs for the parity tests.

Usage (Debian's interpreter, which has python3-torch, python3-torchvision, python3-onnx):
    /usr/bin/python3 tests/parity/export_torch_models.py OUT_DIR [--models a,b] [--force]
    /usr/bin/python3 tests/parity/export_torch_models.py --list | --list-zoo

For each model NAME it writes
    OUT_DIR/NAME/model.onnx              opset 13 (17 for TRANSFORMERS), dim 0 of every input
                                         and output is "batch"
    OUT_DIR/NAME/b{B}_input_{i}.npy      inputs for batch B in 1, 3, 16 (1, 3 for
                                         TRANSFORMERS; seeded): float32, or int64 token ids
                                         and masks
    OUT_DIR/NAME/b{B}_output_{j}.npy     PyTorch's outputs for them (eval mode)
    OUT_DIR/NAME/nonfinite_input_{i}.npy  the images of NON_FINITE_CASES (NaN and infinities),
                                         for models whose inputs are all images
    OUT_DIR/NAME/nonfinite_torch_output_{j}.npy, nonfinite_onnxruntime_output_{j}.npy
                                         PyTorch's and, where onnxruntime imports (e.g. under
                                         .venv/bin/python, scripts/bench-venv.sh), ONNX
                                         Runtime's outputs for them
    OUT_DIR/NAME/manifest.json           input/output names and shapes, files per batch,
                                         the hash of this script and the torch and onnxruntime
                                         versions
The manifest is written last; a model whose manifest names this script's hash (and the same
torch/torchvision/onnxruntime versions) and whose files all exist is skipped, so reruns are
cheap.

Every model is built with torch.manual_seed(0) and weights=None: nothing is downloaded.
BatchNorm running statistics and affine parameters are then set to seeded random values
(they would otherwise be the identity, and a kernel that ignored them would still pass).
Exit status: 0 when every requested model was exported (or cached), 1 otherwise; a model that
fails is reported on stderr and the others are still exported.

benchmarks/compare_peers.py imports build_model() and export_onnx() from here, and runs the zoo
(zoo_names(): the torchvision classifiers of MODELS and the other torchvision classification
models in ZOO) with --zoo. --models accepts zoo names too; its default stays MODELS.
"""

import argparse
import hashlib
import inspect
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


class ConvNextBlocks(nn.Module):
    """A small ConvNeXt built from torchvision's own parts (its LayerNorm2d, which permutes to
    channels-last around layer_norm, and CNBlock: depthwise 7x7, LayerNorm, Linear, exact GELU,
    Linear, layer scale, residual), then a LayerNorm on the pooled features: 3x64x64 -> 10.
    Layer scale 1 instead of torchvision's 1e-6, so that the blocks weigh in the output."""

    def __init__(self, dim=32, num_classes=10):
        super().__init__()
        from torchvision.models.convnext import CNBlock, LayerNorm2d
        self.stem = nn.Sequential(nn.Conv2d(3, dim, 4, stride=4), LayerNorm2d(dim, eps=1e-6))
        self.blocks = nn.Sequential(CNBlock(dim, 1.0, 0.0), CNBlock(dim, 1.0, 0.0))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.LayerNorm(dim),
                                  nn.Linear(dim, num_classes))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


# ---------------------------------------------------------------- transformers

class BertEncoder(nn.Module):
    """A BERT-style classifier: token and learned position embeddings, nn.TransformerEncoder
    (4 layers, d_model 256, 4 heads, GELU), padding mask from attention_mask == 0, mean pooling
    over the tokens the mask keeps, a linear head of 2 classes."""

    def __init__(self, vocab=1000, d_model=256, length=128):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Parameter(torch.randn(1, length, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model=d_model, nhead=4, dim_feedforward=1024,
                                           batch_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False)
        self.classifier = nn.Linear(d_model, 2)

    def forward(self, input_ids, attention_mask):
        x = self.tokens(input_ids) + self.positions[:, :input_ids.shape[1]]
        x = self.encoder(x, src_key_padding_mask=attention_mask == 0)
        keep = attention_mask.unsqueeze(-1).to(x.dtype)
        return self.classifier((x * keep).sum(1) / keep.sum(1).clamp(min=1.0))


class CausalBlock(nn.Module):
    """A GPT-2 block: pre-LayerNorm causal self-attention (the mask from torch.triu, filled
    with -inf) and an MLP with GELU, each residual."""

    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        batch, length, d_model = x.shape
        head = d_model // self.heads
        q, k, v = self.qkv(self.norm1(x)).split(d_model, dim=2)
        q, k, v = (t.view(batch, length, self.heads, head).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / head ** 0.5)
        mask = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)
        attention = scores.masked_fill(mask, float("-inf")).softmax(-1)
        y = (attention @ v).transpose(1, 2).reshape(batch, length, d_model)
        x = x + self.proj(y)
        return x + self.mlp(self.norm2(x))


class GptDecoder(nn.Module):
    """A GPT-2-style causal decoder: token and position embeddings, 2 CausalBlocks of d_model
    256 and 4 heads, a final LayerNorm and a language-model head over 1000 tokens."""

    def __init__(self, vocab=1000, d_model=256, layers=2, length=64):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(length, d_model)
        self.blocks = nn.ModuleList([CausalBlock(d_model, 4) for _ in range(layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
        x = self.tokens(input_ids) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


class SegmentationOutput(nn.Module):
    """torchvision's segmentation models return {"out": ...}; this returns the tensor."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


class Blocks3d(nn.Module):
    """3-D pooling and transposed convolution in the forms video and volumetric models write:
    max pooling with padding, stride and ceil_mode; average pooling with and without
    count_include_pad, each with a ceil_mode overhang (the window past the padding counts in
    neither divisor); a grouped, strided ConvTranspose3d with output_padding (a 3-D U-Net's
    upsampling)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = nn.Conv3d(3, 8, 3, padding=1)
        self.max = nn.MaxPool3d(3, stride=2, padding=1, ceil_mode=True)
        self.avg_pad = nn.AvgPool3d((2, 3, 3), stride=(1, 2, 2), padding=1, ceil_mode=True,
                                    count_include_pad=True)
        self.avg = nn.AvgPool3d(2, stride=2, ceil_mode=True, count_include_pad=False)
        self.up = nn.ConvTranspose3d(8, 8, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.head = nn.Linear(8 * 8 * 6 * 6, num_classes)

    def forward(self, x):
        x = self.avg(self.avg_pad(self.max(torch.relu(self.stem(x)))))
        return self.head(torch.flatten(torch.relu(self.up(x)), 1))


def _vit_b_32():
    model = torchvision.models.vit_b_32(weights=None)
    # torchvision starts the head at zero, so every output would be 0 whatever came before it.
    nn.init.normal_(model.heads.head.weight, std=0.02)
    return model


def _segmentation(name):
    return lambda: SegmentationOutput(torchvision.models.segmentation.__dict__[name](
        weights=None, weights_backbone=None, num_classes=21))


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
    # Channel shuffles (Reshape, Transpose, Reshape), Split halves and row-major Concats.
    "shufflenet_v2_x0_5": (lambda: torchvision.models.shufflenet_v2_x0_5(weights=None),
                           IMAGE_224, ["logits"]),
    # 24-, 40- and 72-channel layers (padded 16-channel blocks on AVX-512), residual Adds fused
    # into convolutions, and x.mean([2, 3]) read in the convolutions' layout.
    "mnasnet0_75": (lambda: torchvision.models.mnasnet0_75(weights=None), IMAGE_224, ["logits"]),
    "convnext_blocks": (ConvNextBlocks, [("input", (3, 64, 64))], ["logits"]),
    "xception_separable": (XceptionSeparable, [("input", (3, 64, 64))], ["logits"]),
    "siamese_pair": (SiamesePair, [("left", (1, 28, 28)), ("right", (1, 28, 28))],
                     ["embedding_left", "embedding_right"]),
    "small_cnn": (SmallCnn, [("image", (1, 28, 28))], ["logits", "probabilities"]),
}

# Transformers, segmentation heads and what they need (issue #38): exported at opset 17, at
# batches 1 and 3 (they cost more per image than MODELS'). An input spec may name a third
# field, the kind of int64 values it holds: "ids" (token ids, uniform in [0, VOCAB)) or "mask"
# (1 for a token, 0 for padding: every other row has its last quarter padded).
TRANSFORMER_OPSET = 17
TRANSFORMER_BATCHES = (1, 3)
VOCAB = 1000
TRANSFORMERS = {
    # Attention through nn.MultiheadAttention; Equal and Where in its shape arithmetic.
    "vit_b_32": (_vit_b_32, IMAGE_224, ["logits"]),
    # Shifted windows: Mod, Range, ScatterND, Not, Where on the attention masks.
    "swin_t": (lambda: torchvision.models.swin_t(weights=None), IMAGE_224, ["logits"]),
    # Block and grid attention as Einsum (batched matrix products of rank 5).
    "maxvit_t": (lambda: torchvision.models.maxvit_t(weights=None), IMAGE_224, ["logits"]),
    # int64 ids and mask; Equal and Where make the padding mask.
    "bert_encoder": (BertEncoder, [("input_ids", (128,), "ids"), ("attention_mask", (128,), "mask")],
                     ["logits"]),
    # Split, Trilu on a bool ConstantOfShape, Where with -inf.
    "gpt_decoder": (GptDecoder, [("input_ids", (64,), "ids")], ["logits"]),
    # Dilated convolutions, a concatenation of blocked and row-major maps, linear Resize.
    "deeplabv3_mobilenet_v3_large": (_segmentation("deeplabv3_mobilenet_v3_large"), IMAGE_224,
                                     ["out"]),
    "lraspp_mobilenet_v3_large": (_segmentation("lraspp_mobilenet_v3_large"), IMAGE_224, ["out"]),
    # 3-D pooling and a grouped transposed 3-D convolution (see Blocks3d).
    "blocks_3d": (Blocks3d, [("input", (3, 10, 19, 19))], ["logits"]),
    # Video: 3-D convolutions and a global pooling over them, on clips of 8 frames of 56 x 56
    # (an eighth of the usual 16 x 112 x 112, which takes 0.8 s a clip on 2 cores).
    "r3d_18": (lambda: torchvision.models.video.r3d_18(weights=None),
               [("input", (3, 8, 56, 56))], ["logits"]),
}


# ---------------------------------------------------------------- the zoo

# The other torchvision 0.14 classification models (list_models(module=torchvision.models)),
# for benchmarks/compare_peers.py --zoo; with the torchvision classifiers of MODELS
# (MODELS_IN_ZOO) they make the whole zoo, zoo_names(). Kept apart from MODELS because the
# parity test exports every entry of MODELS. Built like MODELS entries by build_model()
# (weights=None, seeded, BatchNorm statistics seeded); input "input" [3, R, R], output "logits".
#
# Kept: the models that cost at most about 4.5 GMACs (multiply-adds) per image at the resolution
# fed here, so that a batch of 8 stays practical on 2 cores. Figures (GMACs per image) are
# torchvision's documented "GFLOPS" (which count multiply-adds) at the model's own resolution;
# for the models fed 224 instead of their own (larger) resolution, conv + linear multiply-adds
# counted at 224 with forward hooks (marked *):
#   alexnet 0.71, convnext_tiny 4.46, densenet169 3.36, densenet201 4.29,
#   efficientnet_b1 0.60*, b2 0.66*, b3 1.02*, b4 1.50*, b5 2.36*, b6 3.36*,
#   efficientnet_v2_s 2.85*, googlenet 1.50, inception_v3 5.71 (at 299), maxvit_t 5.56,
#   mnasnet0_5 0.10, mnasnet0_75 0.21, mnasnet1_0 0.31, mnasnet1_3 0.53,
#   mobilenet_v3_large 0.22, mobilenet_v3_small 0.06,
#   regnet_x_400mf 0.41, 800mf 0.80, 1_6gf 1.60, 3_2gf 3.18,
#   regnet_y_400mf 0.40, 800mf 0.83, 1_6gf 1.61, 3_2gf 3.18,
#   resnet34 3.66, resnet50 4.09, resnext50_32x4d 4.23,
#   shufflenet_v2_x0_5 0.04, x1_0 0.14, x1_5 0.30, x2_0 0.58, squeezenet1_0 0.82,
#   swin_t 4.49, swin_v2_t ~4.5 (5.94 at its own 256; at 224 its linear layers count the same
#   as swin_t's), vit_b_32 4.41.
# Two exceptions above 4.5 are kept as the only members of their families: inception_v3 at its
# own 299 (the resolution it is built for; 5.71) and maxvit_t (5.56).
# Left out, too costly on 2 cores: vgg11..19 (+_bn) 7.6-19.6 (and 133-144 M parameters),
# wide_resnet50_2 11.4 / wide_resnet101_2 22.8, resnet101 7.8 / resnet152 11.5,
# resnext101_32x8d 16.4 / resnext101_64x4d 15.5, regnet_x/y 8gf and up 8.0-375,
# densenet161 7.73, convnext_small/base/large 8.7-34.4, swin_s/b and swin_v2_s/b 8.7-20.3,
# vit_b_16 17.6, vit_l_16/32 61.6/15.4, vit_h_14 167, efficientnet_b7 5.17* and
# efficientnet_v2_m 5.36* / v2_l (larger siblings of kept models, whose ops they share).
ZOO_MODELS = (
    ("alexnet", 224),
    ("convnext_tiny", 224),
    ("densenet169", 224),
    ("densenet201", 224),
    ("efficientnet_b1", 224),
    ("efficientnet_b2", 224),
    ("efficientnet_b3", 224),
    ("efficientnet_b4", 224),
    ("efficientnet_b5", 224),
    ("efficientnet_b6", 224),
    ("efficientnet_v2_s", 224),
    ("googlenet", 224),
    ("inception_v3", 299),
    ("maxvit_t", 224),
    ("mnasnet0_5", 224),
    ("mnasnet1_0", 224),
    ("mnasnet1_3", 224),
    ("mobilenet_v3_large", 224),
    ("mobilenet_v3_small", 224),
    ("regnet_x_400mf", 224),
    ("regnet_x_800mf", 224),
    ("regnet_x_1_6gf", 224),
    ("regnet_x_3_2gf", 224),
    ("regnet_y_400mf", 224),
    ("regnet_y_800mf", 224),
    ("regnet_y_1_6gf", 224),
    ("regnet_y_3_2gf", 224),
    ("resnet34", 224),
    ("resnet50", 224),
    ("resnext50_32x4d", 224),
    ("shufflenet_v2_x1_0", 224),
    ("shufflenet_v2_x1_5", 224),
    ("shufflenet_v2_x2_0", 224),
    ("squeezenet1_0", 224),
    ("swin_t", 224),
    ("swin_v2_t", 224),
    ("vit_b_16", 224),
    ("vit_b_32", 224),
)

# The torchvision classifiers of MODELS, which the zoo runs too.
MODELS_IN_ZOO = ("resnet18", "mobilenet_v2", "squeezenet1_1", "densenet121", "efficientnet_b0",
                 "shufflenet_v2_x0_5", "mnasnet0_75")

# Constructor arguments besides weights=None. googlenet and inception_v3 warn that their default
# initialization will change unless init_weights is given; False is that future default. Their
# auxiliary classifiers stay built but are unused in eval mode, which returns only the logits.
_ZOO_KWARGS = {"googlenet": {"init_weights": False}, "inception_v3": {"init_weights": False}}


def _torchvision_classifier(name):
    return lambda: torchvision.models.get_model(name, weights=None, **_ZOO_KWARGS.get(name, {}))


ZOO = {name: (_torchvision_classifier(name), [("input", (3, size, size))], ["logits"])
       for name, size in ZOO_MODELS}


def zoo_names():
    """Every model of the zoo: the torchvision classifiers of MODELS, then ZOO's."""
    return list(MODELS_IN_ZOO) + [name for name, _ in ZOO_MODELS]


def registry_entry(name):
    """(constructor, input specs, output names) of a model of MODELS, TRANSFORMERS or ZOO."""
    for registry in (MODELS, TRANSFORMERS):
        if name in registry:
            return registry[name]
    return ZOO[name]


def opset_of(name):
    return TRANSFORMER_OPSET if name in TRANSFORMERS else OPSET


def batches_of(name):
    return TRANSFORMER_BATCHES if name in TRANSFORMERS else BATCHES


def _seed_of(*parts):
    return zlib.crc32("/".join(str(p) for p in parts).encode())


def build_model(name):
    """Returns (module in eval mode, input specs, output names) for a model of MODELS or ZOO.
    Deterministic: seeded construction and seeded BatchNorm statistics."""
    constructor, inputs, outputs = registry_entry(name)
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
    """Seeded inputs of [batch, *shape] for each input spec: standard-normal float32, or int64
    token ids or masks for the specs that name that kind."""
    rng = np.random.default_rng(_seed_of(name, "inputs", batch))
    arrays = []
    for spec in inputs:
        shape = (batch,) + tuple(spec[1])
        kind = spec[2] if len(spec) > 2 else "float"
        if kind == "ids":
            arrays.append(rng.integers(0, VOCAB, size=shape, dtype=np.int64))
        elif kind == "mask":
            mask = np.ones(shape, dtype=np.int64)
            mask[1::2, shape[-1] * 3 // 4:] = 0
            arrays.append(mask)
        else:
            arrays.append(rng.standard_normal(shape, dtype=np.float32))
    return arrays


# PyTorch 2.9 made the dynamo-based exporter the default; ours is the TorchScript one (opset 13,
# dynamic_axes, training mode), which newer PyTorch keeps behind dynamo=False.
TORCHSCRIPT_EXPORTER = ({"dynamo": False}
                        if "dynamo" in inspect.signature(torch.onnx.export).parameters else {})


def export_onnx(model, inputs, outputs, path, opset=OPSET):
    """torch.onnx.export at `opset`, dim 0 of every input and output dynamic ("batch")."""
    dummy = tuple(torch.from_numpy(a) for a in make_inputs("export", inputs, EXPORT_BATCH))
    names = [spec[0] for spec in inputs] + list(outputs)
    tmp = path + ".tmp"
    # Under no_grad an eval-mode nn.MultiheadAttention (vit_b_32 of the zoo) takes its fast
    # path, one aten::_native_multi_head_attention op that has no ONNX export; with grad enabled
    # (its parameters require grad) it runs the composite ops, which export. Other models keep
    # no_grad.
    has_attention = any(isinstance(m, nn.MultiheadAttention) for m in model.modules())
    with torch.set_grad_enabled(has_attention):
        torch.onnx.export(model, dummy, tmp, opset_version=opset,
                          input_names=[spec[0] for spec in inputs], output_names=list(outputs),
                          dynamic_axes={n: {0: "batch"} for n in names},
                          do_constant_folding=True, training=torch.onnx.TrainingMode.EVAL,
                          **TORCHSCRIPT_EXPORTER)
    os.replace(tmp, path)


# The batch of non-finite inputs, one case per image, for every model: what a NaN or an
# infinity in a request does to the outputs. Positions are those of the first input's
# [C, H, W]; the other inputs stay finite. The last image is finite, so that a NaN must not
# leak across images of one batch.
NON_FINITE_CASES = ("nan at [0, 0, 0]", "+inf at the centre", "-inf at the centre",
                    "all nan", "finite")


def make_non_finite_inputs(name, inputs):
    """make_inputs for len(NON_FINITE_CASES) images, then the cases written into input 0."""
    arrays = make_inputs(name, inputs, len(NON_FINITE_CASES))
    x = arrays[0]
    centre = (x.shape[1] // 2, x.shape[2] // 2, x.shape[3] // 2)
    x[0, 0, 0, 0] = np.nan
    x[(1,) + centre] = np.inf
    x[(2,) + centre] = -np.inf
    x[3] = np.nan
    return arrays


def onnxruntime_version():
    """The version of onnxruntime importable here, or None."""
    try:
        import onnxruntime  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None
    return onnxruntime.__version__


def run_onnxruntime(model_path, input_names, arrays):
    """ONNX Runtime's outputs (CPU, default graph optimizations) for `arrays`."""
    import onnxruntime  # pylint: disable=import-outside-toplevel
    session = onnxruntime.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip(input_names, arrays)))


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
            or manifest.get("torchvision") != torchvision.__version__
            or manifest.get("onnxruntime") != onnxruntime_version()):
        return False
    files = [manifest.get("model", "")]
    for entry in manifest.get("batches", []):
        files += entry["inputs"] + entry["outputs"]
    non_finite = manifest.get("non_finite", {})
    for key in ("inputs", "torch_outputs", "onnxruntime_outputs"):
        files += non_finite.get(key, [])
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
    export_onnx(model, inputs, outputs, os.path.join(model_dir, "model.onnx"), opset_of(name))
    batches = []
    for batch in batches_of(name):
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
    # NaN and infinities go into images; token ids have none.
    non_finite = None
    if all(len(spec) == 2 and len(spec[1]) == 3 for spec in inputs):
        arrays = make_non_finite_inputs(name, inputs)
        non_finite = {"cases": list(NON_FINITE_CASES), "inputs": [], "torch_outputs": [],
                      "onnxruntime_outputs": []}
        for i, a in enumerate(arrays):
            non_finite["inputs"].append(f"nonfinite_input_{i}.npy")
            np.save(os.path.join(model_dir, non_finite["inputs"][-1]), a)
        for j, r in enumerate(run_torch(model, arrays)):
            non_finite["torch_outputs"].append(f"nonfinite_torch_output_{j}.npy")
            np.save(os.path.join(model_dir, non_finite["torch_outputs"][-1]), r)
        if onnxruntime_version() is not None:
            ort_results = run_onnxruntime(os.path.join(model_dir, "model.onnx"),
                                          [spec[0] for spec in inputs], arrays)
            for j, r in enumerate(ort_results):
                non_finite["onnxruntime_outputs"].append(f"nonfinite_onnxruntime_output_{j}.npy")
                np.save(os.path.join(model_dir, non_finite["onnxruntime_outputs"][-1]), r)
    manifest = {
        "name": name,
        "model": "model.onnx",
        "opset": opset_of(name),
        "inputs": [{"name": spec[0], "shape": ["batch"] + list(spec[1])} for spec in inputs],
        "outputs": [{"name": n, "shape": ["batch"] + list(r.shape[1:])}
                    for n, r in zip(outputs, results)],
        "batches": batches,
        "script_sha256": digest,
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "onnxruntime": onnxruntime_version(),
    }
    if non_finite is not None:
        manifest["non_finite"] = non_finite
    with tempfile.NamedTemporaryFile("w", dir=model_dir, delete=False, suffix=".tmp") as f:
        json.dump(manifest, f, indent=1)
    os.replace(f.name, manifest_path)
    print(f"{name}: exported in {time.monotonic() - start:.1f} s", flush=True)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", nargs="?", help="where NAME/ folders are written")
    parser.add_argument("--models", default=",".join(list(MODELS) + list(TRANSFORMERS)),
                        help="comma-separated subset of: " + ", ".join(MODELS) + ", "
                        + ", ".join(TRANSFORMERS) + " (the default), or names of the zoo "
                        "(--list-zoo)")
    parser.add_argument("--force", action="store_true", help="ignore the cache")
    parser.add_argument("--list", action="store_true", help="print the model names and exit")
    parser.add_argument("--list-zoo", action="store_true",
                        help="print the zoo's model names (benchmarks/compare_peers.py --zoo)")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(list(MODELS) + list(TRANSFORMERS)))
        return 0
    if args.list_zoo:
        print("\n".join(zoo_names()))
        return 0
    if not args.out_dir:
        parser.error("OUT_DIR is required")
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS and n not in TRANSFORMERS and n not in ZOO]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}"
                     " and the zoo (--list-zoo)")
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
