#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_OWNED_SPEC_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_OWNED_SPEC_H_

#include <vector>

#include "core/device/kernel.h"
#include "core/tensor/attributes.h"
#include "core/tensor/tensor.h"

namespace replicad {

// Internal to the CPU kernels.
// A copy of a spec that owns what it points to (attributes, constant
// inputs: a Tensor shares its bytes), for a kernel built after the plan's
// spec is gone.
class OwnedSpec {
 public:
  explicit OwnedSpec(const KernelSpec& spec) : spec_(spec), attributes_(*spec.attributes) {
    spec_.attributes = &attributes_;
    constants_.reserve(spec.constant_inputs.size());
    for (size_t i = 0; i < spec.constant_inputs.size(); ++i) {
      const Tensor* constant = spec.constant_inputs[i];
      constants_.push_back(constant != nullptr ? *constant : Tensor());
      spec_.constant_inputs[i] = constant != nullptr ? &constants_.back() : nullptr;
    }
  }
  OwnedSpec(const OwnedSpec&) = delete;
  OwnedSpec& operator=(const OwnedSpec&) = delete;
  const KernelSpec& spec() const { return spec_; }

 private:
  KernelSpec spec_;
  Attributes attributes_;
  std::vector<Tensor> constants_;  // Reserved up front: spec_ points into it.
};

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_OWNED_SPEC_H_
