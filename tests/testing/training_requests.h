#ifndef REPLICAD_TESTS_TESTING_TRAINING_REQUESTS_H_
#define REPLICAD_TESTS_TESTING_TRAINING_REQUESTS_H_

#include <cstdint>
#include <string>

#include "core/tensor/tensor.h"
#include "replicad/v1/replicad.pb.h"
#include "tests/testing/proto_tensors.h"
#include "tests/testing/test_models.h"

namespace replicad::testing {

// Training requests for the daemon's embedded default model (image
// [N, 1, 28, 28], 10 classes), for the tests that train it end to end.

// Labels (first + 3 i) % 10, i < batch.
inline Tensor DefaultModelLabels(int64_t batch, int64_t first) {
  Tensor labels = Tensor::Host(DType::kInt64, {batch});
  for (int64_t i = 0; i < batch; ++i) labels.data<int64_t>()[i] = (first + 3 * i) % 10;
  return labels;
}

// A step of `batch` random images of seed `seed` and DefaultModelLabels(batch, seed).
inline v1::TrainStepRequest DefaultModelStep(int64_t batch, uint64_t seed,
                                             const std::string& model = "default") {
  v1::TrainStepRequest request;
  request.set_model(model);
  *request.add_inputs() = ToProto("image", RandomTensor({batch, 1, 28, 28}, seed));
  *request.mutable_targets() =
      ToProto("targets", DefaultModelLabels(batch, static_cast<int64_t>(seed)));
  return request;
}

// SGD at 0.05 with momentum 0.9.
inline v1::ConfigureTrainingRequest SgdConfig(const std::string& model = "default") {
  v1::ConfigureTrainingRequest request;
  request.set_model(model);
  v1::OptimizerConfig* optimizer = request.mutable_config()->mutable_optimizer();
  optimizer->set_kind(v1::OPTIMIZER_SGD);
  optimizer->set_learning_rate(0.05);
  optimizer->set_momentum(0.9);
  return request;
}

}  // namespace replicad::testing

#endif  // REPLICAD_TESTS_TESTING_TRAINING_REQUESTS_H_
