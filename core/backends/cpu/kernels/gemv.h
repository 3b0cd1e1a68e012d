#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_GEMV_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_GEMV_H_

#include <cstdint>

namespace replicad {

// Internal to the CPU kernels: a matrix times one vector, for a classifier
// at batch 1 (a Gemm of one row against constant weights, ONNX's transB = 1
// layout: one row of W per output).
//
// At batch 1 a classifier only streams its weights from memory once.
// oneDNN 2.6's brgemm matmul, even with the weights in its own packed
// layout, read alexnet's 9216 x 4096 classifier at 24 GB/s (6.3 ms) on a
// 2-core AVX-512 EPYC where ONNX Runtime's took 4.6 ms; this reads the rows
// as ONNX stores them, in one pass.

// y[r] = dot(w + r * k, x) for r < rows: `w` holds `rows` rows of `k`
// floats. The rows are split across the calling slot's OpenMP threads.
// AVX-512 where the CPU has it, else AVX2 with FMA, else a portable loop;
// the vector forms' sums differ in order from a sequential loop's (within
// float rounding).
void GemvRows(const float* w, const float* x, float* y, int64_t rows, int64_t k);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_GEMV_H_
