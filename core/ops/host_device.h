#ifndef REPLICAD_CORE_OPS_HOST_DEVICE_H_
#define REPLICAD_CORE_OPS_HOST_DEVICE_H_

// Marks a function that both the host compiler and nvcc compile, for the
// headers whose code the CPU kernels and our CUDA kernels share (dropout
// masks, the optimizer's rules, quantization, exact float arithmetic): nvcc
// sees it as __host__ __device__, the host compiler as a plain function.
#if defined(__CUDACC__)
#define REPLICAD_HOST_DEVICE __host__ __device__
#else
#define REPLICAD_HOST_DEVICE
#endif

#endif  // REPLICAD_CORE_OPS_HOST_DEVICE_H_
