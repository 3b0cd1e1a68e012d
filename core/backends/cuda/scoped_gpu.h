#ifndef REPLICAD_CORE_BACKENDS_CUDA_SCOPED_GPU_H_
#define REPLICAD_CORE_BACKENDS_CUDA_SCOPED_GPU_H_

#include <cuda_runtime_api.h>

namespace replicad {

// Makes `ordinal` the calling thread's GPU until destroyed, then restores the
// thread's own: code that may run on a slot's host thread (a buffer's free,
// an abort, a client's shared region let go after a request) must leave that
// thread on its slot's GPU.
class ScopedGpu {
 public:
  explicit ScopedGpu(int ordinal) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != ordinal) cudaSetDevice(ordinal);
  }
  ~ScopedGpu() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  ScopedGpu(const ScopedGpu&) = delete;
  ScopedGpu& operator=(const ScopedGpu&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CUDA_SCOPED_GPU_H_
