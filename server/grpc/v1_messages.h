#ifndef REPLICAD_SERVER_GRPC_V1_MESSAGES_H_
#define REPLICAD_SERVER_GRPC_V1_MESSAGES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/serve/loaded_model.h"
#include "core/serve/request_validation.h"
#include "core/serve/serving_core.h"
#include "replicad/v1/replicad.pb.h"
#include "server/host_buffer_pool.h"

namespace replicad {

// replicad.v1's messages in the serving core's terms and back, for the
// handlers of the replicad.v1 service (replicad_service.h) and its streams.

// A request tensor's dtype, shape and bytes `raw` (not yet checked against
// anything); InvalidArgument naming `field` for a dtype replicad lacks.
absl::StatusOr<RequestInput> DecodeTensor(const v1::Tensor& t, absl::string_view raw,
                                          const std::string& field);

// `raw[i]` holds tensors[i]'s bytes where the wire walk took them out of
// the message (Predict); empty, they are in the tensors (TrainStep).
absl::StatusOr<std::vector<RequestInput>> DecodeInputs(
    const google::protobuf::RepeatedPtrField<v1::Tensor>& tensors,
    absl::Span<const std::shared_ptr<HostBuffer>> raw = {});

// A TrainStepRequest as the core takes it, viewing the message's bytes.
absl::StatusOr<TrainRequest> TrainRequestOf(const v1::TrainStepRequest& request);

// A step's answer; `model` is the model it trained, whose slots name the
// step's slices.
void FillTrainStepResponse(const DataParallelTrainer::StepResult& step, const LoadedModel& model,
                           v1::TrainStepResponse* response);

}  // namespace replicad

#endif  // REPLICAD_SERVER_GRPC_V1_MESSAGES_H_
