#ifndef REPLICAD_TESTS_TESTING_SHARED_DEVICE_MEMORY_STAND_IN_H_
#define REPLICAD_TESTS_TESTING_SHARED_DEVICE_MEMORY_STAND_IN_H_

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/device/shared_device_memory.h"

namespace replicad::testing {

// Clients' "GPU allocations" in host memory, for the CUDA shared-memory
// paths on machines without a GPU: Export makes an allocation of `bytes`
// zeros on GPU `device` and returns its 64-byte handle (with
// `size_reported` false, its bytes() is 0, as where the driver cannot tell
// an allocation's size); Opener() opens such
// handles as SharedDeviceMemory (unknown handles, and a device other than
// the allocation's, fail as CUDA refuses them: InvalidArgument), and
// bytes(handle) is the client's own view of the allocation. Thread-safe.
class SharedDeviceMemoryStandIn {
 public:
  std::string Export(size_t bytes, int device = 0, bool size_reported = true) {
    absl::MutexLock lock(&mu_);
    std::string handle(kIpcHandleBytes, '\0');
    const std::string tag = absl::StrCat("stand-in allocation ", allocations_.size());
    std::memcpy(handle.data(), tag.data(), tag.size());
    allocations_[handle] = {device, std::make_shared<std::vector<char>>(bytes, 0), size_reported};
    return handle;
  }

  char* bytes(const std::string& handle) {
    absl::MutexLock lock(&mu_);
    return allocations_.at(handle).memory->data();
  }

  // How many allocations are open now (a region's closes when its last view goes).
  int open() const { return *open_; }

  std::function<absl::StatusOr<std::unique_ptr<SharedDeviceMemory>>(int64_t, absl::string_view)>
  Opener() {
    return [this](int64_t device,
                  absl::string_view handle) -> absl::StatusOr<std::unique_ptr<SharedDeviceMemory>> {
      absl::MutexLock lock(&mu_);
      auto it = allocations_.find(std::string(handle));
      if (it == allocations_.end() || it->second.device != device) {
        return absl::InvalidArgumentError("cudaIpcOpenMemHandle: invalid argument (stand-in)");
      }
      return std::unique_ptr<SharedDeviceMemory>(
          new Opened(it->second.device, it->second.memory, it->second.size_reported, open_));
    };
  }

 private:
  struct Allocation {
    int device = 0;
    std::shared_ptr<std::vector<char>> memory;
    bool size_reported = true;
  };

  class Opened final : public SharedDeviceMemory {
   public:
    Opened(int device, std::shared_ptr<std::vector<char>> memory, bool size_reported,
           std::shared_ptr<int> open)
        : device_(device),
          memory_(std::move(memory)),
          size_reported_(size_reported),
          open_(std::move(open)) {
      ++*open_;
    }
    ~Opened() override { --*open_; }
    uint64_t bytes() const override { return size_reported_ ? memory_->size() : 0; }
    int device() const override { return device_; }
    uintptr_t address() const override { return reinterpret_cast<uintptr_t>(memory_->data()); }
    absl::Status CopyToHost(uint64_t offset, size_t n, void* out) const override {
      if (offset + n > memory_->size()) return absl::InternalError("copy past the allocation");
      std::memcpy(out, memory_->data() + offset, n);
      return absl::OkStatus();
    }
    absl::Status CopyFromHost(uint64_t offset, const void* data, size_t n) const override {
      if (offset + n > memory_->size()) return absl::InternalError("copy past the allocation");
      std::memcpy(memory_->data() + offset, data, n);
      return absl::OkStatus();
    }

   private:
    int device_;
    std::shared_ptr<std::vector<char>> memory_;
    bool size_reported_;
    std::shared_ptr<int> open_;
  };

  absl::Mutex mu_;
  std::map<std::string, Allocation> allocations_;
  std::shared_ptr<int> open_ = std::make_shared<int>(0);
};

}  // namespace replicad::testing

#endif  // REPLICAD_TESTS_TESTING_SHARED_DEVICE_MEMORY_STAND_IN_H_
