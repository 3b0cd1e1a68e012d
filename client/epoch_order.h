#ifndef REPLICAD_CLIENT_EPOCH_ORDER_H_
#define REPLICAD_CLIENT_EPOCH_ORDER_H_

#include <cstdint>
#include <vector>

namespace replicad::client {

// The order in which epoch `epoch` (counted from 0: the epoch printed as
// "epoch 1" is epoch 0) visits samples 0..n-1. Fixed by (n, seed, epoch) on
// every platform, so that another program (e.g. a PyTorch reference run) can
// visit the samples in the same order. The algorithm, exactly:
//
//   g = std::mt19937_64(seed + epoch)   // the 64-bit Mersenne Twister with the
//                                       // standard's one-integer seeding; the
//                                       // sum wraps modulo 2^64
//   order = [0, 1, ..., n-1]
//   for i = n-1 down to 1:
//     j = g() % (i + 1)                 // one 64-bit output per step, no rejection
//     swap(order[i], order[j])
//
// The modulo's bias is below 2^-32 for n < 2^32. Neither std::shuffle nor
// std::uniform_int_distribution is used: their algorithms are left to the
// library. Check values: EpochOrder(10, 0, 0) = {7, 2, 0, 8, 3, 9, 6, 1, 5, 4},
// EpochOrder(10, 0, 1) = {1, 7, 3, 9, 4, 0, 5, 2, 6, 8}; EpochOrder(60000, 0, 0)
// starts 50855, 30713, 21729 and ends with 5694.
//
// n <= 0 gives an empty order. Thread-safe; keeps no state.
std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace replicad::client

#endif  // REPLICAD_CLIENT_EPOCH_ORDER_H_
