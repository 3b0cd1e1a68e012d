#ifndef REPLICAD_CORE_TRAIN_PARAMETER_SERVER_H_
#define REPLICAD_CORE_TRAIN_PARAMETER_SERVER_H_

#include <memory>
#include <vector>

#include "core/device/kernel.h"
#include "core/tensor/attributes.h"
#include "core/train/gradient_reduction.h"

namespace replicad {

// `ps` reduction: slots may be CPU, GPU or both, the server a CPU or a GPU.
// Each slot's arena reaches the server's memory (a GPU slot copies it after
// its backward pass; a CPU slot's goes by the server's stream when that is a
// GPU's; read in place where the server shares the slot's memory). The
// server sums in slot order and scales (host loops, or Add and Mul kernels
// on a GPU: the same float operations), steps the one optimizer, and every
// slot copies the server's weights. Within one process only.
class ParameterServer : public GradientReduction {
 public:
  // Takes `server`; starts from `source`'s weights. `layout` outlives the
  // reduction. The server's allocation, copy and kernel build errors, and
  // the optimizer's, pass through.
  static absl::StatusOr<std::unique_ptr<GradientReduction>> Create(
      std::vector<TrainingSlot*> slots, const GradientLayout* layout, const TrainingGraph& training,
      const Graph& source, const OptimizerConfig& config, ParameterServerDevice server);
  ~ParameterServer() override;

  const char* kind() const override { return "a parameter server"; }
  std::unique_ptr<SlotReducer> ForSlot(int slot, float scale) override;
  // Counts whole arenas copied to the server, the gradients where read in place.
  void Gather(const std::vector<BatchSlice>& slices, int64_t* reduced_bytes) override;
  HostGradients* host_sums() override;
  TrainingSlot* host_applier() override;
  // A GPU server's sums and scaling, on its stream (nothing on the host).
  absl::Status SumOnDevices(const std::vector<BatchSlice>& slices, float scale) override;
  // The server's update, then (if it succeeded) its weights onto every slot.
  absl::Status ApplyUpdate() override;
  std::vector<Optimizer*> optimizers() override { return {server_->optimizer.get()}; }

 private:
  ParameterServer(std::vector<TrainingSlot*> slots, const GradientLayout* layout,
                  std::unique_ptr<TrainingSlot> server);
  absl::Status SetUp();
  // On a GPU server's stream, once sources_ are written: sum = g0 + g1 + ...,
  // then sum * scale, as the host loop computes them, into sum_.
  absl::Status SumWithKernels(Device& server, float scale);

  const std::vector<TrainingSlot*> slots_;
  const GradientLayout* const layout_;
  std::unique_ptr<TrainingSlot> server_;  // Its weights and the optimizer.
  const bool on_host_;
  HostGradients sums_;  // A server on the host's.
  // Per slot, the server's copy of its gradient arena, written every step;
  // null where the server shares the slot's memory and reads the arena there.
  std::vector<std::shared_ptr<Buffer>> copies_;
  // A GPU server's: the running sum goes back and forth between these
  // arenas, since a kernel never writes its input, and the scaled sum lands
  // in the one not holding the sum.
  std::shared_ptr<Buffer> device_sums_[2];
  std::shared_ptr<Buffer> scale_;  // 1 / batch, one float32 written every step.
  float scale_host_ = 0;           // Its source, alive while the copy runs.
  Attributes no_attributes_;       // Add and Mul have none.
  // [E] + [E] and [E] * [1] over the E floats of an arena; null when E is 0.
  std::unique_ptr<Kernel> add_, mul_;
  std::vector<std::shared_ptr<Buffer>> workspaces_;
  std::vector<const void*> sources_;  // The step's arenas in the server's memory.
  const void* sum_ = nullptr;         // A GPU server's reduced arena.
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_PARAMETER_SERVER_H_
