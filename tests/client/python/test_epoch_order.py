"""replicad.epoch_order is client/epoch_order.h's order (the check values it states)."""

import replicad


def test_check_values_of_the_cpp_header():
    assert replicad.epoch_order(10, 0, 0).tolist() == [7, 2, 0, 8, 3, 9, 6, 1, 5, 4]
    assert replicad.epoch_order(10, 0, 1).tolist() == [1, 7, 3, 9, 4, 0, 5, 2, 6, 8]
    order = replicad.epoch_order(60000, 0, 0)
    assert order[:3].tolist() == [50855, 30713, 21729]
    assert order[-1] == 5694
    assert sorted(order.tolist()) == list(range(60000))


def test_small_and_wrapping_seeds():
    assert replicad.epoch_order(0, 0, 0).tolist() == []
    assert replicad.epoch_order(1, 5, 3).tolist() == [0]
    # seed + epoch wraps modulo 2^64, as in C++.
    assert (replicad.epoch_order(50, 2**64 - 1, 1).tolist() ==
            replicad.epoch_order(50, 0, 0).tolist())
