#include "core/train/checkpoint_directory.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace replicad {
namespace {

constexpr int kDirectoryFlags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;

absl::Status OpenError(int error, const std::string& path) {
  switch (error) {
    case ENOTDIR:
      return absl::FailedPreconditionError(absl::StrCat("'", path, "' is not a directory"));
    case ENOENT:
      return absl::NotFoundError(absl::StrCat("directory '", path, "' does not exist"));
    default:
      return absl::ErrnoToStatus(error, absl::StrCat("open ", path));
  }
}

// -1 with errno set; ENOSYS where the kernel (or a seccomp filter) has no openat2.
int OpenAt2(int base, const std::string& relative) {
  struct open_how how = {};
  how.flags = kDirectoryFlags;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  for (;;) {
    const long fd = ::syscall(SYS_openat2, base, relative.c_str(), &how, sizeof(how));
    if (fd >= 0 || errno != EINTR) return static_cast<int>(fd);
  }
}

}  // namespace

CheckpointDirectory::Descriptor::~Descriptor() { ::close(fd); }

absl::StatusOr<CheckpointDirectory> CheckpointDirectory::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), kDirectoryFlags);
  if (fd < 0) return OpenError(errno, path);
  return CheckpointDirectory(fd, path);
}

absl::StatusOr<CheckpointDirectory> CheckpointDirectory::OpenBeneath(
    const CheckpointDirectory& base, const std::vector<std::string>& relative, bool walk) {
  const std::string joined = absl::StrJoin(relative, "/");
  const std::string shown = joined.empty() ? base.path() : base.PathOf(joined);
  if (!walk) {
    const int fd = OpenAt2(base.fd(), joined.empty() ? "." : joined);
    if (fd >= 0) return CheckpointDirectory(fd, shown);
    // Without openat2, the walk below is the way; after any other failure it
    // is taken too, only to name the component that failed.
    if (errno != ENOSYS && errno != EPERM && errno != ELOOP && errno != ENOENT &&
        errno != ENOTDIR && errno != EXDEV) {
      return OpenError(errno, shown);
    }
  }
  // Each step opens one name (never "." or "..") relative to the directory
  // the previous step holds open, refusing a link there: whatever is renamed
  // meanwhile, every step stays beneath `base`.
  int fd = ::fcntl(base.fd(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return OpenError(errno, base.path());
  std::string walked = base.path();
  for (const std::string& name : relative) {
    walked = absl::StrCat(walked, "/", name);
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
      ::close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat("'", walked, "': a component must be a plain name"));
    }
    const int next = ::openat(fd, name.c_str(), kDirectoryFlags | O_NOFOLLOW);
    const int error = errno;
    struct stat st;
    const bool link = next < 0 && ::fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                      S_ISLNK(st.st_mode);
    ::close(fd);
    if (link) {
      return absl::PermissionDeniedError(absl::StrCat(
          "'", walked, "' is a symbolic link; checkpoint paths may not pass through one"));
    }
    if (next < 0) return OpenError(error, walked);
    fd = next;
  }
  return CheckpointDirectory(fd, shown);
}

std::string CheckpointDirectory::PathOf(const std::string& name) const {
  return path_ == "/" ? absl::StrCat("/", name) : absl::StrCat(path_, "/", name);
}

}  // namespace replicad
