#include "core/serve/loaded_model.h"

namespace replicad {

bool LoadedModel::HasHealthySlot() const {
  for (const SlotStatus& slot : servable->Slots()) {
    if (slot.health.ok()) return true;
  }
  return false;
}

absl::Status StartScheduling(LoadedModel& model, SchedulerObserver* observer, bool warm,
                             const Clock* clock) {
  if (absl::Status valid = model.scheduling.Validate(); !valid.ok()) return valid;
  model.scheduler = std::make_shared<Scheduler>(Scheduler::Environment{
      model.name, model.servable, model.trainable, model.scheduling, observer, clock});
  return warm ? model.scheduler->Warm() : absl::OkStatus();
}

}  // namespace replicad
