#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_ACTIVATION_PASS_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_ACTIVATION_PASS_H_

#include <cstddef>

namespace replicad {

// Internal to the CPU kernels: fused activations that a convolution runs
// itself as a pass over its output instead of as oneDNN's post-op, because
// oneDNN 2.6 computes them about twice as slowly: on 2 threads of an AVX-512
// EPYC over 1.2 M floats (efficientnet_b0's 96 x 112 x 112 expansion), its
// swish 0.40 ms against 0.19 for this pass, and as a convolution's post-op
// slower still. (The exact GELU as such a pass after convnext's MatMuls
// measured no faster than oneDNN's post-op: the pass reads the output
// again.)
enum class ActivationPass {
  kNone,
  kSilu,  // x * sigmoid(x): Swish with alpha 1 (efficientnet).
};

// From this many floats a pass is split across the calling slot's OpenMP
// threads; below it a parallel region costs more than it saves.
inline constexpr size_t kParallelActivationFloats = size_t{32} << 10;

// Applies `pass` to data[0, count) in place. With AVX-512, SiLU within 4e-7
// of the exact value, relative to it (below -87, where the exact value is
// under 1e-35 in size, -0); else x / (1 + exp(-x)) with libm's exp. NaN
// stays NaN, +inf stays +inf and -inf becomes NaN, as the formula gives.
void RunActivationPass(ActivationPass pass, float* data, size_t count);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_ACTIVATION_PASS_H_
