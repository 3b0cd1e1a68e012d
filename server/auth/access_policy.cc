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
    {"ConfigureTraining", Role::kTrain},
    {"TrainStep", Role::kTrain},
    {"SaveCheckpoint", Role::kTrain},
    {"RepositoryModelLoad", Role::kAdmin},
    {"RepositoryModelUnload", Role::kAdmin},
    {"SystemSharedMemoryRegister", Role::kAdmin},
    {"SystemSharedMemoryUnregister", Role::kAdmin},
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

}  // namespace replicad
