"""The sample order of `replicactl train` (client/epoch_order.h), so that `fit` with the same
seed visits the samples exactly as replicactl and the PyTorch reference runs do:

    g = mt19937_64(seed + epoch)   (the standard's one-integer seeding; the sum wraps mod 2^64)
    order = [0, 1, ..., n-1]
    for i = n-1 down to 1: j = g() % (i + 1); swap(order[i], order[j])
"""

import numpy as np

_N, _M = 312, 156
_MATRIX_A = np.uint64(0xB5026F5AA96619E9)
_UPPER = np.uint64(0xFFFFFFFF80000000)
_LOWER = np.uint64(0x7FFFFFFF)
_MASK64 = (1 << 64) - 1


def _seeded_state(seed):
    state = [seed & _MASK64]
    for i in range(1, _N):
        previous = state[-1]
        state.append((6364136223846793005 * (previous ^ (previous >> 62)) + i) & _MASK64)
    return np.array(state, dtype=np.uint64)


def _twist(mt):
    """The next 312 state words, vectorised in the three runs whose inputs are known."""
    one, zero = np.uint64(1), np.uint64(0)
    out = mt.copy()

    def mixed(high, low, far):
        y = (high & _UPPER) | (low & _LOWER)
        return far ^ (y >> one) ^ np.where((y & one) != zero, _MATRIX_A, zero)

    out[:_N - _M] = mixed(mt[:_N - _M], mt[1:_N - _M + 1], mt[_M:])
    out[_N - _M:_N - 1] = mixed(mt[_N - _M:_N - 1], mt[_N - _M + 1:], out[:_M - 1])
    out[_N - 1] = mixed(mt[_N - 1:], out[:1], out[_M - 1:_M])[0]
    return out


def _temper(y):
    y = y ^ ((y >> np.uint64(29)) & np.uint64(0x5555555555555555))
    y = y ^ ((y << np.uint64(17)) & np.uint64(0x71D67FFFEDA60000))
    y = y ^ ((y << np.uint64(37)) & np.uint64(0xFFF7EEE000000000))
    return y ^ (y >> np.uint64(43))


def mt19937_64(seed, count):
    """The first `count` outputs of std::mt19937_64(seed), as uint64."""
    mt = _seeded_state(seed)
    blocks = []
    for _ in range(-(-count // _N)):
        mt = _twist(mt)
        blocks.append(_temper(mt))
    return np.concatenate(blocks)[:count] if blocks else np.zeros(0, np.uint64)


def epoch_order(n, seed, epoch):
    """Sample indices 0..n-1 in the order epoch `epoch` (counted from 0) visits them."""
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    draws = mt19937_64((int(seed) + int(epoch)) & _MASK64, n - 1)
    picks = (draws % np.arange(n, 1, -1, dtype=np.uint64)).tolist()
    order = list(range(n))
    for i, j in zip(range(n - 1, 0, -1), picks):
        order[i], order[j] = order[j], order[i]
    return np.array(order, dtype=np.int64)
