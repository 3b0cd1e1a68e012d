#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_NATIVE_LAYOUT_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_NATIVE_LAYOUT_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/backends/cpu/kernels/cpu_kernel_factory.h"
#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/device/kernel.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace replicad {

// Internal to the CPU kernels: values kept between kernels in a layout
// oneDNN chose (KernelSpec's native layouts, e.g. channels-last or blocked
// channels) instead of row-major.

// The layout input `index` arrives in: its producer's, or `row_major`.
dnnl::memory::desc GivenLayout(const KernelSpec& spec, int index,
                               const dnnl::memory::desc& row_major);

// Whether `a` and `b` place every element at the same byte (e.g.
// channels-last and row-major for [N, C, 1, 1]). Checked element by element
// up to 2^16 elements (plan time); larger values only when a == b.
bool SameBytes(const dnnl::memory::desc& a, const dnnl::memory::desc& b);

// Where `dst` holds nothing but `sources` back to back, as their
// concatenation along `axis` (e.g. row-major, or 16-channel blocks whose
// sources fill their blocks, with every dim before `axis` 1): each source's
// byte offset in `dst`. Empty otherwise.
std::vector<size_t> JoinedOffsets(const std::vector<dnnl::memory::desc>& sources,
                                  const dnnl::memory::desc& dst, int axis);

// The format tag `desc` is, among those oneDNN's convolutions and poolings
// choose (channels-last, 16- and 8-channel blocks, row-major); nullopt for
// any other.
std::optional<dnnl::memory::format_tag> KnownLayout(const dnnl::memory::desc& desc);

// The offset in elements of the element at logical `index` (one entry per
// dim) in blocked `md`, padding and offset0 counted.
int64_t ElementOffset(const dnnl_memory_desc_t& md, const std::vector<int64_t>& index);

// Channels in blocks of the CPU's float vector width (nChw16c with AVX-512,
// nChw8c with AVX2) where they are a multiple of 8, the last 16-channel
// block then padded (24, 40, 72 channels); `any` (oneDNN's choice)
// elsewhere. oneDNN 2.6 picks channels-last for most forms when left to
// choose, and its blocked kernels are faster on these forms: on a 2-core
// AVX-512 EPYC, 1x1 convolutions 47 against 71 ms and depthwise ones 17
// against 29 ms over mobilenet_v2 at batch 16; and the Winograd kernels
// take only blocks, so a run of convolutions needs no reorders between them.
// Padding the blocks of mnasnet0_75's 24-, 40- and 72-channel layers rather
// than leaving them channels-last (with a reorder at either end) took its
// convolutions and reorders at batch 8 from 30 to 20 ms.
// (What the convolutions and poolings that keep native layouts write.)
dnnl::memory::format_tag ChannelBlockedLayout(int64_t channels);

// Whether `pd` is oneDNN's reference implementation (plain loops, for
// forms no optimised kernel takes).
bool IsReference(const dnnl::primitive_desc_base& pd);

// Throws oneDNN's unimplemented error when `pd` fell back to oneDNN's
// reference implementation, element by element and many times slower than
// a reorder to row-major and its optimised kernel (which
// InPlaceOrRowMajor then takes).
void RejectReference(const dnnl::primitive_desc_base& pd);

// Whether any input arrives in a layout other than row-major.
bool HasNativeInputs(const KernelSpec& spec);

// `build`'s kernel for `spec` as if every input were row-major and the
// output had to be: each input that arrives in a native layout is first
// reordered into row-major workspace. What a builder falls back to for a
// layout its primitive cannot read, so that any reader takes any layout.
KernelOrStatus WithRowMajorInputs(const KernelSpec& spec, CpuKernelContext& context,
                                  KernelOrStatus (*build)(const KernelSpec&, CpuKernelContext&));

// `inner`, made for inputs in `targets` (one per input; nullopt: as given),
// run after each input that arrives in another layout is reordered into
// workspace.
KernelOrStatus WithInputsReordered(const KernelSpec& spec, CpuKernelContext& context,
                                   const std::vector<std::optional<dnnl::memory::desc>>& targets,
                                   std::unique_ptr<Kernel> inner);

// `inner`, which writes output 0 in `written` (a layout oneDNN chose), made
// to write it in `row_major`: into workspace, then reordered. For a kernel
// whose readers need row-major but whose primitive is many times faster in
// its input's layout: the default model's pooling before its Flatten
// (batch 32, 32 x 14 x 14, AVX2) took 0.13-0.15 ms on its blocked input,
// plus 0.02 to reorder its output, where oneDNN's row-major pooling took
// 2.1 ms after a reorder of its input.
KernelOrStatus WithOutputReordered(const KernelSpec& spec, CpuKernelContext& context,
                                   std::unique_ptr<Kernel> inner, const dnnl::memory::desc& written,
                                   const dnnl::memory::desc& row_major);

// `read_in_place()`, a kernel that reads the native layouts as they are;
// where oneDNN has no implementation for them, `build` behind
// WithRowMajorInputs.
template <typename ReadInPlace>
KernelOrStatus InPlaceOrRowMajor(const KernelSpec& spec, CpuKernelContext& context,
                                 KernelOrStatus (*build)(const KernelSpec&, CpuKernelContext&),
                                 ReadInPlace read_in_place) {
  try {
    return read_in_place();
  } catch (const dnnl::error& e) {
    if (e.status != dnnl_unimplemented) throw;
  }
  return WithRowMajorInputs(spec, context, build);
}

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_NATIVE_LAYOUT_H_
