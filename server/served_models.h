#ifndef REPLICAD_SERVER_SERVED_MODELS_H_
#define REPLICAD_SERVER_SERVED_MODELS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backends/backends.h"
#include "core/device/device_map.h"
#include "core/serve/replica_set.h"
#include "server/model_sources.h"
#include "server/model_training.h"
#include "server/replica_set_factory.h"

namespace replicad {


struct ServedModel {
  std::shared_ptr<const Model> model;
  std::unique_ptr<ReplicaSet> replicas;
  int64_t max_batch_size = 0;
  std::unique_ptr<ModelTraining> training;  // Internally synchronised.
};

// The models the daemon serves, each with its own replica set (its own
// slots and streams on the configured devices). Built once at startup;
// read-only afterwards, so lookups are thread-safe.
class ServedModels {
 public:
  // Loads every source (an empty path is the embedded default model) and
  // builds its replicas. Fails on the first model that cannot be loaded or
  // placed, naming it; InvalidArgument when two sources share a name.
  static absl::StatusOr<std::unique_ptr<ServedModels>> Load(
      const std::vector<ModelSource>& sources, const std::vector<DeviceInfo>& devices,
      const ServingOptions& options, SliceObserver* observer);

  // nullptr when no model has that name.
  const ServedModel* Find(const std::string& name) const;
  const std::map<std::string, ServedModel>& models() const { return models_; }
  // "a, b": for NOT_FOUND messages.
  std::string NameList() const;

 private:
  std::map<std::string, ServedModel> models_;
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_SERVED_MODELS_H_
