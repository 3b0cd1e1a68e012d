#ifndef REPLICAD_CORE_SERVE_MODEL_MANAGER_H_
#define REPLICAD_CORE_SERVE_MODEL_MANAGER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/serve/loaded_model.h"
#include "core/serve/model_repository.h"
#include "core/serve/retirer.h"

namespace replicad {

// A model's state, in Triton's words for the repository index.
enum class ModelState { kLoading, kReady, kUnavailable };
const char* ModelStateName(ModelState state);  // "LOADING", "READY", "UNAVAILABLE".

// One row of the repository index: a loaded version, or a model that is
// loading or unavailable (version 0), with why.
struct ModelIndexEntry {
  std::string name;
  int64_t version = 0;
  ModelState state = ModelState::kUnavailable;
  std::string reason;
};

// The served models and their versions. Loads build a model's new versions
// to the side and swap them in at once, so nothing is answered by a
// half-loaded model; requests hold a LoadedModel and finish on it whatever
// is loaded or unloaded meanwhile (replaced versions go to the Retirer).
// Thread-safe. Load, Unload and Poll block for as long as loading takes:
// call them off protocol threads; lookups never wait for a load. One of
// them runs at a time; the models one call loads load side by side, on up
// to `load_threads` threads (the repository's Load must allow that).
class ModelManager {
 public:
  // `retirer` must outlive the manager.
  ModelManager(std::unique_ptr<ModelRepository> repository, Retirer& retirer, int load_threads = 1);
  ~ModelManager();

  // (Re)loads `name` from the repository. On failure the versions served
  // before stay served (a failed reload changes nothing but the index's
  // reason); NotFound when the repository has no such model.
  absl::Status Load(const std::string& name);
  // Load for each of `names`, side by side; the first error, after trying all.
  absl::Status LoadEach(const std::vector<std::string>& names);
  // Stops serving every version of `name`. NotFound when none is served.
  absl::Status Unload(const std::string& name);
  // Loads every model the repository lists; the first error, after trying all.
  absl::Status LoadAll();
  // Loads what is new or changed since the last look and unloads what is gone.
  absl::Status Poll();

  // The ready version `version` of `name`, or its latest with version 0.
  // Unavailable for a model that is loading and has no ready version yet;
  // NotFound naming the model (and the served models) or the version (and
  // the model's ready versions).
  absl::StatusOr<std::shared_ptr<LoadedModel>> Find(const std::string& name,
                                                    int64_t version = 0) const;
  // Every ready version, by name then version.
  std::vector<std::shared_ptr<LoadedModel>> Ready() const;
  // Every model the repository holds or the manager knows, with its state.
  std::vector<ModelIndexEntry> Index() const;

 private:
  struct ModelEntry {
    std::map<int64_t, std::shared_ptr<LoadedModel>> versions;
    bool loading = false;
    std::string reason;       // Why the last load failed, or why it is unloaded.
    std::string fingerprint;  // The repository's, when it was loaded.
  };
  // Marks every entry loading (Find and Index say so from now on), then
  // loads them on up to load_threads_ threads; the first error in order.
  absl::Status LoadEntries(const std::vector<ModelRepository::Entry>& entries)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(load_mu_);
  // One model's load, with load_mu_ held by the LoadEntries it runs for.
  absl::Status LoadOne(const std::string& name, const std::string& fingerprint);
  void RetireAll(std::map<int64_t, std::shared_ptr<LoadedModel>>& versions);
  // "a, b": the served models' names, for messages.
  std::string ServedNamesLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  std::unique_ptr<ModelRepository> repository_;
  Retirer& retirer_;
  const int load_threads_;
  absl::Mutex load_mu_;  // One load or unload at a time; taken before mu_.
  mutable absl::Mutex mu_;
  std::map<std::string, ModelEntry> models_ ABSL_GUARDED_BY(mu_);
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_MODEL_MANAGER_H_
