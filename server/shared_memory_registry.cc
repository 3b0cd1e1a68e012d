#include "server/shared_memory_registry.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace replicad {
namespace {

// Closes the descriptor on every path out of Register: the mapping does not
// need it, and a long-lived server must not leak one per registration.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

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

absl::Status Prefixed(const std::string& name, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("failed to register shared memory region '", name,
                                                  "': ", status.message()));
}

}  // namespace

// Owns the mapping; the registry and every view share it, so the munmap runs
// when the last of them lets go, never under a request still using the bytes.
struct SharedMemoryRegistry::Region {
  Region(std::string key, uint64_t offset, uint64_t byte_size, void* base, size_t length,
         size_t delta)
      : key(std::move(key)),
        offset(offset),
        byte_size(byte_size),
        base(base),
        length(length),
        data(static_cast<char*>(base) + delta) {}
  ~Region() { munmap(base, length); }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  const std::string key;
  const uint64_t offset;
  const uint64_t byte_size;
  void* const base;     // Page aligned, as mmap returned it.
  const size_t length;  // Of the mapping, from `base`.
  char* const data;     // The byte at `offset` of the object.
};

SharedMemoryRegistry::SharedMemoryRegistry(size_t max_regions) : max_regions_(max_regions) {}

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
    if (absl::Status room = CheckRoomFor(name); !room.ok()) return room;
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

  // mmap wants a page-aligned file offset: map from the page holding `offset`.
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t delta = offset % page;
  const size_t length = static_cast<size_t>(delta + byte_size);
  void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(),
                    static_cast<off_t>(offset - delta));
  if (base == MAP_FAILED) {
    return Prefixed(
        name, absl::ErrnoToStatus(errno, absl::StrCat("mmap of shared memory key '", key, "'")));
  }
  std::shared_ptr<const Region> region =
      std::make_shared<Region>(key, offset, byte_size, base, length, static_cast<size_t>(delta));

  absl::MutexLock lock(&mu_);
  // A racing Register that lost drops `region` here, which unmaps it.
  if (absl::Status room = CheckRoomFor(name); !room.ok()) return room;
  regions_.emplace(name, std::move(region));
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::CheckRoomFor(const std::string& name) const {
  if (regions_.count(name) != 0) {
    return Prefixed(name, absl::AlreadyExistsError(absl::StrCat("shared memory region '", name,
                                                                "' already in manager")));
  }
  if (regions_.size() >= max_regions_) {
    return Prefixed(
        name, absl::ResourceExhaustedError(absl::StrCat(regions_.size(),
                                                        " regions are registered, the most allowed "
                                                        "(max_regions ",
                                                        max_regions_, "); unregister one first")));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::Unregister(const std::string& name) {
  // Released after the lock: the munmap need not hold up Find.
  std::map<std::string, std::shared_ptr<const Region>> released;
  absl::MutexLock lock(&mu_);
  if (name.empty()) {
    released.swap(regions_);
  } else if (auto it = regions_.find(name); it != regions_.end()) {
    released.insert(regions_.extract(it));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SharedMemoryRegistry::RegionStatus>> SharedMemoryRegistry::Status(
    const std::string& name) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<RegionStatus> statuses;
  auto add = [&statuses](const std::string& region_name, const Region& region) {
    statuses.push_back({region_name, region.key, region.offset, region.byte_size});
  };
  if (name.empty()) {
    statuses.reserve(regions_.size());
    for (const auto& [region_name, region] : regions_) add(region_name, *region);
    return statuses;
  }
  auto it = regions_.find(name);
  if (it == regions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("Unable to find system shared memory region: '", name, "'"));
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
  char* data = found->data + offset;
  return SharedMemoryView{data, static_cast<size_t>(byte_size), std::move(found)};
}

}  // namespace replicad
