"""PyTorch side of data_parallel_trainer_test's BatchNorm/Dropout cases.

Usage: /usr/bin/python3 torch_training_reference.py OUT_DIR

Builds a small CNN with BatchNormalization and Dropout (torch.manual_seed(0)), exports it in
training mode (torch.onnx.TrainingMode.TRAINING, opset 13, dynamic batch) twice: with dropout
p = 0 (OUT_DIR/bn_p0.onnx) and p = 0.3 (OUT_DIR/bn_p3.onnx), both from the same weights. Then
trains the p = 0 network for 5 SGD steps (lr 0.1, momentum 0.9) on batches of 8 made by
numpy.random.RandomState(1), and writes, as .npy files in OUT_DIR: x.npy [5, 8, 1, 8, 8],
labels.npy [5, 8] int64, losses.npy [5] (the mean loss of each step, before its update) and
after_<name>.npy for every parameter and running statistic after the 5 steps (names as in the
ONNX initializers).
"""

import os
import sys

from torch_reference_common import output_path_and_torch


def main():
    out, np, torch = output_path_and_torch(__doc__)
    from torch import nn
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)

    def network(p):
        return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Dropout(p), nn.Flatten(), nn.Linear(4 * 4 * 4, 3))

    net = network(0.0)
    state = {k: v.clone() for k, v in net.state_dict().items()}
    for p, name in ((0.0, "bn_p0.onnx"), (0.3, "bn_p3.onnx")):
        exported = network(p)
        exported.load_state_dict(state)
        exported.train()
        torch.onnx.export(exported, torch.zeros(2, 1, 8, 8), os.path.join(out, name),
                          opset_version=13, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["image"],
                          output_names=["logits"],
                          dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}})
        if p == 0.0:
            # Exporting runs the module once in training mode, which moves its running
            # statistics: start from what the ONNX file holds.
            net.load_state_dict(exported.state_dict())
    # The exporter renames nothing for nn.Sequential: initializers are "0.weight", "1.running_mean"...
    rng = np.random.RandomState(1)
    x = rng.standard_normal((5, 8, 1, 8, 8)).astype(np.float32)
    labels = rng.randint(0, 3, size=(5, 8)).astype(np.int64)
    net.train()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, foreach=False)
    losses = []
    for step in range(5):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(net(torch.from_numpy(x[step])),
                                           torch.from_numpy(labels[step]))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    np.save(os.path.join(out, "x.npy"), x)
    np.save(os.path.join(out, "labels.npy"), labels)
    np.save(os.path.join(out, "losses.npy"), np.array(losses, dtype=np.float32))
    for name, value in net.state_dict().items():
        if value.dtype == torch.float32:
            np.save(os.path.join(out, "after_%s.npy" % name), value.numpy())
    return 0


if __name__ == "__main__":
    sys.exit(main())
