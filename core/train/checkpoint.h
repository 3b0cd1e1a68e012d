#ifndef REPLICAD_CORE_TRAIN_CHECKPOINT_H_
#define REPLICAD_CORE_TRAIN_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor/tensor.h"
#include "core/train/optimizer.h"

namespace replicad {

// A trained model at one step. Tensors are in host memory.
struct Checkpoint {
  int64_t step = 0;
  std::map<std::string, Tensor> parameters;  // Trained initializers by ONNX initializer name.
  OptimizerConfig optimizer;                 // Kind and hyperparameters in use.
  std::vector<std::pair<std::string, Tensor>> optimizer_state;  // Optimizer::State().
  // Opaque here: how the caller trains (the server keeps its TrainingConfig
  // in text format), so that training resumes as configured. Empty: none.
  std::string training_config;
};

// A checkpoint is two files:
//  - `onnx_path`: the source model with the trained initializers and metadata_props
//    "replicad.step" and "replicad.checkpoint_id" (below), so PyTorch, ONNX Runtime and
//    replicad load it for inference like the original. Nothing else in the model changes.
//  - CheckpointStatePath(onnx_path) = onnx_path + ".state": also an ONNX ModelProto (no new
//    file format or dependency), whose metadata_props hold "replicad.format" =
//    "replicad.optimizer_state.v1", "replicad.step", "replicad.optimizer.<field>" for every
//    OptimizerConfig field (kind by OptimizerKindName, floats printed to round-trip exactly,
//    nesterov "true"/"false"), "replicad.training_config" (Checkpoint::training_config, when
//    not empty), and whose graph initializers are the state tensors in order.
// Both files also carry "replicad.checkpoint_id", a random number drawn per write: the state
// belongs to the ONNX file only when step and id both agree.
std::string CheckpointStatePath(const std::string& onnx_path);

// Writes both files, each atomically: the state file first, then the ONNX file, each to a
// temporary file in the same directory (the target's path + ".tmp": "m.onnx.state.tmp",
// "m.onnx.tmp"), fsync, rename over the target, fsync the directory. A crash at any moment,
// SIGKILL or power loss, leaves a whole previous or a whole new ONNX file; at worst the state
// file is from another write, which ReadCheckpoint detects and ignores (the previous
// write's optimizer state is lost then; its weights are not). A crash may leave the
// temporary files behind; nothing reads them and the next write replaces them. A failing
// call removes its temporary file; a target is replaced only by a whole, fsynced file.
// `source_model` is the serialized ModelProto the model was loaded from.
// Errors:
//  - InvalidArgument: source_model does not parse; a negative step; an invalid optimizer
//    config; a tensor not in host memory; a parameter whose dtype or shape differs from its
//    initializer (naming it, expected and received).
//  - NotFound: a parameter that is not an initializer of source_model (naming it).
//  - The errno's code for a failing system call, naming the call and the path, e.g.
//    "write /x/m.onnx.tmp: No space left on device".
// Thread safety: calls for different onnx_paths may run concurrently; calls for the same
// onnx_path (from any thread or process) must be serialized by the caller, since they share
// the temporary files.
absl::Status WriteCheckpoint(const std::string& source_model, const std::string& onnx_path,
                             const Checkpoint& checkpoint);

struct LoadedCheckpoint {
  // parameters: every float32 initializer of the ONNX file, by name. step: its
  // "replicad.step" (0 when absent). optimizer, optimizer_state and training_config: from the
  // state file when state_matches, else a default config, no state and no training config.
  Checkpoint checkpoint;
  bool has_step = false;       // The ONNX file carries "replicad.step" (it is a checkpoint).
  bool state_matches = false;  // A state file exists and was written with this ONNX file.
};

// Reads what WriteCheckpoint wrote; never looks at temporary files. A state file of another
// write (another step or id; possible only when a crash fell between the two renames, or
// when the ONNX file was replaced by other means) is ignored: state_matches is false then.
// Errors, each naming the path:
//  - NotFound: the ONNX file does not exist.
//  - InvalidArgument: either file does not parse as ONNX; the state file is not a replicad
//    state file or misses a field; a malformed "replicad.step" or config field.
//  - TensorFromOnnx's errors for a float32 initializer or state tensor it rejects.
//  - The errno's code for another failing system call.
absl::StatusOr<LoadedCheckpoint> ReadCheckpoint(const std::string& onnx_path);

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_CHECKPOINT_H_
