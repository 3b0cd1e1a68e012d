#ifndef REPLICAD_TESTS_CORE_BACKENDS_CPU_CPU_KERNEL_TEST_BASE_H_
#define REPLICAD_TESTS_CORE_BACKENDS_CPU_CPU_KERNEL_TEST_BASE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/backends/cpu/kernels/cpu_kernel_factory.h"
#include "core/device/kernel.h"
#include "core/ops/op_registry.h"
#include "core/tensor/attributes.h"
#include "core/tensor/shape.h"
#include "core/tensor/tensor.h"
#include "gtest/gtest.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace replicad {

// What the CPU kernel tests share: a fixture that infers, builds and runs one
// node on a oneDNN CPU engine, and the tensor helpers the references use.

// Float32 of `shape`, uniform in [-2, 2) from `seed`.
inline Tensor Random(Shape shape, uint32_t seed) {
  Tensor t = Tensor::Host(DType::kFloat32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

inline Tensor Int64s(Shape shape, const std::vector<int64_t>& values) {
  Tensor t = Tensor::Host(DType::kInt64, std::move(shape));
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

// A host tensor of `dtype` holding `values` (T the dtype's element type).
template <typename T>
Tensor Of(DType dtype, Shape shape, const std::vector<T>& values) {
  Tensor t = Tensor::Host(dtype, std::move(shape));
  std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}

// The elements of `t` as T.
template <typename T>
std::vector<T> Values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.num_elements());
}

// Row-major offset of `index` in `shape`.
inline int64_t Offset(const Shape& shape, const std::vector<int64_t>& index) {
  int64_t offset = 0;
  for (size_t d = 0; d < shape.size(); ++d) offset = offset * shape[d] + index[d];
  return offset;
}

// Float32 `actual` equals `expected` in type and, element by element, to
// within 1e-5 + 1e-4 * |expected|.
inline void ExpectNear(const Tensor& actual, const Tensor& expected) {
  ASSERT_EQ(actual.type(), expected.type());
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    const float e = expected.data<float>()[i];
    ASSERT_NEAR(actual.data<float>()[i], e, 1e-5 + 1e-4 * std::fabs(e)) << "element " << i;
  }
}

class CpuKernelTestBase : public ::testing::Test {
 protected:
  CpuKernelTestBase()
      : engine_(dnnl::engine::kind::cpu, 0), context_{engine_,          dnnl::stream(engine_),
                                                      nullptr,          true,
                                                      SlotScratchpad{}, FiniteOutputs{}} {}

  // Infers, builds and runs one node; `constants` lists the inputs passed as
  // plan-time constants (e.g. the op's value inputs).
  absl::StatusOr<std::vector<Tensor>> Run(const std::string& op_type,
                                          const std::vector<std::optional<Tensor>>& inputs,
                                          const Attributes& attributes, int opset = 17,
                                          std::vector<int> constants = {}) {
    KernelSpec spec;
    spec.op_type = op_type;
    spec.node_name = "k1";
    spec.opset = opset;
    spec.attributes = &attributes;
    std::vector<const void*> data;
    for (size_t i = 0; i < inputs.size(); ++i) {
      spec.inputs.push_back(inputs[i] ? std::optional<TensorType>(inputs[i]->type())
                                      : std::nullopt);
      const bool constant = std::find(constants.begin(), constants.end(), i) != constants.end();
      spec.constant_inputs.push_back(constant ? &*inputs[i] : nullptr);
      data.push_back(inputs[i] ? inputs[i]->raw_data() : nullptr);
    }
    const OpDefinition* op = FindOp(op_type);
    if (op == nullptr) return absl::NotFoundError(op_type);
    absl::Status inferred = op->infer(&spec);
    if (!inferred.ok()) return inferred;
    absl::StatusOr<std::unique_ptr<Kernel>> kernel = MakeCpuKernel(spec, context_);
    if (!kernel.ok()) return kernel.status();
    std::vector<Tensor> outputs;
    std::vector<void*> output_data;
    for (const TensorType& type : spec.outputs) {
      outputs.push_back(Tensor::Host(type.dtype, type.shape));
      output_data.push_back(outputs.back().raw_data());
    }
    std::vector<char> workspace((*kernel)->workspace_bytes());
    (*kernel)->SetWorkspace(workspace.data());
    absl::Status ran = (*kernel)->Run(RunContext{}, data.data(), output_data.data());
    if (!ran.ok()) return ran;
    return outputs;
  }

  dnnl::engine engine_;
  CpuKernelContext context_;
};

}  // namespace replicad

#endif  // REPLICAD_TESTS_CORE_BACKENDS_CPU_CPU_KERNEL_TEST_BASE_H_
