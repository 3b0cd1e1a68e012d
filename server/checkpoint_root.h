#ifndef REPLICAD_SERVER_CHECKPOINT_ROOT_H_
#define REPLICAD_SERVER_CHECKPOINT_ROOT_H_

#include <string>

#include "absl/status/statusor.h"

namespace replicad {

// The one directory clients may have checkpoints written into
// (--checkpoint-root). A path a client names (SaveCheckpoint's `path`,
// TrainingConfig's `checkpoint_dir`) is taken relative to it, or, when
// absolute, must already lie under it; it is normalised lexically and must
// not leave the root, hold NUL or control characters, or pass through a
// symbolic link below the root (an existing component that is one). The
// root itself is resolved once (it may be a link the operator made).
// Immutable and thread-safe.
class CheckpointRoot {
 public:
  // Checkpoints off: every Resolve is FailedPrecondition.
  CheckpointRoot() = default;
  // `directory` must exist and be a directory; InvalidArgument otherwise.
  static absl::StatusOr<CheckpointRoot> Open(const std::string& directory);

  bool enabled() const { return !root_.empty(); }
  const std::string& root() const { return root_; }

  // The absolute path `path` names under the root. `field` names the
  // request's field in errors. FailedPrecondition when checkpoints are off
  // (saying how to turn them on); InvalidArgument for an empty path;
  // PermissionDenied, naming the path, for the rest above.
  absl::StatusOr<std::string> Resolve(const std::string& path, const std::string& field) const;

 private:
  explicit CheckpointRoot(std::string root) : root_(std::move(root)) {}
  std::string root_;  // Absolute, resolved, without a trailing '/'; empty: off.
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_CHECKPOINT_ROOT_H_
