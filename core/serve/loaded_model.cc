#include "core/serve/loaded_model.h"

namespace replicad {

bool LoadedModel::HasHealthySlot() const {
  for (const SlotStatus& slot : servable->Slots()) {
    if (slot.health.ok()) return true;
  }
  return false;
}

}  // namespace replicad
