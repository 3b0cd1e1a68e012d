#include "server/shared_memory_registry.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>  // shm_open
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "server/memory_trap.h"

namespace replicad {
namespace {

// Closes the descriptor on every failed path out of Register: a long-lived
// server must not leak one per refused registration.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// The client-facing rule is glibc's: leading slashes are dropped, and what is
// left must be one path component. Checking here, not leaving it to shm_open,
// gives a message that says which rule was broken.
absl::Status CheckKey(const std::string& key) {
  if (key.empty()) {
    return absl::InvalidArgumentError(
        "invalid args: key is empty, expected the name of a POSIX shared memory object such as "
        "'/input_simple'");
  }
  if (key.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("invalid args: key contains a NUL character");
  }
  const size_t first = key.find_first_not_of('/');
  const std::string object = first == std::string::npos ? std::string() : key.substr(first);
  if (object.empty() || object == "." || object == "..") {
    return absl::InvalidArgumentError(absl::StrCat("invalid args: key '", key,
                                                   "' names no shared memory object, expected e.g. "
                                                   "'/input_simple'"));
  }
  if (object.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid args: key '", key,
                     "' holds a '/' past its leading one, expected a single name "
                     "such as '/input_simple'"));
  }
  if (object.size() > NAME_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid args: key '", key.substr(0, 32), "...' is ", object.size(),
                     " characters long, expected at most ", NAME_MAX));
  }
  return absl::OkStatus();
}

absl::Status Prefixed(const std::string& name, const absl::Status& status,
                      SharedMemoryKind kind = SharedMemoryKind::kSystem) {
  return absl::Status(
      status.code(),
      absl::StrCat("failed to register ", kind == SharedMemoryKind::kCuda ? "CUDA " : "",
                   "shared memory region '", name, "': ", status.message()));
}

const char* KindName(SharedMemoryKind kind) {
  return kind == SharedMemoryKind::kCuda ? "CUDA" : "system";
}

}  // namespace

// The client's object, open and mapped for the registry and every view of
// it: unmapped and closed when the last of them lets go, so a view taken
// before Unregister stays valid. A CUDA region's source holds the opened
// allocation instead (fd -1, no mapping), closed the same way.
struct SharedMemoryView::Source {
  Source(int fd, std::string name, std::string key)
      : fd(fd), name(std::move(name)), key(std::move(key)) {}
  ~Source() {
    trap.reset();  // Before the range can be mapped by anyone else.
    if (map != nullptr) munmap(map, map_bytes);
    if (fd >= 0) close(fd);
  }
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;

  const int fd;
  const std::string name;  // The region's, for messages.
  const std::string key;
  dev_t device = 0;  // Which object it is, to tell overlapping ranges of it.
  ino_t inode = 0;
  void* map = nullptr;  // From the page holding the region's first byte.
  size_t map_bytes = 0;
  uint64_t map_offset = 0;  // The object offset of `map`'s first byte.
  std::unique_ptr<MemoryTrap> trap;
  std::unique_ptr<SharedDeviceMemory> device_memory;  // CUDA regions only.
};

struct SharedMemoryRegistry::Region {
  SharedMemoryKind kind = SharedMemoryKind::kSystem;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
  std::shared_ptr<const SharedMemoryView::Source> source;
};

namespace {

absl::Status ShrunkError(int fd, const std::string& name, const std::string& key, uint64_t begin,
                         size_t bytes, const char* verb) {
  struct stat object;
  const std::string size =
      fstat(fd, &object) == 0 ? absl::StrCat(object.st_size, " bytes") : "an unknown size";
  return absl::InvalidArgumentError(absl::StrCat(
      "shared memory region '", name, "': cannot ", verb, " bytes ", begin, " to ", begin + bytes,
      " of key '", key, "', which now holds ", size, " (the client shrank it after registering)"));
}

}  // namespace

char* SharedMemoryView::data() const {
  if (source_ == nullptr || source_->device_memory != nullptr) return nullptr;
  return static_cast<char*>(source_->map) + (object_offset_ - source_->map_offset);
}

absl::Status SharedMemoryView::CheckIntact() const {
  // A GPU allocation cannot shrink under its handle; a copy's own error
  // tells of anything else.
  if (source_ == nullptr || source_->device_memory != nullptr) return absl::OkStatus();
  struct stat object;
  if (fstat(source_->fd, &object) != 0) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("fstat of shared memory region '", source_->name, "'"));
  }
  // A fired trap stays broken even if the client grows the object again:
  // the range now maps zero pages, not the object.
  if (source_->trap->fired() || static_cast<uint64_t>(object.st_size) < object_offset_ + bytes_) {
    return ShrunkError(source_->fd, source_->name, source_->key, object_offset_, bytes_, "use");
  }
  return absl::OkStatus();
}

bool SharedMemoryView::Overlaps(const SharedMemoryView& other) const {
  if (source_ == nullptr || other.source_ == nullptr || bytes_ == 0 || other.bytes_ == 0) {
    return false;
  }
  const SharedDeviceMemory* mine = source_->device_memory.get();
  const SharedDeviceMemory* theirs = other.source_->device_memory.get();
  if ((mine == nullptr) != (theirs == nullptr)) return false;
  uint64_t begin = object_offset_, other_begin = other.object_offset_;
  if (mine != nullptr) {
    // Two handles of one allocation open at one address.
    if (mine->device() != theirs->device()) return false;
    begin += mine->address();
    other_begin += theirs->address();
  } else if (source_->device != other.source_->device || source_->inode != other.source_->inode) {
    return false;
  }
  return begin < other_begin + other.bytes_ && other_begin < begin + bytes_;
}

absl::Status SharedMemoryView::Read(void* out) const {
  if (source_->device_memory != nullptr) {
    return source_->device_memory->CopyToHost(object_offset_, bytes_, out);
  }
  char* to = static_cast<char*>(out);
  size_t done = 0;
  while (done < bytes_) {
    const ssize_t n =
        pread(source_->fd, to + done, bytes_ - done, static_cast<off_t>(object_offset_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("reading shared memory region '", source_->name, "'"));
    }
    if (n == 0) {
      return ShrunkError(source_->fd, source_->name, source_->key, object_offset_, bytes_, "read");
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryView::Write(const void* data, size_t n) const {
  if (n > bytes_) {
    return absl::InternalError(absl::StrCat("a write of ", n, " bytes into a view of ", bytes_,
                                            " bytes of shared memory region '", source_->name,
                                            "'"));
  }
  if (source_->device_memory != nullptr) {
    return source_->device_memory->CopyFromHost(object_offset_, data, n);
  }
  // pwrite past the end would grow the client's object; a shrunk object is
  // the client's mistake to be told about, not to be silently undone.
  struct stat object;
  if (fstat(source_->fd, &object) != 0) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("fstat of shared memory region '", source_->name, "'"));
  }
  if (static_cast<uint64_t>(object.st_size) < object_offset_ + n) {
    return ShrunkError(source_->fd, source_->name, source_->key, object_offset_, n, "write");
  }
  const char* from = static_cast<const char*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t written =
        pwrite(source_->fd, from + done, n - done, static_cast<off_t>(object_offset_ + done));
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("writing shared memory region '", source_->name, "'"));
    }
    done += static_cast<size_t>(written);
  }
  return absl::OkStatus();
}

SharedMemoryRegistry::SharedMemoryRegistry(size_t max_regions,
                                           SharedDeviceMemoryOpener open_device_memory)
    : max_regions_(max_regions), open_device_memory_(std::move(open_device_memory)) {}

absl::Status SharedMemoryRegistry::Register(const std::string& name, const std::string& key,
                                            uint64_t offset, uint64_t byte_size) {
  if (name.empty()) {
    return Prefixed(name, absl::InvalidArgumentError(
                              "invalid args: name is empty, expected the region's name"));
  }
  if (absl::Status key_ok = CheckKey(key); !key_ok.ok()) return Prefixed(name, key_ok);
  if (byte_size == 0) {
    return Prefixed(
        name, absl::InvalidArgumentError("invalid args: byte_size is 0, expected at least 1 byte"));
  }
  // Fail fast before any system call; checked again when inserting, since the
  // open and map run without the lock (so Find never waits on them).
  {
    absl::ReaderMutexLock lock(&mu_);
    REPLICAD_RETURN_IF_ERROR(CheckRoomFor(name, SharedMemoryKind::kSystem));
  }

  FileDescriptor fd(shm_open(key.c_str(), O_RDWR, 0));
  if (fd.get() < 0) {
    const int error = errno;
    const std::string what = absl::StrCat("unable to open shared memory key '", key, "'");
    if (error == ELOOP) {
      return Prefixed(name, absl::InvalidArgumentError(absl::StrCat(
                                what, ": it is a symbolic link, expected the object itself")));
    }
    return Prefixed(name, absl::ErrnoToStatus(error, absl::StrCat(what, " (shm_open)")));
  }
  struct stat object;
  if (fstat(fd.get(), &object) != 0) {
    return Prefixed(
        name, absl::ErrnoToStatus(errno, absl::StrCat("fstat of shared memory key '", key, "'")));
  }
  if (!S_ISREG(object.st_mode)) {
    return Prefixed(
        name, absl::InvalidArgumentError(absl::StrCat("invalid args: shared memory key '", key,
                                                      "' is not a regular shared memory object")));
  }
  const uint64_t object_bytes = static_cast<uint64_t>(object.st_size);
  if (offset > object_bytes || byte_size > object_bytes - offset) {
    return Prefixed(name, absl::InvalidArgumentError(
                              absl::StrCat("invalid args: offset ", offset, " + byte_size ",
                                           byte_size, " runs past the end of shared memory key '",
                                           key, "', which holds ", object_bytes, " bytes")));
  }

  // Mapped whole, once: a request then touches the client's bytes in place
  // (no copy and no mapping per request). From the page holding `offset`,
  // as mmap wants.
  auto source = std::make_shared<SharedMemoryView::Source>(fd.release(), name, key);
  source->device = object.st_dev;
  source->inode = object.st_ino;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  source->map_offset = offset - offset % page;
  source->map_bytes = static_cast<size_t>(offset - source->map_offset + byte_size);
  void* map = mmap(nullptr, source->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, source->fd,
                   static_cast<off_t>(source->map_offset));
  if (map == MAP_FAILED) {
    const int error = errno;
    const std::string what =
        absl::StrCat("mapping ", byte_size, " bytes of shared memory key '", key, "' (mmap)");
    return Prefixed(name, error == ENOMEM ? absl::ResourceExhaustedError(
                                                absl::StrCat(what, ": no address space left"))
                                          : absl::ErrnoToStatus(error, what));
  }
  source->map = map;
  source->trap = MemoryTrap::Add(map, source->map_bytes);
  if (source->trap == nullptr) {
    return Prefixed(name, absl::ResourceExhaustedError(absl::StrCat(
                              "every one of the ", MemoryTrap::kSlots,
                              " fault traps for mapped regions is taken; unregister a region")));
  }

  auto region = std::make_shared<Region>();
  region->offset = offset;
  region->byte_size = byte_size;
  region->source = std::move(source);
  return Insert(name, std::move(region));
}

absl::Status SharedMemoryRegistry::RegisterCuda(const std::string& name,
                                                absl::string_view raw_handle, int64_t device_id,
                                                uint64_t byte_size) {
  constexpr SharedMemoryKind kCuda = SharedMemoryKind::kCuda;
  if (open_device_memory_ == nullptr) {
    return Prefixed(name,
                    absl::UnimplementedError(
                        "this server opens no GPU memory (built without CUDA, or CUDA shared "
                        "memory disabled with --system-shared-memory=false)"),
                    kCuda);
  }
  if (name.empty()) {
    return Prefixed(
        name, absl::InvalidArgumentError("invalid args: name is empty, expected the region's name"),
        kCuda);
  }
  if (byte_size == 0) {
    return Prefixed(
        name, absl::InvalidArgumentError("invalid args: byte_size is 0, expected at least 1 byte"),
        kCuda);
  }
  if (raw_handle.size() != kIpcHandleBytes) {
    return Prefixed(
        name,
        absl::InvalidArgumentError(absl::StrCat(
            "invalid args: raw_handle holds ", raw_handle.size(), " bytes, expected the ",
            kIpcHandleBytes, " of a cudaIpcMemHandle_t (cudaIpcGetMemHandle)")),
        kCuda);
  }
  if (device_id < 0) {
    return Prefixed(name,
                    absl::InvalidArgumentError(absl::StrCat(
                        "invalid args: device_id is ", device_id, ", expected a GPU ordinal >= 0")),
                    kCuda);
  }
  {
    absl::ReaderMutexLock lock(&mu_);
    REPLICAD_RETURN_IF_ERROR(CheckRoomFor(name, kCuda));
  }
  absl::StatusOr<std::unique_ptr<SharedDeviceMemory>> memory =
      open_device_memory_(device_id, raw_handle);
  if (!memory.ok()) {
    return Prefixed(
        name,
        absl::Status(memory.status().code(),
                     absl::StrCat("failed to open CUDA IPC handle: ", memory.status().message())),
        kCuda);
  }
  const uint64_t allocation = (*memory)->bytes();
  if (allocation == 0) {
    // Unbounded, a client's byte_size could send copies past its allocation:
    // on a GPU that is an illegal address, which ends every slot of the GPU.
    return Prefixed(name,
                    absl::FailedPreconditionError(
                        "the CUDA driver did not report the allocation's size "
                        "(cuMemGetAddressRange), so the region's bounds cannot be checked"),
                    kCuda);
  }
  if (byte_size > allocation) {
    return Prefixed(
        name,
        absl::InvalidArgumentError(absl::StrCat("invalid args: byte_size ", byte_size,
                                                " runs past the end of the GPU "
                                                "allocation the handle names, which holds ",
                                                allocation, " bytes")),
        kCuda);
  }
  auto source = std::make_shared<SharedMemoryView::Source>(-1, name, std::string());
  source->device_memory = *std::move(memory);
  auto region = std::make_shared<Region>();
  region->kind = kCuda;
  region->byte_size = byte_size;
  region->source = std::move(source);
  return Insert(name, std::move(region));
}

absl::Status SharedMemoryRegistry::Insert(const std::string& name,
                                          std::shared_ptr<const Region> region) {
  absl::MutexLock lock(&mu_);
  // A racing Register that lost drops `region` here, which unmaps and closes
  // the object.
  REPLICAD_RETURN_IF_ERROR(CheckRoomFor(name, region->kind));
  regions_.emplace(name, std::move(region));
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::CheckRoomFor(const std::string& name,
                                                SharedMemoryKind kind) const {
  if (regions_.count(name) != 0) {
    return Prefixed(name,
                    absl::AlreadyExistsError(
                        absl::StrCat("shared memory region '", name, "' already in manager")),
                    kind);
  }
  if (regions_.size() >= max_regions_) {
    return Prefixed(name,
                    absl::ResourceExhaustedError(absl::StrCat(
                        regions_.size(), " regions are registered, the most allowed (max_regions ",
                        max_regions_, "); unregister one first")),
                    kind);
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::Unregister(const std::string& name, SharedMemoryKind kind) {
  // Released after the lock: closing the objects need not hold up Find.
  std::vector<std::shared_ptr<const Region>> released;
  absl::MutexLock lock(&mu_);
  for (auto it = name.empty() ? regions_.begin() : regions_.find(name); it != regions_.end();) {
    if (it->second->kind == kind) {
      released.push_back(std::move(it->second));
      it = regions_.erase(it);
    } else {
      ++it;
    }
    if (!name.empty()) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SharedMemoryRegistry::RegionStatus>> SharedMemoryRegistry::Status(
    const std::string& name, SharedMemoryKind kind) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<RegionStatus> statuses;
  auto add = [&statuses](const std::string& region_name, const Region& region) {
    const SharedDeviceMemory* gpu = region.source->device_memory.get();
    statuses.push_back({region_name, region.source->key, region.offset, region.byte_size,
                        gpu != nullptr ? gpu->device() : 0});
  };
  if (name.empty()) {
    for (const auto& [region_name, region] : regions_) {
      if (region->kind == kind) add(region_name, *region);
    }
    return statuses;
  }
  auto it = regions_.find(name);
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat("Unable to find ",
                                            kind == SharedMemoryKind::kCuda ? "cuda" : "system",
                                            " shared memory region: '", name, "'"));
  }
  if (it->second->kind != kind) {
    return absl::InvalidArgumentError(
        absl::StrCat("The region named '", name, "' is registered as ", KindName(it->second->kind),
                     " shared memory, not ", KindName(kind), " shared memory"));
  }
  add(it->first, *it->second);
  return statuses;
}

absl::StatusOr<SharedMemoryView> SharedMemoryRegistry::Find(const std::string& region,
                                                            uint64_t offset, uint64_t byte_size,
                                                            const std::string& tensor) const {
  std::shared_ptr<const Region> found;
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = regions_.find(region);
    if (it == regions_.end()) {
      return absl::NotFoundError(absl::StrCat("Unable to find shared memory region: '", region,
                                              "', named by ", tensor,
                                              ".parameters.shared_memory_region"));
    }
    found = it->second;
  }
  if (offset >= found->byte_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("Invalid offset for shared memory region: '", region, "': ", tensor,
                     ".parameters.shared_memory_offset is ", offset,
                     ", expected less than the region's ", found->byte_size, " bytes"));
  }
  if (byte_size > found->byte_size - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Invalid offset + byte size for shared memory region: '", region, "': ", tensor,
        ".parameters.shared_memory_offset ", offset, " + shared_memory_byte_size ", byte_size,
        " runs past the region's ", found->byte_size, " bytes"));
  }
  return SharedMemoryView(found->source, found->offset + offset, static_cast<size_t>(byte_size));
}

}  // namespace replicad
