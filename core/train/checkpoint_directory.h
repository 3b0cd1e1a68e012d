#ifndef REPLICAD_CORE_TRAIN_CHECKPOINT_DIRECTORY_H_
#define REPLICAD_CORE_TRAIN_CHECKPOINT_DIRECTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace replicad {

// An open directory that checkpoint files are written into and removed
// from by name. Every file operation of a checkpoint is made relative to
// this descriptor (openat, renameat, unlinkat, fstatat), never by path, so
// once the directory is open nobody can redirect a write elsewhere by
// renaming, replacing or linking the path it was opened by: the check that
// chose the directory and the writes into it name the same inode.
// Copies share the descriptor, which closes with the last copy.
// Immutable and thread-safe.
class CheckpointDirectory {
 public:
  // Opens the directory at `path` (following links: the caller vouches for
  // the path, as for a model repository the operator names). NotFound,
  // PermissionDenied, or the errno's code, naming the path; FailedPrecondition
  // when it is not a directory.
  static absl::StatusOr<CheckpointDirectory> Open(const std::string& path);
  // Opens `relative` (components separated by '/', none of them empty, "."
  // or "..") beneath `base` without following any symbolic link and without
  // leaving `base`: openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) where the
  // kernel has it, else one openat(O_NOFOLLOW) per component. `relative`
  // empty: `base` itself. PermissionDenied naming the component when one is
  // a symbolic link; NotFound or FailedPrecondition (not a directory) naming
  // it; the errno's code otherwise. Messages name base.path() + '/' + the
  // components walked. `walk` forces the per-component walk (tests).
  static absl::StatusOr<CheckpointDirectory> OpenBeneath(const CheckpointDirectory& base,
                                                         const std::vector<std::string>& relative,
                                                         bool walk = false);

  int fd() const { return fd_->fd; }
  // The path it was opened by, for messages; writes never use it.
  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string PathOf(const std::string& name) const;

 private:
  struct Descriptor {
    explicit Descriptor(int fd) : fd(fd) {}
    ~Descriptor();
    Descriptor(const Descriptor&) = delete;
    Descriptor& operator=(const Descriptor&) = delete;
    const int fd;
  };
  CheckpointDirectory(int fd, std::string path)
      : fd_(std::make_shared<Descriptor>(fd)), path_(std::move(path)) {}

  std::shared_ptr<const Descriptor> fd_;
  std::string path_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_CHECKPOINT_DIRECTORY_H_
