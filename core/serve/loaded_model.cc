#include "core/serve/loaded_model.h"

#include "core/base/status_macros.h"

namespace replicad {

bool LoadedModel::HasHealthySlot() const {
  for (const SlotStatus& slot : servable->Slots()) {
    if (slot.health.ok()) return true;
  }
  return false;
}

absl::Status StartScheduling(LoadedModel& model, SchedulerObserver* observer, bool warm,
                             const Clock* clock) {
  REPLICAD_RETURN_IF_ERROR(model.scheduling.Validate());
  model.scheduler = std::make_shared<Scheduler>(
      Scheduler::Environment{model.name, model.servable, model.training, model.scheduling, observer,
                             clock, model.published});
  return warm ? model.scheduler->Warm() : absl::OkStatus();
}

}  // namespace replicad
