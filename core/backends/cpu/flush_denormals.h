#ifndef REPLICAD_CORE_BACKENDS_CPU_FLUSH_DENORMALS_H_
#define REPLICAD_CORE_BACKENDS_CPU_FLUSH_DENORMALS_H_

namespace replicad {

// Makes this thread's float arithmetic flush denormal (subnormal) results to
// zero and read denormal operands as zero (x86's FTZ and DAZ), as
// TensorFlow's CPU threads do: an operation on a denormal takes a microcode
// assist, about 100x an ordinary one, and a training step whose gradients
// underflow there ran 25x slower (Theano's example in pipeline_bench: 5.1 s
// against 0.2 s). Only values below 1.2e-38 change. Threads created after
// it (an OpenMP team this thread starts) inherit the mode. No-op off x86.
void FlushDenormalsOnThisThread();

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_FLUSH_DENORMALS_H_
