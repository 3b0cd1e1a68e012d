#ifndef REPLICAD_CORE_TRAIN_STANDALONE_KERNEL_H_
#define REPLICAD_CORE_TRAIN_STANDALONE_KERNEL_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/device/kernel.h"
#include "core/tensor/attributes.h"
#include "core/tensor/buffer.h"
#include "core/tensor/shape.h"

namespace replicad {

// A kernel a trainer runs outside any graph (a parameter server's sums, the
// optimizer's update and dry run, the check of summed gradients), with its
// scratch space and its spec's output count.
struct StandaloneKernel {
  std::unique_ptr<Kernel> kernel;
  std::shared_ptr<Buffer> workspace;  // Null when the kernel asks for none.
  size_t outputs = 0;
};

// `op_type` (a registered op) named `node_name`, on float32 inputs of
// `shapes` with `attributes` (read only while building), through its shape
// rule, built by `device`, its scratch allocated there. The shape rule's,
// MakeKernel's or Allocate's error passes through; Internal for an op the
// registry lacks.
absl::StatusOr<StandaloneKernel> MakeStandaloneKernel(Device& device, std::string_view op_type,
                                                      std::string node_name,
                                                      const Attributes& attributes,
                                                      const std::vector<Shape>& shapes);

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_STANDALONE_KERNEL_H_
