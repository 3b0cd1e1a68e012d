#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_ACTIVATION_PASS_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_ACTIVATION_PASS_H_

#include <cstddef>
#include <cstdint>
#include <limits>

namespace replicad {

// Internal to the CPU kernels: activations that a kernel runs itself as a
// pass over its output instead of as oneDNN's post-op, for one of two
// reasons.
//
// Speed: oneDNN 2.6 computes SiLU about twice as slowly: on 2 threads of an
// AVX-512 EPYC over 1.2 M floats (efficientnet_b0's 96 x 112 x 112
// expansion), its swish 0.40 ms against 0.19 for this pass, and as a
// convolution's post-op slower still. (The exact GELU as such a pass after
// convnext's MatMuls measured no faster than oneDNN's post-op: the pass
// reads the output again.)
//
// NaN: oneDNN 2.6's relu (slope 0) and clip, standalone or as post-ops,
// compute max(x, low) with the bound as the instruction's second operand,
// which x86 returns when either is NaN: a NaN becomes `low`, and a request
// with a NaN pixel gets plausible numbers back. Its reference relu gives
// NaN for -inf (-inf * 0). The clip here keeps NaN, as ONNX Runtime and
// PyTorch do.
enum class ActivationPass {
  kNone,
  kSilu,  // x * sigmoid(x): Swish with alpha 1 (efficientnet).
  kClip,  // min(max(x, low), high), NaN kept: Relu is [0, +inf], ReLU6 [0, 6].
};

struct ActivationStep {
  ActivationPass pass = ActivationPass::kNone;
  float low = 0.0f;  // kClip's bounds; low > high gives high everywhere (numpy.clip).
  float high = std::numeric_limits<float>::infinity();
};

// From this many floats a pass is split across the calling slot's OpenMP
// threads; below it a parallel region costs more than it saves.
inline constexpr size_t kParallelActivationFloats = size_t{32} << 10;

// Writes step(in[i]) to out[i] for i < count; `in` may be `out`. kSilu:
// with AVX-512, within 4e-7 of the exact value, relative to it (below -87,
// where the exact value is under 1e-35 in size, -0); else x / (1 + exp(-x))
// with libm's exp; NaN stays NaN, +inf stays +inf and -inf becomes NaN, as
// the formula gives. kClip: exact; NaN stays NaN, infinities clip.
void RunActivationPass(const ActivationStep& step, const float* in, float* out, size_t count);

// In place over bfloat16 values (a convolution's output in a chain of bf16
// convolutions): the step computed in float32 and rounded to nearest even;
// NaN stays NaN. On the calling thread (only a request with a NaN or an
// infinity runs it: the fast path clamps in oneDNN's post-op).
void RunActivationPassBFloat16(const ActivationStep& step, uint16_t* data, size_t count);

// In place.
inline void RunActivationPass(const ActivationStep& step, float* data, size_t count) {
  RunActivationPass(step, data, data, count);
}
inline void RunActivationPass(ActivationPass pass, float* data, size_t count) {
  RunActivationPass(ActivationStep{pass}, data, data, count);
}

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_ACTIVATION_PASS_H_
