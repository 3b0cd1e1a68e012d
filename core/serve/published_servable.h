#ifndef REPLICAD_CORE_SERVE_PUBLISHED_SERVABLE_H_
#define REPLICAD_CORE_SERVE_PUBLISHED_SERVABLE_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/model/model.h"
#include "core/serve/retirer.h"
#include "core/serve/servable.h"
#include "core/train/trainable.h"

namespace replicad {

// What Predict runs on for a model that trains: the loaded servable until a
// step changes the weights, then one built from the latest step's weights
// (optimised for inference, on the same slots), so an answer never mixes
// the weights of two steps. The new servable is built when the first
// Predict after a step asks for it, on the training thread after the steps
// queued before that Predict: a training loop that never predicts builds
// nothing, and a Predict sent after a TrainStep was answered sees that
// step's weights. Thread-safe.
class PublishedServable : public std::enable_shared_from_this<PublishedServable> {
 public:
  // Builds a servable like the loaded one around other weights (the same
  // slots and options); called on the training thread, one at a time.
  using Build =
      std::function<absl::StatusOr<std::shared_ptr<Servable>>(std::shared_ptr<const Model>)>;
  // `retirer` (optional) frees replaced servables off their own slot
  // threads; it must outlive this.
  PublishedServable(std::shared_ptr<Servable> loaded, std::shared_ptr<Trainable> trainable,
                    Build build, Retirer* retirer);

  using ServableDone = absl::AnyInvocable<void(absl::StatusOr<std::shared_ptr<Servable>>) &&>;
  // Hands `then` the servable with the latest step's weights: before this
  // returns when it is built, else on the training thread once it is (or
  // the build's error). Never null.
  void Acquire(ServableDone then);

 private:
  // On the training thread: the servable for `weights`, built unless it is.
  absl::StatusOr<std::shared_ptr<Servable>> Publish(absl::StatusOr<Trainable::Weights> weights);

  const std::shared_ptr<Trainable> trainable_;
  const Build build_;
  Retirer* const retirer_;
  absl::Mutex mu_;
  std::shared_ptr<Servable> current_ ABSL_GUARDED_BY(mu_);
  int64_t current_step_ ABSL_GUARDED_BY(mu_) = 0;  // The step current_'s weights are from.
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_PUBLISHED_SERVABLE_H_
