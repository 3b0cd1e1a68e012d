#include "server/auth/access_policy.h"

#include <utility>

namespace replicad {
namespace {

constexpr std::pair<const char*, Role> kRoles[] = {{"infer", Role::kInfer},
                                                   {"train", Role::kTrain},
                                                   {"admin", Role::kAdmin},
                                                   {"metrics", Role::kMetrics}};

constexpr const char* kOpen[] = {"ServerLive", "ServerReady", "ModelReady"};

constexpr std::pair<const char*, Role> kRequired[] = {
    {"Predict", Role::kInfer},
    {"ListDevices", Role::kInfer},
    {"ListModels", Role::kInfer},
    {"GetModel", Role::kInfer},
    {"ModelInfer", Role::kInfer},
    {"ModelStreamInfer", Role::kInfer},
    {"ServerMetadata", Role::kInfer},
    {"ModelMetadata", Role::kInfer},
    {"ModelConfig", Role::kInfer},
    {"ModelStatistics", Role::kInfer},
    {"RepositoryIndex", Role::kInfer},
    {"SystemSharedMemoryStatus", Role::kInfer},
    {"CudaSharedMemoryStatus", Role::kInfer},
    {"ConfigureTraining", Role::kTrain},
    {"TrainStep", Role::kTrain},
    {"TrainSteps", Role::kTrain},
    {"SaveCheckpoint", Role::kTrain},
    // Untrained weights are what any caller may predict with; trained ones
    // need train too (checked by the handler once it knows).
    {"DownloadModel", Role::kInfer},
    {"LoadModel", Role::kAdmin},
    {"UnloadModel", Role::kAdmin},
    {"RepositoryModelLoad", Role::kAdmin},
    {"RepositoryModelUnload", Role::kAdmin},
    {"SystemSharedMemoryRegister", Role::kAdmin},
    {"SystemSharedMemoryUnregister", Role::kAdmin},
    {"CudaSharedMemoryRegister", Role::kAdmin},
    {"CudaSharedMemoryUnregister", Role::kAdmin},
    {"Metrics", Role::kMetrics},
};

}  // namespace

const char* RoleName(Role role) {
  for (const auto& [name, value] : kRoles) {
    if (value == role) return name;
  }
  return "?";
}

std::optional<Role> ParseRole(absl::string_view name) {
  for (const auto& [text, value] : kRoles) {
    if (name == text) return value;
  }
  return std::nullopt;
}

std::optional<Role> RequiredRole(absl::string_view rpc) {
  for (const char* open : kOpen) {
    if (rpc == open) return std::nullopt;
  }
  for (const auto& [name, role] : kRequired) {
    if (rpc == name) return role;
  }
  return Role::kAdmin;
}

std::optional<Role> RequiredRoleOfPath(absl::string_view path, std::string* method) {
  const size_t slash = path.rfind('/');
  const absl::string_view service =
      slash == absl::string_view::npos || slash == 0 ? "" : path.substr(1, slash - 1);
  const absl::string_view name = slash == absl::string_view::npos ? path : path.substr(slash + 1);
  *method = std::string(name);
  if (service == "grpc.health.v1.Health") return std::nullopt;
  if (service == "grpc.reflection.v1alpha.ServerReflection" ||
      service == "grpc.reflection.v1.ServerReflection") {
    return Role::kInfer;
  }
  if (service == "replicad.v1.Replicad" || service == "inference.GRPCInferenceService") {
    return RequiredRole(name);
  }
  return Role::kAdmin;
}

}  // namespace replicad
