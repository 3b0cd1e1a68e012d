#include "server/ranks/rank_worker.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/base/log.h"
#include "core/base/status_macros.h"
#include "core/train/rank_command.h"

namespace replicad {
namespace {

absl::StatusOr<std::shared_ptr<TrainingSession>> TrainingFor(ModelManager& models,
                                                             const std::string& name) {
  absl::StatusOr<std::shared_ptr<LoadedModel>> model = models.Find(name);
  if (!model.ok()) return model.status();
  if ((*model)->training == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("model '", name, "' does not train here"));
  }
  return (*model)->training;
}

// Runs one command on this rank and waits for it.
absl::Status Run(RankJob& job, ModelManager& models, RankCommand command) {
  absl::StatusOr<std::shared_ptr<TrainingSession>> training = TrainingFor(models, command.model);
  absl::Status status = training.status();
  absl::Notification done;
  if (training.ok() && command.kind == RankCommand::Kind::kConfigure) {
    (*training)->ConfigureFromRank0(command.config,
                                    [&](absl::StatusOr<TrainingConfig> applied, int64_t) {
                                      status = applied.status();
                                      done.Notify();
                                    });
    done.WaitForNotification();
  } else if (training.ok() && command.kind == RankCommand::Kind::kStep) {
    (*training)->StepFromRank0({command.first_row, command.batch, command.configuration},
                               std::move(command.inputs), std::move(command.targets),
                               [&](absl::StatusOr<DataParallelTrainer::StepResult> result) {
                                 status = result.status();
                                 done.Notify();
                               });
    done.WaitForNotification();
  }
  if (command.kind == RankCommand::Kind::kStep && !training.ok()) {
    // No such model here: rank 0 and the others learn it at the step's
    // first exchange. (A step that reaches the model's training takes
    // part there, failed or not.)
    (void)GatherReadiness(*job.training_ranks(), status, "");
  }
  return status;
}

}  // namespace

absl::Status RunRankWorker(RankJob& job, ModelManager& models, const std::atomic<bool>& stop) {
  for (;;) {
    REPLICAD_ASSIGN_OR_RETURN(std::string bytes, job.ReceiveCommand(stop));
    absl::StatusOr<RankCommand> command = DecodeRankCommand(bytes);
    if (!command.ok()) return command.status();  // Not from our rank 0: nothing is in step.
    if (command->kind == RankCommand::Kind::kStop) return absl::OkStatus();
    const std::string model = command->model;
    absl::Status status = Run(job, models, *std::move(command));
    if (!status.ok()) {
      LogError(absl::StrCat("rank ", job.training_ranks()->rank(), ": model '", model,
                            "': ", status.message()));
    }
  }
}

}  // namespace replicad
