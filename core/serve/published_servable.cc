#include "core/serve/published_servable.h"

#include <utility>

#include "core/base/status_macros.h"
#include "core/model/graph_optimizer.h"

namespace replicad {

PublishedServable::PublishedServable(std::shared_ptr<Servable> loaded,
                                     std::shared_ptr<Trainable> trainable, Build build,
                                     Retirer* retirer)
    : trainable_(std::move(trainable)),
      build_(std::move(build)),
      retirer_(retirer),
      current_(std::move(loaded)) {}

void PublishedServable::Acquire(ServableDone then) {
  std::shared_ptr<Servable> current;
  {
    absl::MutexLock lock(&mu_);
    if (current_step_ == trainable_->trained_step()) current = current_;
  }
  if (current != nullptr) {
    std::move(then)(std::move(current));
    return;
  }
  // Predicts that ask while it is built queue behind it and find it built.
  trainable_->TrainedWeights([self = shared_from_this(), then = std::move(then)](
                                 absl::StatusOr<Trainable::Weights> weights) mutable {
    std::move(then)(self->Publish(std::move(weights)));
  });
}

absl::StatusOr<std::shared_ptr<Servable>> PublishedServable::Publish(
    absl::StatusOr<Trainable::Weights> weights) {
  if (!weights.ok()) return weights.status();
  {
    absl::MutexLock lock(&mu_);
    if (weights->model == nullptr || weights->step == current_step_) return current_;
  }
  Graph graph = weights->model->graph();
  REPLICAD_RETURN_IF_ERROR(OptimizeForInference(&graph));
  auto model = std::make_shared<const Model>(weights->model->name(), weights->model->source(),
                                             std::move(graph));
  REPLICAD_ASSIGN_OR_RETURN(std::shared_ptr<Servable> built, build_(std::move(model)));
  absl::MutexLock lock(&mu_);
  // A replaced servable lives on while Predicts that started on it finish;
  // its last reference must not be dropped on one of its own slot threads.
  if (retirer_ != nullptr) retirer_->Retire(std::move(current_));
  current_ = std::move(built);
  current_step_ = weights->step;
  return current_;
}

}  // namespace replicad
