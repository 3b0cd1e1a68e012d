#include "core/backends/cpu/kernels/parallel_copy.h"

#include <omp.h>

#include <cstring>

namespace replicad {

void CopyAcrossThreads(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
#pragma omp parallel if (bytes >= kParallelCopyBytes)
  {
    const size_t threads = static_cast<size_t>(omp_get_num_threads());
    const size_t thread = static_cast<size_t>(omp_get_thread_num());
    const size_t begin = bytes * thread / threads;
    const size_t end = bytes * (thread + 1) / threads;
    if (begin < end) {
      std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin,
                  end - begin);
    }
  }
}

}  // namespace replicad
