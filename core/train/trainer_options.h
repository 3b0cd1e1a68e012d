#ifndef REPLICAD_CORE_TRAIN_TRAINER_OPTIONS_H_
#define REPLICAD_CORE_TRAIN_TRAINER_OPTIONS_H_

#include <cstdint>
#include <memory>

#include "core/device/device.h"
#include "core/device/device_map.h"
#include "core/model/compute_precision.h"
#include "core/train/loss_scaler.h"
#include "core/train/optimizer.h"
#include "core/train/training_graph.h"

namespace replicad {

// What a DataParallelTrainer trains with (data_parallel_trainer.h): its
// loss, optimizer and step semantics, and its slots.
struct TrainerOptions {
  LossSpec loss;
  OptimizerConfig optimizer;
  // BatchNormalization in training form normalises by the statistics of the
  // whole step (summed across the slots), so N slots compute what one would;
  // without it each slot uses its own rows' (the running statistics then
  // follow the first slot's).
  bool sync_batch_norm = true;
  uint64_t seed = 0;  // Keys the dropout masks, with the step and the global row.
  // A step whose loss, or (where the host sums them: CPU slots, a server on
  // the CPU) summed gradient, is not finite is never applied. It fails
  // InvalidArgument (kRefuse), or answers OK as skipped (kSkip), as
  // mixed-precision loss scaling skips an overflowing step. Inputs and
  // targets holding NaN or infinities are refused either way. GPU
  // reductions check the loss only.
  enum class NonFiniteSteps { kRefuse, kSkip };
  NonFiniteSteps non_finite_steps = NonFiniteSteps::kRefuse;
  // bf16: the forward pass's Conv, Gemm and MatMul nodes that read a
  // parameter compute with their input and weights rounded to bfloat16 (on
  // every step: the parameters stay float32, as do the sums, the backward
  // pass, the gradients and the optimizer), as torch.autocast(dtype=bfloat16)
  // computes a forward pass; on CPU slots without bfloat16 dot products they
  // compute float32 (product_precision.h). fp16: those products and the
  // products of their gradients read and write float16 values
  // (float16_products.h), and the loss is scaled (`loss_scaling`): a step
  // that overflows is skipped (answered as kSkip answers) whatever
  // non_finite_steps says, as GradScaler skips it.
  ComputePrecision precision = ComputePrecision::kFloat32;
  LossScaling loss_scaling;  // fp16 only.
};

// One training slot: where it is and the device (stream) it runs on.
struct TrainerSlot {
  SlotAssignment slot;
  std::unique_ptr<Device> device;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_TRAINER_OPTIONS_H_
