#!/usr/bin/env python3
"""PyTorch reference run of `replicactl train` on replicad's default Fashion-MNIST CNN.

Run with (Debian's python3 has torch, numpy and onnx):
    /usr/bin/python3 benchmarks/train_reference_torch.py --onnx default.onnx \
        [--data /usr/share/datasets/fashion-mnist] [--epochs 5] [--batch-size 64] [--seed 0] \
        [--limit N] [--threads 2] [--optimizer sgd|adam|rmsprop] [--lr 0.01] [--momentum 0] \
        [--nesterov] [--weight-decay 0] [--beta1 0.9] [--beta2 0.999] [--epsilon 1e-8] \
        [--alpha 0.99]
    /usr/bin/python3 benchmarks/train_reference_torch.py --self-test

It trains the same network as core/model/default_model.cc, starting from the initializers of
the ONNX file given with --onnx (by name: conv1.weight [16,1,3,3], conv1.bias [16],
conv2.weight [32,16,3,3], conv2.bias [32], fc1.weight [128,1568], fc1.bias [128],
fc2.weight [10,128], fc2.bias [10]; write the
daemon's own with `replicad default-model --output FILE`), with everything else as replicad
does it:
  - loss: softmax cross-entropy on the logits, mean over the batch (nn.CrossEntropyLoss);
  - optimizer: torch.optim.SGD / Adam / RMSprop with foreach=False; the hyper-parameters are
    rounded to float32 first, as replicad stores them (core/train/optimizer.h);
  - data: train and t10k IDX files, pixels / 255 as float32 [N, 1, 28, 28]; --limit keeps
    the first N samples of each split;
  - order: epoch e visits the training samples in client/epoch_order.h's order (a
    std::mt19937_64(seed + e) Fisher-Yates, ported here bit for bit; --self-test checks it),
    in batches of --batch-size, the last partial batch included;
  - metrics: train loss and accuracy are sample-weighted means over the epoch's steps, each
    step measured on its batch before its update; test accuracy is the argmax (first
    maximum wins) of the logits over t10k in file order, evaluated after every epoch.
One JSON line per epoch goes to stdout:
    {"epoch", "train_loss", "train_accuracy", "test_accuracy", "seconds", "samples_per_second"}
where seconds covers the training steps of the epoch only (not the test evaluation).
"""

import argparse
import gzip
import json
import os
import struct
import sys
import time

import numpy as np

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"

# ---------------------------------------------------------------- std::mt19937_64

_MASK64 = (1 << 64) - 1


class MT19937_64:
    """std::mt19937_64, bit for bit: mersenne_twister_engine<uint_fast64_t, 64, 312, 156, 31,
    0xb5026f5aa96619e9, 29, 0x5555555555555555, 17, 0x71d67fffeda60000, 37,
    0xfff7eee000000000, 43, 6364136223846793005> with the one-integer seed constructor."""

    N = 312
    M = 156
    MATRIX_A = 0xB5026F5AA96619E9
    UPPER = 0xFFFFFFFF80000000  # the upper 33 bits (w - r with r = 31)
    LOWER = 0x000000007FFFFFFF

    def __init__(self, seed=5489):
        mt = [0] * self.N
        mt[0] = seed & _MASK64
        for i in range(1, self.N):
            prev = mt[i - 1]
            mt[i] = (6364136223846793005 * (prev ^ (prev >> 62)) + i) & _MASK64
        self._mt = mt
        self._index = self.N

    def _twist(self):
        mt = self._mt
        n, m, a, upper, lower = self.N, self.M, self.MATRIX_A, self.UPPER, self.LOWER
        for i in range(n):
            y = (mt[i] & upper) | (mt[(i + 1) % n] & lower)
            v = mt[(i + m) % n] ^ (y >> 1)
            if y & 1:
                v ^= a
            mt[i] = v
        self._index = 0

    def __call__(self):
        if self._index >= self.N:
            self._twist()
        y = self._mt[self._index]
        self._index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y


def epoch_order(n, seed, epoch):
    """client/epoch_order.h's EpochOrder(n, seed, epoch) as a numpy int64 array."""
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    g = MT19937_64((seed + epoch) & _MASK64)
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = g() % (i + 1)
        order[i], order[j] = order[j], order[i]
    return np.asarray(order, dtype=np.int64)


def self_test():
    failures = []

    def check(name, got, want):
        ok = got == want
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {got if ok else f'got {got}, want {want}'}")
        if not ok:
            failures.append(name)

    # The C++ standard's own check ([rand.predef]): the 10000th invocation of a
    # default-constructed std::mt19937_64 (seed 5489) produces 9981545732273789042.
    g = MT19937_64()
    for _ in range(9999):
        g()
    check("mt19937_64 default seed, 10000th output", g(), 9981545732273789042)
    # Seed 0 exercises the seeding recurrence from a zero state.
    check("epoch_order(10, 0, 0)", epoch_order(10, 0, 0).tolist(), [7, 2, 0, 8, 3, 9, 6, 1, 5, 4])
    check("epoch_order(10, 0, 1)", epoch_order(10, 0, 1).tolist(), [1, 7, 3, 9, 4, 0, 5, 2, 6, 8])
    big = epoch_order(60000, 0, 0)
    check("epoch_order(60000, 0, 0)[:3]", big[:3].tolist(), [50855, 30713, 21729])
    check("epoch_order(60000, 0, 0)[-1]", int(big[-1]), 5694)
    check("epoch_order(60000, 0, 0) is a permutation", bool(np.array_equal(np.sort(big), np.arange(60000))), True)
    # seed + epoch wraps modulo 2^64: seed 2^64-1, epoch 1 is seed 0, epoch 0.
    check("seed + epoch wraps mod 2^64", epoch_order(10, _MASK64, 1).tolist(), epoch_order(10, 0, 0).tolist())
    check("epoch_order(0, 0, 0)", epoch_order(0, 0, 0).tolist(), [])
    check("epoch_order(1, 0, 0)", epoch_order(1, 0, 0).tolist(), [0])
    print("self-test " + ("FAILED: " + ", ".join(failures) if failures else "passed"))
    return 1 if failures else 0


# ---------------------------------------------------------------- data

def _open_idx(directory, stem):
    for name in (stem, stem + ".gz"):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(f"{directory}: no {stem} or {stem}.gz")


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: expected an IDX file of unsigned bytes")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {body.size} bytes of data for dims {dims}")
    return body.reshape(dims)


def load_split(directory, split, limit):
    """(images float32 [N, 1, rows, cols] in [0, 1], labels int64 [N]), first `limit` only."""
    images = read_idx(_open_idx(directory, f"{split}-images-idx3-ubyte"))
    labels = read_idx(_open_idx(directory, f"{split}-labels-idx1-ubyte"))
    if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
        raise ValueError(f"{directory}: {split} images {images.shape} and labels {labels.shape}")
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    x = (images.astype(np.float32) / np.float32(255.0))[:, None, :, :]
    return np.ascontiguousarray(x), labels.astype(np.int64)


# ---------------------------------------------------------------- model

EXPECTED_INITIALIZERS = {
    "conv1.weight": (16, 1, 3, 3),
    "conv1.bias": (16,),
    "conv2.weight": (32, 16, 3, 3),
    "conv2.bias": (32,),
    "fc1.weight": (128, 32 * 7 * 7),
    "fc1.bias": (128,),
    "fc2.weight": (10, 128),
    "fc2.bias": (10,),
}


def read_initial_weights(path):
    import onnx
    from onnx import numpy_helper
    model = onnx.load(path)
    found = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    weights = {}
    for name, shape in EXPECTED_INITIALIZERS.items():
        if name not in found:
            raise ValueError(f"{path}: no initializer '{name}' (has: {', '.join(sorted(found))})")
        array = found[name]
        if tuple(array.shape) != shape or array.dtype != np.float32:
            raise ValueError(f"{path}: initializer '{name}' is {array.dtype} {list(array.shape)}: "
                             f"expected float32 {list(shape)}")
        weights[name] = np.array(array, dtype=np.float32, copy=True)
    return weights


def build_model(weights):
    import torch
    from torch import nn

    class DefaultCnn(nn.Module):
        """Conv-Relu-MaxPool x2, Flatten, Gemm-Relu-Gemm: core/model/default_model.cc's graph."""

        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
            self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
            self.fc1 = nn.Linear(32 * 7 * 7, 128)
            self.fc2 = nn.Linear(128, 10)

        def forward(self, x):
            x = torch.max_pool2d(torch.relu(self.conv1(x)), 2, 2)
            x = torch.max_pool2d(torch.relu(self.conv2(x)), 2, 2)
            return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))

    model = DefaultCnn()
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, array in weights.items():
            params[name].copy_(torch.from_numpy(array))
    return model


def f32(x):
    """x rounded to float32, as replicad's OptimizerConfig holds it, back as a Python float."""
    return float(np.float32(x))


def make_optimizer(args, parameters):
    import torch
    kind = args.optimizer
    if kind == "sgd":
        return torch.optim.SGD(parameters, lr=f32(args.lr), momentum=f32(args.momentum),
                               nesterov=args.nesterov, weight_decay=f32(args.weight_decay),
                               foreach=False)
    if kind == "adam":
        return torch.optim.Adam(parameters, lr=f32(args.lr), betas=(f32(args.beta1), f32(args.beta2)),
                                eps=f32(args.epsilon), weight_decay=f32(args.weight_decay),
                                foreach=False)
    if kind == "rmsprop":
        return torch.optim.RMSprop(parameters, lr=f32(args.lr), alpha=f32(args.alpha),
                                   eps=f32(args.epsilon), momentum=f32(args.momentum),
                                   weight_decay=f32(args.weight_decay), foreach=False)
    raise ValueError(f"--optimizer {kind}: expected sgd, adam or rmsprop")


# ---------------------------------------------------------------- training

def evaluate(model, images, labels, batch_size):
    import torch
    correct = 0
    with torch.no_grad():
        for begin in range(0, images.shape[0], batch_size):
            logits = model(torch.from_numpy(images[begin:begin + batch_size])).numpy()
            # numpy's argmax returns the first maximum.
            correct += int(np.count_nonzero(np.argmax(logits, axis=1) == labels[begin:begin + batch_size]))
    return correct / images.shape[0] if images.shape[0] else 0.0


def train(args):
    import torch
    from torch import nn

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)  # nothing here is random, but keep any hidden use fixed
    train_x, train_y = load_split(args.data, "train", args.limit)
    test_x, test_y = load_split(args.data, "t10k", args.limit)
    if train_x.shape[0] == 0:
        raise ValueError(f"{args.data}: the train split is empty")
    model = build_model(read_initial_weights(args.onnx))
    optimizer = make_optimizer(args, model.parameters())
    loss_fn = nn.CrossEntropyLoss(reduction="mean")
    n = train_x.shape[0]
    print(f"training on {n} samples, testing on {test_x.shape[0]}, batch size {args.batch_size}, "
          f"seed {args.seed}, {args.optimizer} lr {args.lr}, {args.threads} threads "
          f"(torch {torch.__version__})", file=sys.stderr, flush=True)

    for epoch in range(args.epochs):
        order = epoch_order(n, args.seed, epoch)  # outside the timed part, as in replicactl
        model.train()
        loss_sum = 0.0
        correct = 0
        start = time.perf_counter()
        for begin in range(0, n, args.batch_size):
            idx = order[begin:begin + args.batch_size]
            x = torch.from_numpy(train_x[idx])
            y = torch.from_numpy(train_y[idx])
            optimizer.zero_grad(set_to_none=True)
            logits = model(x)
            loss = loss_fn(logits, y)
            loss.backward()
            optimizer.step()
            loss_sum += float(loss.item()) * len(idx)
            correct += int(np.count_nonzero(np.argmax(logits.detach().numpy(), axis=1) == train_y[idx]))
        seconds = time.perf_counter() - start
        model.eval()
        test_accuracy = evaluate(model, test_x, test_y, args.batch_size)
        print(json.dumps({
            "epoch": epoch + 1,
            "train_loss": loss_sum / n,
            "train_accuracy": correct / n,
            "test_accuracy": test_accuracy,
            "seconds": seconds,
            "samples_per_second": n / seconds if seconds > 0 else 0.0,
        }), flush=True)
    return 0


def add_optimizer_arguments(parser):
    """The optimizer options, with torch.optim's defaults (shared with compare_training.py)."""
    parser.add_argument("--optimizer", choices=["sgd", "adam", "rmsprop"], default="sgd")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--momentum", type=float, default=0.0, help="sgd, rmsprop")
    parser.add_argument("--nesterov", action="store_true", help="sgd; needs --momentum > 0")
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--beta1", type=float, default=0.9, help="adam")
    parser.add_argument("--beta2", type=float, default=0.999, help="adam")
    parser.add_argument("--epsilon", type=float, default=1e-8, help="adam, rmsprop")
    parser.add_argument("--alpha", type=float, default=0.99, help="rmsprop")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--self-test", action="store_true",
                        help="check the mt19937_64 port and the epoch order, then exit")
    parser.add_argument("--onnx", help="ONNX file with the initial weights (required to train)")
    parser.add_argument("--data", default=DEFAULT_DATA, help="IDX directory (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample order")
    parser.add_argument("--limit", type=int, help="use only the first N samples of each split")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    add_optimizer_arguments(parser)
    args = parser.parse_args(argv)
    if not args.self_test:
        if not args.onnx:
            parser.error("--onnx is required (e.g. from `replicad default-model --output FILE`)")
        for name in ("epochs", "batch_size", "threads"):
            if getattr(args, name) < 1:
                parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: expected >= 1")
        if args.limit is not None and args.limit < 1:
            parser.error(f"--limit {args.limit}: expected >= 1")
        if not 0 <= args.seed < 2**64:
            parser.error(f"--seed {args.seed}: expected an unsigned 64-bit integer")
        if args.nesterov and not args.momentum > 0:
            parser.error("--nesterov needs --momentum > 0")
    return args


def main(argv):
    args = parse_args(argv)
    if args.self_test:
        return self_test()
    try:
        return train(args)
    except (OSError, ValueError) as e:
        print(f"train_reference_torch: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
