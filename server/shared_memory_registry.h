#ifndef REPLICAD_SERVER_SHARED_MEMORY_REGISTRY_H_
#define REPLICAD_SERVER_SHARED_MEMORY_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/device/shared_device_memory.h"

namespace replicad {

// Bytes of a registered region that one request reads or writes. A system
// region is mapped once, when it is registered, so a request reads its inputs
// and writes its outputs in place through data(); a CUDA region's bytes are on
// a GPU, and Read and Write copy them (data() is null). A client may shrink its object
// at any time, and an access past the new end raises SIGBUS: the region's
// MemoryTrap catches it (the daemon lives, the range reads zeros) and
// CheckIntact tells the request, which fails with the shrink error instead of
// answering garbage. Read and Write go through the object's descriptor
// instead, for the bytes that cannot be used in place (see
// DecodeInferRequest). Copies are cheap and share the region, which stays
// open and mapped while any view lives, even after it is unregistered.
class SharedMemoryView {
 public:
  SharedMemoryView() = default;
  size_t bytes() const { return bytes_; }
  // The view's first byte in the daemon's mapping of the region; null for a
  // default-made view and a CUDA region's. Check CheckIntact after using it.
  char* data() const;
  // InvalidArgument naming the region, the range and the object's size (as
  // Read's) when a fault in the region has been trapped or the object no
  // longer holds the view's bytes: whatever data() gave may be zeros.
  absl::Status CheckIntact() const;
  // Whether both views share a byte of the same object (even through two
  // regions, or two keys for one object).
  bool Overlaps(const SharedMemoryView& other) const;
  // Copies the view's bytes() bytes into `out`. InvalidArgument naming the
  // region, the range and the object's size when the object no longer holds
  // them; the errno's status when the read fails.
  absl::Status Read(void* out) const;
  // Writes `n` <= bytes() bytes from `data` at the view's start; errors as
  // Read's.
  absl::Status Write(const void* data, size_t n) const;

 private:
  friend class SharedMemoryRegistry;
  struct Source;
  SharedMemoryView(std::shared_ptr<const Source> source, uint64_t object_offset, size_t bytes)
      : source_(std::move(source)), object_offset_(object_offset), bytes_(bytes) {}

  std::shared_ptr<const Source> source_;
  uint64_t object_offset_ = 0;  // Where the view starts in the client's object.
  size_t bytes_ = 0;
};

// Which extension a region came through.
enum class SharedMemoryKind { kSystem, kCuda };

// Opens a client's GPU allocation from its CUDA IPC handle's bytes on GPU
// `device` (OpenSharedDeviceMemory in core/backends/backends.h; tests give
// host-memory stand-ins).
using SharedDeviceMemoryOpener = std::function<absl::StatusOr<std::unique_ptr<SharedDeviceMemory>>(
    int64_t device, absl::string_view raw_handle)>;

// The shared-memory regions that clients registered, as Triton's
// system_shared_memory extension (POSIX objects) and cuda_shared_memory
// extension (GPU allocations shared by CUDA IPC handles) have them, in one
// namespace of names as Triton's; protocol neutral. Every message
// reads as Triton's does (its clients' tests match on them), plus the values.
// A region is [offset, offset + byte_size) of the client's object, mapped
// read-write from registration until its last view lets go (see
// SharedMemoryView): a client that shrinks its object fails its own
// requests, it cannot crash the daemon (in Triton it raises SIGBUS).
// Thread-safe; Find and Status never wait for a system call.
class SharedMemoryRegistry {
 public:
  struct RegionStatus {
    std::string name;
    std::string key;      // System regions.
    uint64_t offset = 0;  // System regions.
    uint64_t byte_size = 0;
    int64_t device_id = 0;  // CUDA regions.
  };

  static constexpr size_t kDefaultMaxRegions = 1024;

  // At most `max_regions` registered at once, against clients that never
  // unregister (each region holds the object open). CUDA regions are opened
  // with `open_device_memory`; without one, RegisterCuda is Unimplemented.
  explicit SharedMemoryRegistry(size_t max_regions = kDefaultMaxRegions,
                                SharedDeviceMemoryOpener open_device_memory = nullptr);

  // Whether CUDA regions can be registered.
  bool cuda_enabled() const { return open_device_memory_ != nullptr; }

  // Maps [offset, offset + byte_size) of the object that shm_open(`key`)
  // opens read-write (the client created it; a leading '/' is customary and
  // optional, as in glibc and so Triton), and traps faults in it (MemoryTrap).
  // Every error starts "failed to register shared memory region '<name>': ".
  // InvalidArgument: empty name; key empty, "/", ".", "..", holding another
  // '/' or a NUL, or over NAME_MAX; a symbolic link or not a regular file;
  // byte_size 0; offset + byte_size past the object's size ("invalid args").
  // NotFound: no such object. PermissionDenied: not readable and writable.
  // AlreadyExists: `name` is registered ("already in manager").
  // ResourceExhausted: max_regions reached, or no address space, fds or trap
  // slots left.
  absl::Status Register(const std::string& name, const std::string& key, uint64_t offset,
                        uint64_t byte_size);

  // Opens the GPU allocation that `raw_handle` (the 64 bytes of a
  // cudaIpcMemHandle_t) names on GPU `device_id`, as [0, byte_size) of it.
  // Every error starts "failed to register CUDA shared memory region
  // '<name>': ". Unimplemented without an opener. InvalidArgument: empty
  // name, byte_size 0, byte_size past the allocation's size, and the
  // opener's refusals (a handle of another size, a device this server does
  // not have, a handle CUDA does not open). AlreadyExists and
  // ResourceExhausted as Register's (one namespace with system regions).
  absl::Status RegisterCuda(const std::string& name, absl::string_view raw_handle,
                            int64_t device_id, uint64_t byte_size);

  // Forgets `name` if it is a region of `kind`, or every region of `kind`
  // when `name` is empty. Unknown names, and a name of the other kind, are
  // fine (Triton answers OK). Views already handed out stay valid.
  absl::Status Unregister(const std::string& name,
                          SharedMemoryKind kind = SharedMemoryKind::kSystem);

  // One region of `kind`, or all of them when `name` is empty, in ascending
  // order of name. NotFound "Unable to find system shared memory region:
  // '<name>'" ("cuda" for kCuda); InvalidArgument "The region named '<name>'
  // is registered as CUDA shared memory, not system shared memory" (or the
  // other way) for a name of the other kind.
  absl::StatusOr<std::vector<RegionStatus>> Status(
      const std::string& name, SharedMemoryKind kind = SharedMemoryKind::kSystem) const;

  // [offset, offset + byte_size) of `region`. `tensor` names the asker in
  // messages, e.g. "inputs[0] 'INPUT0'" (…'.parameters.shared_memory_offset').
  // NotFound "Unable to find shared memory region: '<region>'". InvalidArgument
  // "Invalid offset for shared memory region" when offset >= the region's
  // byte_size, "Invalid offset + byte size ..." when the end is past it.
  absl::StatusOr<SharedMemoryView> Find(const std::string& region, uint64_t offset,
                                        uint64_t byte_size, const std::string& tensor) const;

 private:
  struct Region;

  // AlreadyExists or ResourceExhausted when `name` cannot be added now.
  absl::Status CheckRoomFor(const std::string& name, SharedMemoryKind kind) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Adds `region` as `name` unless CheckRoomFor refuses.
  absl::Status Insert(const std::string& name, std::shared_ptr<const Region> region);

  const size_t max_regions_;
  const SharedDeviceMemoryOpener open_device_memory_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<const Region>> regions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_SHARED_MEMORY_REGISTRY_H_
