#ifndef REPLICAD_CORE_TRAIN_OPTIMIZER_H_
#define REPLICAD_CORE_TRAIN_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/device/kernel.h"
#include "core/ops/optimizer_step.h"
#include "core/tensor/buffer.h"
#include "core/tensor/tensor.h"

namespace replicad {

// OptimizerConfig (the update rule, PyTorch's torch.optim semantics, and its
// hyperparameters), OptimizerKindName and the per-element rules live in
// core/ops/optimizer_step.h, shared with the replicad.OptimizerStep op.

// InvalidArgument naming the field, the accepted range and the received value, e.g.
// "optimizer.learning_rate must be finite and > 0; received -1". Every field is
// range-checked whatever the kind (the defaults are all valid); a kind ignores the rest:
// learning_rate > 0 and <= kMaxLearningRate (1e4); weight_decay >= 0 and <= kMaxWeightDecay
// (1e4); momentum finite >= 0; nesterov needs momentum > 0;
// beta1, beta2, alpha in [0, 1); epsilon finite > 0; kind one of the enumerators.
absl::Status ValidateOptimizerConfig(const OptimizerConfig& config);

// The update rule plus its per-parameter state (momentum buffers, Adam moments, RMSprop
// square averages). One instance per replica in allreduce mode: every replica applies the
// same update to its own copy of the weights, and the arithmetic is deterministic and the
// same on CPU and GPU, so replicas stay bitwise identical given identical gradients.
//
// Host mode: parameters, gradients and state in host memory; Step computes on the calling
// thread. Device mode (a device whose memory is not host memory): the state lives in that
// device's memory, and Step enqueues one replicad.OptimizerStep kernel over all parameters
// on its stream (a launch per 32 of them on CUDA, as torch.optim's foreach does). The
// device must outlive the optimizer, which is destroyed only when no Step is in flight on
// that stream.
// Not thread-safe: one thread at a time per instance. In device mode Create, State and
// Restore wait for the device's stream: never call them on its thread.
class Optimizer {
 public:
  // Host mode. `parameter_sizes[i]` is the element count of parameter i (>= 0). Fails with
  // ValidateOptimizerConfig's errors, or InvalidArgument for a negative size.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(const OptimizerConfig& config,
                                                           std::vector<int64_t> parameter_sizes);
  // Device mode when `device` (not owned) has device memory; host mode for nullptr or a
  // host-memory device. Allocates the state on the device now (its ResourceExhausted passes
  // through) and builds the kernels through Device::MakeKernel (Unimplemented for a backend
  // without replicad.OptimizerStep passes through).
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(const OptimizerConfig& config,
                                                           std::vector<int64_t> parameter_sizes,
                                                           Device* device);
  ~Optimizer();

  // One step over every parameter: parameters[i] (parameter_sizes[i] float32s) is updated
  // in place from gradients[i] (the already-reduced mean gradient); then step() grows by 1.
  // The caller keeps ownership; a gradient must not alias its parameter; pointers of empty
  // parameters may be null. Aborts on a count mismatch or a null pointer (programmer errors).
  // Host mode: host pointers; always OK. Device mode: device pointers, called on the
  // device's stream thread; one multi-tensor kernel over every parameter is enqueued (complete in
  // stream order) with a RunContext whose step is step() + 1, the update number they read. A
  // kernel's launch error is returned; then step() is unchanged and the update is partial.
  absl::Status Step(const std::vector<float*>& parameters,
                    const std::vector<const float*>& gradients);

  // Where Step with these arguments would make a parameter element not finite, without
  // changing anything: the same rules run on copies (a read of every parameter, gradient and
  // state element). Finite gradients can still overflow an update (a learning rate of
  // 1e38), and a trainer refuses such a step before applying it, as it refuses a
  // non-finite gradient. nullopt when every element stays finite, and in device mode (the
  // state is on the device; not checked there).
  struct NonFiniteUpdate {
    size_t parameter = 0;  // Index into `parameters`.
    int64_t element = 0;
    float before = 0, gradient = 0, after = 0;
  };
  std::optional<NonFiniteUpdate> FirstNonFiniteUpdate(
      const std::vector<float*>& parameters, const std::vector<const float*>& gradients) const;
  // The same answer in either mode. Device mode: one replicad.OptimizerDryRun
  // over every parameter on the device (built by the first call), one wait for
  // its flags, and only a parameter whose flag says so copied to the host to find
  // its first element. Not on the device's stream thread; the device's
  // errors pass through.
  absl::StatusOr<std::optional<NonFiniteUpdate>> FindNonFiniteUpdate(
      const std::vector<float*>& parameters, const std::vector<const float*>& gradients);

  // Steps taken (or restored). Adam's bias corrections use it.
  int64_t step() const { return step_; }
  const OptimizerConfig& config() const { return config_; }
  const std::vector<int64_t>& parameter_sizes() const { return sizes_; }
  // The device holding the state; nullptr in host mode.
  Device* device() const { return device_; }

  // A host copy of the state as named float32 tensors of shape [parameter_sizes[i]], for
  // checkpoints: "param<i>.<name>" for each of OptimizerStateNames (momentum_buffer,
  // exp_avg, exp_avg_sq, square_avg: PyTorch's keys), ordered by parameter then by that
  // list. Nothing before the first step (PyTorch allocates its state lazily too). Host
  // mode: always OK. Device mode: copied after the Steps already enqueued; the device's
  // error (Synchronize's) if the copy fails.
  absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> State() const;

  // Replaces step() and the state with a checkpoint's: `state` must hold exactly the names
  // State() gives at `step` (none when step is 0), in any order, each a host float32 tensor
  // with parameter_sizes[i] elements. InvalidArgument naming the entry (missing, unexpected,
  // duplicate, wrong dtype or size) or the step (negative); the optimizer is unchanged then.
  // Device mode: the state is copied to the device before this returns; the device's error
  // if that fails (step() unchanged, the state undefined until a Restore succeeds).
  absl::Status Restore(int64_t step, const std::vector<std::pair<std::string, Tensor>>& state);

 private:
  // One parameter's state, one entry per OptimizerStateNames entry.
  struct Parameter {
    std::vector<std::vector<float>> host;         // Host mode; empty until the first step.
    std::vector<std::shared_ptr<Buffer>> device;  // Device mode; allocated by Create.
  };
  // Device mode: one replicad.OptimizerStep or replicad.OptimizerDryRun node
  // over every non-empty parameter (the multi-tensor form), with its scratch
  // and its pointer lists (reused by every call).
  struct DeviceKernel {
    std::unique_ptr<Kernel> kernel;
    std::shared_ptr<Buffer> workspace;
    std::vector<const void*> inputs;
    std::vector<void*> outputs;
  };

  Optimizer(const OptimizerConfig& config, std::vector<int64_t> sizes, Device* device);

  absl::Status BuildDeviceState();
  // Builds `op_type` (replicad.OptimizerStep or replicad.OptimizerDryRun, whose
  // inputs per parameter are `inputs_per_parameter`) over updated_ into `built`;
  // leaves it empty when no parameter is updated.
  absl::Status BuildDeviceKernel(std::string_view op_type, size_t inputs_per_parameter,
                                 std::string_view node_name, DeviceKernel& built);
  absl::Status BuildDryRuns();
  // Parameter i's first element whose update would not be finite, from host
  // copies of it, its gradient and its state (device mode).
  absl::StatusOr<std::optional<NonFiniteUpdate>> FindOnHostCopies(size_t i, const float* p,
                                                                  const float* g);
  void HostStep(size_t i, float* p, const float* g, const OptimizerStepScalars& scalars);
  absl::Status DeviceStep(const std::vector<float*>& parameters,
                          const std::vector<const float*>& gradients);

  OptimizerConfig config_;
  std::vector<int64_t> sizes_;
  Device* device_;                  // Null in host mode.
  std::vector<std::string> names_;  // OptimizerStateNames(config_).
  OptimizerStateIndex index_;       // Where each role sits in names_.
  std::vector<Parameter> params_;
  // Device mode: the parameters the kernels update (the non-empty ones), in order.
  std::vector<size_t> updated_;
  DeviceKernel step_kernel_;
  // Device mode, made by BuildDryRuns: its node, one flag per updated
  // parameter on the device and their host copy.
  DeviceKernel dry_run_;
  std::shared_ptr<Buffer> dry_run_flags_;
  std::vector<float> dry_run_flags_host_;
  int64_t step_ = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_OPTIMIZER_H_
