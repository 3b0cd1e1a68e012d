"""Reads MNIST-style IDX files (the format of `replicactl train --data`), e.g. Debian's
dataset-fashion-mnist in /usr/share/datasets/fashion-mnist."""

import gzip
import os

import numpy as np

_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path):
    """The array an IDX file holds (gzip-compressed or not)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _TYPES:
        raise ValueError(f"{path}: not an IDX file (magic {data[:4].hex()})")
    rank = data[3]
    header = 4 + 4 * rank
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(rank))
    dtype = np.dtype(_TYPES[data[2]])
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        raise ValueError(f"{path}: shape {list(shape)} needs {expected} bytes, file has {len(data)}")
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def load_idx(directory, split):
    """(images uint8 [N, rows, cols], labels int64 [N]) of `split` ("train" or "t10k") from
    DIR/SPLIT-images-idx3-ubyte[.gz] and DIR/SPLIT-labels-idx1-ubyte[.gz]."""
    arrays = []
    for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
        base = os.path.join(directory, f"{split}-{kind}")
        path = base if os.path.exists(base) else base + ".gz"
        if not os.path.exists(path):
            raise FileNotFoundError(f"{base}[.gz]: no such file")
        arrays.append(read_idx(path))
    images, labels = arrays
    if len(images) != len(labels):
        raise ValueError(f"{directory}: {len(images)} {split} images but {len(labels)} labels")
    return images, labels.astype(np.int64)
