#ifndef REPLICAD_SERVER_STARTUP_LOAD_H_
#define REPLICAD_SERVER_STARTUP_LOAD_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "core/serve/model_manager.h"
#include "core/serve/repository_poller.h"
#include "core/serve/serving_core.h"
#include "server/grpc/health_publisher.h"
#include "server/server_options.h"

namespace replicad {

// The models to load before serving, as --model-control-mode says (side by
// side, on the manager's load threads).
absl::Status LoadStartupModels(const ServerOptions& options, ModelManager& models);

// The ready models, one line each, with each model's own slots (a
// config.pbtxt's instance groups may differ from --devices).
void PrintReadyModels(const ModelManager& models);

// What a daemon does with its models once its doors are open, on a thread
// of its own: loads the startup models (when `load` is set; a training
// job's ranks load theirs before they meet), tells the core and the health
// service that loading is over, prints "replicad: <who>ready: ...", and then, under
// --model-control-mode poll, follows the repository. A failed load stops the
// daemon under --exit-on-error (SIGTERM to itself, which ends Serve's
// sigwait; failed() says why), or leaves the models that loaded serving, as
// Triton's --exit-on-error=false does. Everything passed must outlive it.
class StartupLoad {
 public:
  StartupLoad(const ServerOptions& options, ModelManager& models, ServingCore& core,
              HealthPublisher& health, bool load, std::string who);
  ~StartupLoad();
  StartupLoad(const StartupLoad&) = delete;
  StartupLoad& operator=(const StartupLoad&) = delete;

  // Waits for the load to end (a load is not interrupted) and stops
  // following the repository.
  void Stop();
  // A startup model failed to load under --exit-on-error.
  bool failed() const { return failed_.load(); }

 private:
  void Run(const ServerOptions& options, ModelManager& models, ServingCore& core,
           HealthPublisher& health, bool load, const std::string& who);

  std::atomic<bool> failed_{false};
  std::unique_ptr<RepositoryPoller> poller_;  // Set on the thread; reset after it is joined.
  std::thread thread_;                        // Last: it starts once the members above exist.
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_STARTUP_LOAD_H_
