#ifndef REPLICAD_CORE_OPS_DROPOUT_MASK_H_
#define REPLICAD_CORE_OPS_DROPOUT_MASK_H_

#include <cstdint>

#include "core/ops/host_device.h"

// The counter-based generator behind replicad.DropoutTrain's masks
// (core/ops/training_ops.h), shared by every backend so that their masks are
// bit-identical by construction: the CPU kernel calls it on the host, the
// CUDA kernel on the device. Header-only and free of CUDA headers; nvcc sees
// the functions as __host__ __device__.
//
// The mask of global row r, element e (row-major within the row) keeps the
// element when DropoutUniform(DropoutRowKey(DropoutStepKey(seed, step,
// node_seed), r), e) >= ratio. Pure functions; thread-safe.

namespace replicad {

// SplitMix64's finaliser: a bijection that scrambles every input bit.
REPLICAD_HOST_DEVICE inline uint64_t DropoutMix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The key of one node in one step: the training seed, the step counter and
// the node's own seed (attribute replicad.node_seed), each mixed in turn.
REPLICAD_HOST_DEVICE inline uint64_t DropoutStepKey(uint64_t seed, uint64_t step,
                                                    uint64_t node_seed) {
  return DropoutMix(DropoutMix(DropoutMix(seed) ^ step) ^ node_seed);
}

// The key of global row `row` (the row's index in the whole batch, not in a
// slot's slice, so the mask does not depend on the split).
REPLICAD_HOST_DEVICE inline uint64_t DropoutRowKey(uint64_t step_key, int64_t row) {
  return DropoutMix(step_key ^ static_cast<uint64_t>(row));
}

// A float in [0, 1) from 24 random bits, so every value is exact in float32
// and the comparison with the ratio is the same on every device.
REPLICAD_HOST_DEVICE inline float DropoutUniform(uint64_t row_key, int64_t element) {
  return static_cast<float>(DropoutMix(row_key ^ static_cast<uint64_t>(element)) >> 40) *
         (1.0f / 16777216.0f);
}

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_DROPOUT_MASK_H_
