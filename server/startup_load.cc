#include "server/startup_load.h"

#include <signal.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/base/log.h"

namespace replicad {

absl::Status LoadStartupModels(const ServerOptions& options, ModelManager& models) {
  if (options.model_control_mode != "explicit") return models.LoadAll();
  for (const std::string& name : options.load_models) {
    if (name == "*") return models.LoadAll();
  }
  return models.LoadEach(options.load_models);
}

void PrintReadyModels(const ModelManager& models) {
  for (const std::shared_ptr<LoadedModel>& model : models.Ready()) {
    const std::string slots = absl::StrJoin(
        model->servable->Slots(), ", ",
        [](std::string* out, const SlotStatus& s) { absl::StrAppend(out, s.slot, "=", s.device); });
    LogInfo(absl::StrCat("model '", model->name, "' version ", model->version, " from ",
                         model->source, " on ", slots));
  }
}

StartupLoad::StartupLoad(const ServerOptions& options, ModelManager& models, ServingCore& core,
                         HealthPublisher& health, bool load, std::string who)
    : thread_([this, &options, &models, &core, &health, load, who = std::move(who)] {
        Run(options, models, core, health, load, who);
      }) {}

StartupLoad::~StartupLoad() { Stop(); }

void StartupLoad::Run(const ServerOptions& options, ModelManager& models, ServingCore& core,
                      HealthPublisher& health, bool load, const std::string& who) {
  const absl::Time start = absl::Now();
  if (load) {
    const absl::Status loaded = LoadStartupModels(options, models);
    PrintReadyModels(models);
    if (!loaded.ok()) {
      LogError(absl::StrCat(absl::StatusCodeToString(loaded.code()), ": ", loaded.message()));
      if (options.exit_on_error) {  // Never ready: it stops.
        failed_ = true;
        ::kill(::getpid(), SIGTERM);
        return;
      }
    }
    core.StartupModelsLoaded();
    health.Publish();
  }
  LogInfo(
      absl::StrCat(who, "ready: ", models.Ready().size(), " model version(s) loaded in ",
                   absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(1)))));
  if (options.model_control_mode != "poll") return;
  poller_ = std::make_unique<RepositoryPoller>(
      models, absl::Seconds(options.repository_poll_seconds),
      [](const absl::Status& s) { LogWarning(absl::StrCat("repository poll: ", s.message())); });
}

void StartupLoad::Stop() {
  if (thread_.joinable()) thread_.join();
  poller_.reset();
}

}  // namespace replicad
