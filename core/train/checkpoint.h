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
#include "core/train/checkpoint_directory.h"
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
  // Opaque here: which run of training wrote it (the server draws one per
  // run and keeps it across restarts from the run's checkpoints), so that a
  // run removes only its own checkpoints. Empty: none recorded.
  std::string run_id;
};

// A checkpoint is two files in one directory:
//  - NAME (e.g. "m.onnx"): the source model with the trained initializers and metadata_props
//    "replicad.step", "replicad.checkpoint_id" (below) and "replicad.run_id" (when
//    Checkpoint::run_id is set), so PyTorch, ONNX Runtime and replicad load it for inference
//    like the original. Nothing else in the model changes.
//  - CheckpointStateName(NAME): also an ONNX ModelProto (no new file format or dependency),
//    whose metadata_props hold "replicad.format" = "replicad.optimizer_state.v1",
//    "replicad.step", "replicad.run_id" (when set), "replicad.optimizer.<field>" for every
//    OptimizerConfig field (kind by OptimizerKindName, floats printed to round-trip exactly,
//    nesterov "true"/"false"), "replicad.training_config" (Checkpoint::training_config, when
//    not empty), and whose graph initializers are the state tensors in order.
// Both files also carry "replicad.checkpoint_id", a random number drawn per write: the state
// belongs to the ONNX file only when step and id both agree.

// 16 random hex digits: a write's "replicad.checkpoint_id" (which tells two writes of the
// same step apart, e.g. a restarted run reaching the step of an earlier one), or a run id.
std::string NewCheckpointId();

// NAME + ".state"; when that would exceed NAME_MAX (255 bytes), NAME's first bytes, '~', a
// stable 16-hex-digit hash of NAME and ".state", so any name the file system takes has one.
std::string CheckpointStateName(const std::string& onnx_name);
// The temporary file a write of the file `name` goes through, in the same directory:
// ".replicad-<16 hex digits of a stable hash of name>.tmp".
std::string CheckpointTemporaryName(const std::string& name);
// `onnx_path` with its last component replaced by CheckpointStateName of it.
std::string CheckpointStatePath(const std::string& onnx_path);

// Writes both files into `directory` (every operation relative to its descriptor, so a
// directory renamed or swapped meanwhile cannot redirect them), each atomically: both are
// written to temporary files in that directory (".replicad-<hash of the target>.tmp",
// short whatever the target's length) and fsynced, then renamed over their targets, the
// state file first, then the directory is fsynced. A crash at any moment, SIGKILL or power
// loss, leaves a whole previous or a whole new ONNX file; at worst the state file is from
// another write, which ReadCheckpoint detects and ignores (the previous write's optimizer
// state is lost then; its weights are not). A crash may leave temporary files behind;
// nothing reads them and the next write of the same target replaces them. A call that fails
// before the renames (a full disk, say) changes nothing and removes what it wrote; a target
// is replaced only by a whole, fsynced file. `source_model` is the serialized ModelProto the
// model was loaded from.
// Errors:
//  - InvalidArgument: `name` is not a plain file name (empty, ".", "..", holding '/') or is
//    longer than NAME_MAX; source_model does not parse; a negative step; an invalid
//    optimizer config; a tensor not in host memory; a parameter whose dtype or shape differs
//    from its initializer (naming it, expected and received).
//  - NotFound: a parameter that is not an initializer of source_model (naming it).
//  - FailedPrecondition: something other than a regular file (a directory, a link) is at
//    `name`; nothing is written then.
//  - The errno's code for a failing system call, naming the call and the path, e.g.
//    "write /x/.replicad-0123456789abcdef.tmp: No space left on device".
// Thread safety: calls for different targets may run concurrently; calls for the same
// target (from any thread or process) must be serialized by the caller, since they share
// the temporary files.
absl::Status WriteCheckpoint(const std::string& source_model, const CheckpointDirectory& directory,
                             const std::string& name, const Checkpoint& checkpoint);
// The same into the directory of `onnx_path`, opened by path (following links: for paths
// the caller vouches for).
absl::Status WriteCheckpoint(const std::string& source_model, const std::string& onnx_path,
                             const Checkpoint& checkpoint);

// The ONNX file WriteCheckpoint would write for `checkpoint` (its parameters,
// step, a new checkpoint id and its run id in the source model), in memory:
// what a client downloads. The optimizer state is not in it. Errors as
// WriteCheckpoint's, naming "<in memory>" for the path.
absl::StatusOr<std::string> CheckpointOnnxBytes(const std::string& source_model,
                                                const Checkpoint& checkpoint);

// The "replicad.run_id" of the ONNX file `name` in `directory` ("" when it has none), read
// from the file's top-level fields without parsing or loading its graph (seeking past it),
// so that looking at many large checkpoints costs little. A link at `name` is not followed
// (ELOOP's code). InvalidArgument when the file is not a well-formed ModelProto; the errno's
// code, naming the path, when it cannot be read.
absl::StatusOr<std::string> ReadCheckpointRunId(const CheckpointDirectory& directory,
                                                const std::string& name);

struct LoadedCheckpoint {
  // parameters: every float32 initializer of the ONNX file, by name. step and run_id: its
  // "replicad.step" (0 when absent) and "replicad.run_id" ("" when absent). optimizer,
  // optimizer_state and training_config: from the state file when state_matches, else a default
  // config, no state and no training config.
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
