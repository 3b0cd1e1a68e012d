#ifndef REPLICAD_SERVER_TRAINING_CONFIG_PROTO_H_
#define REPLICAD_SERVER_TRAINING_CONFIG_PROTO_H_

#include "absl/status/statusor.h"
#include "core/train/training_config.h"
#include "replicad/v1/replicad.pb.h"

namespace replicad {

// The API's TrainingConfig in the core's terms: unset fields (UNSPECIFIED
// enums, absent optional numbers) keep TrainingConfig's defaults, which are
// the API's documented ones. InvalidArgument naming the field for an enum
// number the API does not define (proto3 keeps unknown numbers, e.g. a
// client's optimizer kind 99), with the names it does.
absl::StatusOr<TrainingConfig> TrainingConfigFromProto(const v1::TrainingConfig& proto);

// The configuration as applied, every field set; floats are given as the
// shortest decimal that names them (0.01, not 0.009999999776).
v1::TrainingConfig TrainingConfigToProto(const TrainingConfig& config);

}  // namespace replicad

#endif  // REPLICAD_SERVER_TRAINING_CONFIG_PROTO_H_
