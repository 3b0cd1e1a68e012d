#ifndef REPLICAD_TESTS_TESTING_REGION_OUTPUTS_H_
#define REPLICAD_TESTS_TESTING_REGION_OUTPUTS_H_

#include <string>
#include <vector>

#include "server/inference_request.h"

namespace replicad::testing {

// The shared-memory request tests' writer: outputs placed in a region go
// there (InferOutputs), the others into buffers of its own.
class RegionOutputs : public InferOutputs {
 public:
  using InferOutputs::InferOutputs;

 private:
  absl::StatusOr<void*> Place(const TensorSpec&, const TensorType& type,
                              const TensorRegion* region) override {
    if (region != nullptr) return nullptr;
    return static_cast<void*>(own_.emplace_back(ByteSize(type)).data());
  }
  std::vector<std::vector<char>> own_;
};

// A tensor's parameters naming [offset, offset + bytes) of `region`.
inline void SetRegion(google::protobuf::Map<std::string, inference::InferParameter>* parameters,
                      const std::string& region, uint64_t offset, uint64_t bytes) {
  (*parameters)["shared_memory_region"].set_string_param(region);
  (*parameters)["shared_memory_offset"].set_int64_param(static_cast<int64_t>(offset));
  (*parameters)["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(bytes));
}

// A request for float32[4] "x" at `in_offset` of `in_region` and, with an
// `out_region`, output "y" float32[4] at `out_offset` there.
inline inference::ModelInferRequest RegionRequest(const std::string& in_region, uint64_t in_offset,
                                                  const std::string& out_region = "",
                                                  uint64_t out_offset = 0) {
  inference::ModelInferRequest request;
  request.set_model_name("m");
  auto* input = request.add_inputs();
  input->set_name("x");
  input->set_datatype("FP32");
  input->add_shape(4);
  SetRegion(input->mutable_parameters(), in_region, in_offset, 16);
  if (!out_region.empty()) {
    auto* output = request.add_outputs();
    output->set_name("y");
    SetRegion(output->mutable_parameters(), out_region, out_offset, 16);
  }
  return request;
}

}  // namespace replicad::testing

#endif  // REPLICAD_TESTS_TESTING_REGION_OUTPUTS_H_
