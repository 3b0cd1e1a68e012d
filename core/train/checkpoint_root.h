#ifndef REPLICAD_CORE_TRAIN_CHECKPOINT_ROOT_H_
#define REPLICAD_CORE_TRAIN_CHECKPOINT_ROOT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/train/checkpoint_directory.h"

namespace replicad {

// The one directory clients may have checkpoints written into
// (--checkpoint-root). A path a client names (SaveCheckpoint's `path`,
// TrainingConfig's `checkpoint_dir`) is taken relative to it, or, when
// absolute, must already lie under it; it is normalised lexically and must
// not leave the root, hold NUL or control characters, or pass through a
// symbolic link below the root (an existing component that is one). The
// root itself is resolved and opened once (it may be a link the operator
// made). Resolve only checks a path, for early and clear errors; writes go
// through Locate, whose directory is opened beneath the root's descriptor,
// so a client that swaps directories or plants links between a check and a
// write cannot move the write out of the root.
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

  // Where a checkpoint named `path` is written: its directory, open beneath
  // the root without following any link (CheckpointDirectory::OpenBeneath),
  // and its file name there. Resolve's errors, and PermissionDenied naming
  // the path when a component (the file's name included) is a symbolic link
  // at the moment of opening; NotFound when its directory does not exist.
  struct Location {
    CheckpointDirectory directory;
    std::string name;
    std::string path;  // Absolute, as Resolve gives it.
  };
  absl::StatusOr<Location> Locate(const std::string& path, const std::string& field) const;

 private:
  CheckpointRoot(std::string root, CheckpointDirectory directory)
      : root_(std::move(root)), directory_(std::move(directory)) {}
  // The components of `path` below the root, lexically normalised; Resolve's
  // errors but for links.
  absl::StatusOr<std::vector<std::string>> ComponentsBelow(const std::string& path,
                                                           const std::string& field) const;
  // Resolve, given ComponentsBelow's parts of `path`.
  absl::StatusOr<std::string> ResolveComponents(const std::vector<std::string>& parts,
                                                const std::string& path,
                                                const std::string& field) const;

  std::string root_;  // Absolute, resolved, without a trailing '/'; empty: off.
  std::optional<CheckpointDirectory> directory_;  // The root, open; none when off.
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_CHECKPOINT_ROOT_H_
