#ifndef REPLICAD_TESTS_CORE_OPS_OP_TEST_NODE_H_
#define REPLICAD_TESTS_CORE_OPS_OP_TEST_NODE_H_

#include <algorithm>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/device/kernel.h"
#include "core/ops/op_registry.h"
#include "core/tensor/attributes.h"
#include "core/tensor/shape.h"
#include "core/tensor/tensor.h"
#include "gtest/gtest.h"

namespace replicad {

// A node under test for the shape rules of core/ops: owns the attributes and
// constants its KernelSpec points to, so a test can build one in a line and
// ask for the inferred output or the error. Named apart from the graph's
// `Node` (core/model/graph.h) so a test may include both.
class OpTestNode {
 public:
  // Named "n1" so messages can be matched on "<op_type> node 'n1'".
  OpTestNode(std::string op_type, std::vector<std::optional<TensorType>> inputs, int opset = 17) {
    spec_.op_type = std::move(op_type);
    spec_.node_name = "n1";
    spec_.opset = opset;
    spec_.attributes = &attributes_;
    spec_.inputs = std::move(inputs);
    spec_.constant_inputs.assign(spec_.inputs.size(), nullptr);
  }

  // The spec points into this object.
  OpTestNode(const OpTestNode&) = delete;
  OpTestNode& operator=(const OpTestNode&) = delete;

  OpTestNode& Set(const std::string& name, AttributeValue value) {
    attributes_.Set(name, std::move(value));
    return *this;
  }
  // Makes input `index` a plan-time constant of int64 `values`. Its declared
  // type becomes the constant's (1-D int64 of values.size()), so a test
  // cannot pass a declared type the constant contradicts.
  OpTestNode& Constant(int index, const std::vector<int64_t>& values) {
    constants_.push_back(Tensor::Host(DType::kInt64, {static_cast<int64_t>(values.size())}));
    std::copy(values.begin(), values.end(), constants_.back().data<int64_t>());
    spec_.inputs[index] = constants_.back().type();
    spec_.constant_inputs[index] = &constants_.back();
    return *this;
  }

  absl::Status Infer() {
    const OpDefinition* op = FindOp(spec_.op_type);
    if (op == nullptr) return absl::NotFoundError(spec_.op_type);
    return op->infer(&spec_);
  }
  // The single output's type; fails the test when inference fails.
  TensorType Output() {
    absl::Status status = Infer();
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_EQ(spec_.outputs.size(), 1u);
    return spec_.outputs.empty() ? TensorType{DType::kFloat32, {-42}} : spec_.outputs[0];
  }
  Shape OutputShape() { return Output().shape; }
  // The message of a failed inference; fails the test unless the code is `code`.
  std::string Error(absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
    absl::Status status = Infer();
    EXPECT_EQ(status.code(), code) << status;
    return std::string(status.message());
  }
  const KernelSpec& spec() const { return spec_; }

 private:
  Attributes attributes_;
  std::list<Tensor> constants_;  // Stable addresses for constant_inputs.
  KernelSpec spec_;
};

// Shorthands for the input types the shape-rule tests declare.
inline TensorType F32(Shape shape) { return {DType::kFloat32, std::move(shape)}; }
inline TensorType I64(Shape shape) { return {DType::kInt64, std::move(shape)}; }

}  // namespace replicad

#endif  // REPLICAD_TESTS_CORE_OPS_OP_TEST_NODE_H_
