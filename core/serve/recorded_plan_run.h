#ifndef REPLICAD_CORE_SERVE_RECORDED_PLAN_RUN_H_
#define REPLICAD_CORE_SERVE_RECORDED_PLAN_RUN_H_

#include <memory>

#include "core/device/device.h"

namespace replicad {

// A plan's run on one set of device buffers recorded as one unit (CUDA
// graphs, Device::Record): recorded on the set's second run (the first has
// chosen the kernels' algorithms), replayed on every run after; never again
// once recording failed. Touched on the slot's stream thread only.
struct RecordedPlanRun {
  std::unique_ptr<Device::RecordedWork> work;
  int runs = 0;
  bool unrecordable = false;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_RECORDED_PLAN_RUN_H_
