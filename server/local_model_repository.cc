#include "server/local_model_repository.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "core/model/default_model.h"
#include "core/model/onnx_import.h"
#include "server/model_training.h"

namespace replicad {
namespace {

absl::StatusOr<std::shared_ptr<const Model>> LoadSource(const ModelSource& source) {
  if (source.path.empty()) return LoadDefaultModel();
  return LoadOnnxFile(source.path, source.name);
}

}  // namespace

LocalModelRepository::LocalModelRepository(Config config) : config_(std::move(config)) {}

absl::StatusOr<std::vector<ModelSource>> LocalModelRepository::Sources() const {
  std::vector<ModelSource> sources;
  if (!config_.directory.empty()) {
    absl::StatusOr<std::vector<ModelSource>> found = ScanModelRepository(config_.directory);
    if (!found.ok()) return found.status();
    sources = *std::move(found);
  }
  for (const ModelSource& fixed : config_.fixed) {
    for (const ModelSource& s : sources) {
      if (s.name == fixed.name) {
        return absl::InvalidArgumentError(absl::StrCat("two models are named '", fixed.name,
                                                       "': ", s.path, " and ", fixed.path));
      }
    }
    sources.push_back(fixed);
  }
  if (config_.directory.empty() && sources.empty()) sources.push_back(ModelSource{"default", "", 1});
  return sources;
}

absl::StatusOr<std::vector<ModelRepository::Entry>> LocalModelRepository::List() const {
  absl::StatusOr<std::vector<ModelSource>> sources = Sources();
  if (!sources.ok()) return sources.status();
  std::map<std::string, std::vector<ModelSource>> by_name;
  for (const ModelSource& s : *sources) by_name[s.name].push_back(s);
  std::vector<Entry> entries;
  for (const auto& [name, versions] : by_name) entries.push_back({name, FingerprintOf(versions)});
  return entries;
}

absl::StatusOr<std::vector<std::shared_ptr<LoadedModel>>> LocalModelRepository::Load(
    const std::string& name) {
  absl::StatusOr<std::vector<ModelSource>> sources = Sources();
  if (!sources.ok()) return sources.status();
  const ModelSource* latest = nullptr;
  for (const ModelSource& s : *sources) {
    if (s.name == name && (latest == nullptr || s.version > latest->version)) latest = &s;
  }
  if (latest == nullptr) {
    return absl::NotFoundError(absl::StrCat("the model repository has no model '", name, "'"));
  }
  absl::StatusOr<std::shared_ptr<const Model>> model = LoadSource(*latest);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat("model '", name, "': ", model.status().message()));
  }
  absl::StatusOr<std::unique_ptr<ReplicaSet>> set =
      BuildReplicaSet(*model, config_.devices, config_.options, config_.metrics);
  if (!set.ok()) {
    return absl::Status(set.status().code(),
                        absl::StrCat("model '", name, "': ", set.status().message()));
  }
  if (config_.metrics != nullptr) {
    for (const auto& replica : (*set)->replicas()) config_.metrics->AddReplica(*replica);
  }
  auto loaded = std::make_shared<LoadedModel>();
  loaded->name = name;
  loaded->version = latest->version;
  loaded->source = (*model)->source();
  loaded->max_batch_size = config_.options.max_batch_size;
  loaded->servable = *std::move(set);
  loaded->trainable = std::make_shared<ModelTraining>(ModelTraining::Environment{
      *latest, config_.devices, config_.options, config_.metrics, config_.retirer});
  return std::vector<std::shared_ptr<LoadedModel>>{std::move(loaded)};
}

}  // namespace replicad
