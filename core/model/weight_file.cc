#include "core/model/weight_file.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace replicad {
namespace {

constexpr size_t kAlignment = 64;  // As Buffer::AllocateHost's: what the kernels' loads want.

size_t AlignUp(size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

absl::Status ErrnoStatus(int error, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

// An unlinked file in `directory`, open for reading and writing; -1 and errno on failure.
int OpenUnlinked(const std::string& directory) {
  int fd = open(directory.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)) return fd;
  // Filesystems without O_TMPFILE: a name of our own, removed at once.
  std::string name = directory + "/replicad-weights-XXXXXX";
  fd = mkostemp(name.data(), O_CLOEXEC);
  if (fd >= 0) unlink(name.c_str());
  return fd;
}

}  // namespace

WeightFile::~WeightFile() { munmap(base_, bytes_); }

void WeightFile::ReleaseResidentPages() const { madvise(base_, bytes_, MADV_DONTNEED); }

absl::StatusOr<std::shared_ptr<const Model>> WithWeightsInFile(std::shared_ptr<const Model> model,
                                                               const std::string& directory,
                                                               size_t min_bytes) {
  const Graph& graph = model->graph();
  std::map<int, size_t> offsets;  // Initializer -> its place in the file.
  size_t total = 0;
  for (const auto& [v, tensor] : graph.initializers) {
    if (tensor.location().kind != MemoryKind::kHost || tensor.byte_size() < min_bytes) continue;
    offsets[v] = total;
    total += AlignUp(tensor.byte_size());
  }
  if (total == 0) return model;
  const std::string what =
      absl::StrCat("model '", model->name(), "': weights file of ", total, " bytes in ", directory);
  const int fd = OpenUnlinked(directory);
  if (fd < 0) return ErrnoStatus(errno, what);
  // Blocks reserved now: a write through the mapping to a sparse file on a
  // full disk would be a SIGBUS.
  if (const int error = posix_fallocate(fd, 0, static_cast<off_t>(total)); error != 0) {
    close(fd);
    return ErrnoStatus(error, what);
  }
  // Written with pwrite, not through the mapping: the pages go to the page
  // cache without becoming this process's resident memory.
  for (const auto& [v, offset] : offsets) {
    const Tensor& tensor = graph.initializers.at(v);
    const char* data = static_cast<const char*>(tensor.raw_data());
    size_t done = 0;
    while (done < tensor.byte_size()) {
      const ssize_t n =
          pwrite(fd, data + done, tensor.byte_size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int error = n < 0 ? errno : EIO;
        close(fd);
        return ErrnoStatus(error, what);
      }
      done += static_cast<size_t>(n);
    }
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_error = errno;
  close(fd);  // The mapping keeps the file.
  if (base == MAP_FAILED) return ErrnoStatus(map_error, what);
  std::shared_ptr<const WeightFile> file(new WeightFile(static_cast<char*>(base), total));

  Graph moved = graph;
  for (const auto& [v, offset] : offsets) {
    const Tensor& tensor = graph.initializers.at(v);
    auto buffer =
        std::make_shared<Buffer>(file->base_ + offset, tensor.byte_size(), MemoryLocation{}, file);
    REPLICAD_ASSIGN_OR_RETURN(Tensor view, Tensor::Create(tensor.dtype(), tensor.shape(), buffer));
    moved.initializers[v] = std::move(view);
  }
  return std::make_shared<const Model>(model->name(), model->source(), std::move(moved),
                                       std::move(file));
}

bool IsMemoryBackedDirectory(const std::string& directory) {
  struct statfs info;
  if (statfs(directory.c_str(), &info) != 0) return false;
  return info.f_type == TMPFS_MAGIC || info.f_type == RAMFS_MAGIC;
}

}  // namespace replicad
