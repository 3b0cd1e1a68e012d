#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_CPU_KERNEL_FACTORY_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_CPU_KERNEL_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/backends/cpu/kernels/non_finite.h"
#include "core/backends/cpu/kernels/slot_scratchpad.h"
#include "core/device/kernel.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace replicad {

class WeightCache;

// The oneDNN engine and in-order stream of one CPU slot. It must outlive every
// kernel made with it. Kernels are made and run on one thread at a time (the
// slot's stream thread in CpuDevice), which is what lets them share
// `scratchpad`. `weights`, when set, shares reordered weights between kernels
// (CpuDevice gives every slot the process's HostWeightCache, on HostEngine);
// without it each kernel keeps its own.
struct CpuKernelContext {
  dnnl::engine engine;
  dnnl::stream stream;
  std::shared_ptr<WeightCache> weights;
  bool winograd = true;  // See CpuSlotOptions::winograd.
  SlotScratchpad scratchpad;
  FiniteOutputs finite;  // What the NaN checks of non_finite.h share.
};

// Builds the oneDNN-backed kernel for spec (outputs already inferred by the
// op's shape rule). All primitives, scratchpads and index tables are made
// here; the kernel's Run only points them at the given buffers, executes and
// waits on context.stream, so outputs are complete when Run returns. Each
// kernel counts its runs in context.finite.
//
// Fails with Unimplemented naming the op and the node when this backend lacks
// the op or oneDNN has no implementation for the form; InvalidArgument (from
// the op's shape rule) when spec is malformed or its outputs were not
// inferred; Internal naming the node for any other oneDNN error.
absl::StatusOr<std::unique_ptr<Kernel>> MakeCpuKernel(const KernelSpec& spec,
                                                      CpuKernelContext& context);

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_CPU_KERNEL_FACTORY_H_
