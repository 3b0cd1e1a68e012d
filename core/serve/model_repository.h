#ifndef REPLICAD_CORE_SERVE_MODEL_REPOSITORY_H_
#define REPLICAD_CORE_SERVE_MODEL_REPOSITORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/serve/loaded_model.h"

namespace replicad {

// Where models come from (a directory in Triton's or replicad's layout,
// --model flags, the embedded default) and how one is made servable. The
// model manager asks; the daemon's implementation lives with the server.
// Implementations must be thread-safe.
class ModelRepository {
 public:
  virtual ~ModelRepository() = default;

  struct Entry {
    std::string name;
    // Changes whenever the model's files change (for --model-control-mode poll).
    std::string fingerprint;
  };
  // The models the repository holds now, sorted by name.
  virtual absl::StatusOr<std::vector<Entry>> List() const = 0;

  // Every version of `name` that its version policy serves, each loaded and
  // ready (replicas built), in ascending version order. NotFound when the
  // repository has no model `name`; otherwise the model's error, naming it.
  // Slow (reads files, copies weights to devices): never call it on a
  // protocol thread.
  virtual absl::StatusOr<std::vector<std::shared_ptr<LoadedModel>>> Load(
      const std::string& name) = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_MODEL_REPOSITORY_H_
