#ifndef REPLICAD_SERVER_AUTH_ACCESS_POLICY_H_
#define REPLICAD_SERVER_AUTH_ACCESS_POLICY_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace replicad {

// What a bearer token may do. A token holds any set of roles; none implies
// another.
enum class Role { kInfer, kTrain, kAdmin, kMetrics };

// "infer", "train", "admin", "metrics".
const char* RoleName(Role role);
std::optional<Role> ParseRole(absl::string_view name);

// The role an RPC needs, by the name every door gives it (gRPC's method
// name; the HTTP door names its routes the same, e.g. "ModelInfer"):
//   open (nullopt): ServerLive, ServerReady, ModelReady (health probes)
//   infer:   Predict, ListDevices, ListModels, GetModel, ModelInfer, ModelStreamInfer,
//            ServerMetadata, ModelMetadata, ModelConfig, ModelStatistics,
//            RepositoryIndex, SystemSharedMemoryStatus, DownloadModel (and
//            train where the weights are trained: its handler checks)
//   train:   ConfigureTraining, TrainStep, TrainSteps, SaveCheckpoint
//   admin:   RepositoryModelLoad, RepositoryModelUnload, LoadModel, UnloadModel,
//            SystemSharedMemoryRegister, SystemSharedMemoryUnregister
//   metrics: Metrics (the Prometheus endpoint, under --metrics-auth only)
// Any other name needs admin, so an RPC added later is closed until listed.
std::optional<Role> RequiredRole(absl::string_view rpc);

// The role a gRPC call needs by its full path ("/package.Service/Method"):
// the services gRPC itself serves are open (grpc.health.v1.Health, whose
// probes carry no token) or need infer (grpc.reflection's
// ServerReflectionInfo, which describes the API); replicad.v1.Replicad's and
// inference.GRPCInferenceService's methods as RequiredRole says; any other
// path needs admin. `*method` gets the method's name (for messages).
std::optional<Role> RequiredRoleOfPath(absl::string_view path, std::string* method);

}  // namespace replicad

#endif  // REPLICAD_SERVER_AUTH_ACCESS_POLICY_H_
