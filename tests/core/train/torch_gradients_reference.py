"""PyTorch side of training_graph_test's autograd comparison.

Usage: /usr/bin/python3 torch_gradients_reference.py OUT_DIR

For each small network below (torch.manual_seed(0) weights), exports OUT_DIR/<name>.onnx
(opset 13, or 17 where noted; eval mode, dynamic batch, input "x", output "y"), and for a fixed input and target
(numpy.random.RandomState(1)) computes nn.functional.mse_loss(y, target) (the mean over all
elements) and its gradient for every parameter by autograd. Writes <name>_x.npy,
<name>_target.npy, <name>_loss.npy and <name>_grad_<parameter>.npy (parameter names are the
ONNX initializer names).

Between them the networks use every operator replicad has a gradient rule for, except those
data_parallel_trainer_test already checks against PyTorch (Conv, BatchNormalization, Relu,
MaxPool, Dropout, Flatten, Gemm and the softmax cross-entropy loss).
"""

import os
import sys

from torch_reference_common import output_path_and_torch


def main():
    out, np, torch = output_path_and_torch(__doc__)
    from torch import nn
    import torch.nn.functional as F
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)

    class Elementwise(nn.Module):
        """MatMul, LeakyRelu, Sigmoid, Tanh, Clip, Sqrt, Div, Mul, Sub, Add (broadcasting),
        Reshape, Transpose, Softmax, LogSoftmax."""

        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 6) * 0.5)
            self.shift = nn.Parameter(torch.rand(6) + 0.5)
            self.scale = nn.Parameter(torch.randn(1, 6))
            self.offset = nn.Parameter(torch.randn(6))

        def forward(self, x):
            h = torch.matmul(x, self.w)
            s = torch.sigmoid(F.leaky_relu(h, 0.1))
            c = torch.clamp(torch.tanh(h), -0.6, 0.7)
            d = c / (s + self.shift)
            m = d * self.scale - self.offset + torch.sqrt(s)
            r = m.reshape(-1, 2, 3).transpose(1, 2)
            return torch.softmax(r, -1) + torch.log_softmax(r, 1)

    class Pooling(nn.Module):
        """AveragePool (count_include_pad both ways, ceil_mode), GlobalAveragePool, Concat."""

        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(2, 4, 3, padding=1)
            self.fc = nn.Linear(8, 3)

        def forward(self, x):
            c = self.conv(x)
            a = F.avg_pool2d(c, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=True)
            b = F.avg_pool2d(c, 2, stride=2, ceil_mode=True, count_include_pad=False)
            g = torch.cat([F.adaptive_avg_pool2d(a, 1), F.adaptive_avg_pool2d(b, 1)], dim=1)
            return self.fc(torch.flatten(g, 1))

    class Transformer(nn.Module):
        """Gather along axis 0 of a trained table (an embedding; position 3 looked up twice),
        LayerNormalization, Split, a masked attention (Where), exact GELU (Erf), Slice,
        ReduceSum and Expand. Exported at opset 17."""

        def __init__(self):
            super().__init__()
            self.table = nn.Parameter(torch.randn(5, 6) * 0.5)
            self.register_buffer("positions", torch.tensor([0, 3, 3, 1]))
            self.register_buffer("mask", torch.tensor([[False, True, False, False],
                                                       [False, False, True, False],
                                                       [True, False, False, False],
                                                       [False, False, False, False]]))
            self.norm = nn.LayerNorm(6)
            self.qkv = nn.Linear(6, 18)
            self.gain = nn.Parameter(torch.rand(1, 6) + 0.5)
            self.out = nn.Linear(6, 3)

        def forward(self, x):
            h = self.norm(x + self.table[self.positions])
            q, k, v = self.qkv(h).split(6, dim=-1)
            scores = (q @ k.transpose(-2, -1)) / 6 ** 0.5
            a = torch.softmax(scores.masked_fill(self.mask, -1e4), -1) @ v
            pooled = F.gelu(a)[:, 1:3].sum(1)
            return self.out(pooled * self.gain.expand(pooled.shape[0], 6))

    class WrittenNorm(nn.Module):
        """LayerNorm as exporters before opset 17 write it (ReduceMean, Sub, Pow, Add, Sqrt,
        Div, Mul, Add), Pow of a trained exponent, and a mean over the tokens (ReduceMean
        without keepdims). Exported at opset 13."""

        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(6)
            self.power = nn.Parameter(torch.tensor(1.5))
            self.out = nn.Linear(6, 3)

        def forward(self, x):
            h = self.norm(x)
            h = h + 0.1 * torch.pow(torch.sigmoid(h) + 0.5, self.power)
            return self.out(h.mean(1))

    rng = np.random.RandomState(1)
    cases = [("elementwise", Elementwise(), (5, 4), (5, 3, 2), 13),
             ("written_norm", WrittenNorm(), (3, 4, 6), (3, 3), 13),
             ("pooling", Pooling(), (3, 2, 7, 7), (3, 3), 13),
             ("transformer", Transformer(), (3, 4, 6), (3, 3), 17)]
    for name, net, x_shape, y_shape, opset in cases:
        net.eval()
        x = rng.standard_normal(x_shape).astype(np.float32)
        target = rng.standard_normal(y_shape).astype(np.float32)
        torch.onnx.export(net, torch.from_numpy(x), os.path.join(out, name + ".onnx"),
                          opset_version=opset, do_constant_folding=False, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
        loss = F.mse_loss(net(torch.from_numpy(x)), torch.from_numpy(target))
        loss.backward()
        np.save(os.path.join(out, name + "_x.npy"), x)
        np.save(os.path.join(out, name + "_target.npy"), target)
        np.save(os.path.join(out, name + "_loss.npy"), np.array([loss.item()], dtype=np.float32))
        for parameter, value in net.named_parameters():
            np.save(os.path.join(out, "%s_grad_%s.npy" % (name, parameter)),
                    value.grad.numpy().astype(np.float32))
    return 0


if __name__ == "__main__":
    sys.exit(main())
