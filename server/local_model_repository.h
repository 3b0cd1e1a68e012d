#ifndef REPLICAD_SERVER_LOCAL_MODEL_REPOSITORY_H_
#define REPLICAD_SERVER_LOCAL_MODEL_REPOSITORY_H_

#include <memory>
#include <string>
#include <vector>

#include "core/backends/backends.h"
#include "core/serve/model_repository.h"
#include "core/serve/retirer.h"
#include "core/train/checkpoint_root.h"
#include "core/train/rank_job.h"
#include "server/model_sources.h"
#include "server/replica_set_factory.h"
#include "server/server_metrics.h"

namespace replicad {

// The daemon's models: a --model-repository directory (read anew on every
// List and Load, so models can be added, changed and removed while serving),
// the --model flags, the models uploaded under --model-upload-root, and the
// embedded default when none of them names a model.
// Each version loads as the template, its replicas on the configured slots,
// and its training side. A model with a config.pbtxt (see
// model_config_file.h) is served as it says: its version policy, instance
// groups (its own slots) and max_batch_size, its tensors checked against the
// ONNX file; one without is served with the daemon's options, latest version
// only (Triton's default policy). Thread-safe.
class LocalModelRepository final : public ModelRepository {
 public:
  struct Config {
    std::string directory;  // Empty: none.
    // --model-upload-root (model_upload.h), listed as a repository beside
    // `directory`; empty: none. A name in both is an error.
    std::string upload_directory;
    std::vector<ModelSource> fixed;  // --model flags.
    std::vector<DeviceInfo> devices;
    ServingOptions options;
    ServerMetrics* metrics = nullptr;  // Must outlive the repository.
    Retirer* retirer = nullptr;        // Must outlive the repository.
    CheckpointRoot checkpoints;        // Where training may write checkpoints.
    int keep_checkpoints = 5;          // Numbered checkpoints kept per model.
    std::shared_ptr<RankJob> job;      // Training across ranks; null: none.
    bool rank_shards = false;          // Each rank takes its own shards (--rank-shards).
  };
  explicit LocalModelRepository(Config config);

  // InvalidArgument when two sources give a model the same name.
  absl::StatusOr<std::vector<Entry>> List() const override;
  // Also InvalidArgument naming the config.pbtxt and what it says wrong (a
  // refused field, a tensor that disagrees with the model, a missing GPU).
  absl::StatusOr<std::vector<std::shared_ptr<LoadedModel>>> Load(const std::string& name) override;

 private:
  // Every source of every model, sorted by name then version.
  absl::StatusOr<std::vector<ModelSource>> Sources() const;

  const Config config_;
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_LOCAL_MODEL_REPOSITORY_H_
