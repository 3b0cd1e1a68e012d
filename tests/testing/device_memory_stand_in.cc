#include "tests/testing/device_memory_stand_in.h"

#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/device/host_stream.h"

namespace replicad::testing {
namespace {

// A point in a lane thread's queue.
class StandInMark : public Device::LaneMark {
 public:
  explicit StandInMark(std::shared_ptr<Event> event) : event_(std::move(event)) {}
  Event& event() const { return *event_; }

 private:
  std::shared_ptr<Event> event_;
};

class DeviceMemoryStandIn : public Device {
 public:
  DeviceMemoryStandIn(std::unique_ptr<Device> cpu, int ordinal, size_t limit,
                      std::shared_ptr<InjectedFault> fault,
                      std::shared_ptr<RecordingStandIn> recording)
      : cpu_(std::move(cpu)),
        location_{MemoryKind::kCuda, ordinal},
        info_(cpu_->info()),
        limit_(limit),
        fault_(std::move(fault)),
        recording_(std::move(recording)) {
    info_.id = DeviceId{DeviceKind::kCuda, ordinal};
    info_.name = "device-memory stand-in on " + info_.name;
  }

  ~DeviceMemoryStandIn() override {
    upload_.Synchronize();
    download_.Synchronize();
  }

  const DeviceInfo& info() const override { return info_; }
  MemoryLocation memory_location() const override { return location_; }

  absl::StatusOr<std::shared_ptr<Buffer>> Allocate(size_t bytes) override {
    const size_t held = in_use_->fetch_add(bytes) + bytes;
    if (limit_ > 0 && held > limit_) {
      in_use_->fetch_sub(bytes);
      return absl::ResourceExhaustedError(
          absl::StrCat(DeviceIdToString(info_.id), ": out of memory allocating ", bytes, " bytes (",
                       held - bytes, " of ", limit_, " in use)"));
    }
    absl::StatusOr<std::shared_ptr<Buffer>> host = cpu_->Allocate(bytes);
    if (!host.ok()) {
      in_use_->fetch_sub(bytes);
      return host.status();
    }
    void* data = (*host)->data();
    // The count goes down when the last view of the block goes.
    std::shared_ptr<const void> keep(
        new char, [host = *std::move(host), in_use = in_use_, bytes](const char* tag) {
          in_use->fetch_sub(bytes);
          delete tag;
        });
    return std::make_shared<Buffer>(data, bytes, location_, std::move(keep));
  }
  size_t memory_in_use_bytes() const override { return in_use_->load(); }
  uint64_t allocation_count() const override { return cpu_->allocation_count(); }

  void Enqueue(absl::AnyInvocable<void() &&> work) override { cpu_->Enqueue(std::move(work)); }
  void EnqueueCopy(const void* src, MemoryLocation, void* dst, MemoryLocation,
                   size_t bytes) override {
    if (!CopyAllowed().ok()) return;  // Synchronize reports it.
    cpu_->EnqueueCopy(src, MemoryLocation{}, dst, MemoryLocation{}, bytes);
  }
  std::shared_ptr<Event> RecordEvent() override { return cpu_->RecordEvent(); }
  absl::Status Synchronize() override {
    upload_.Synchronize();
    download_.Synchronize();
    // The stream is idle on return even when the device is lost, as Device promises:
    // callers free what their queued work still uses once this returns.
    absl::Status idle = cpu_->Synchronize();
    if (absl::Status broken = health(); !broken.ok()) return broken;
    return idle;
  }

  absl::Status CopyOnStream(const void* src, MemoryLocation, void* dst, MemoryLocation,
                            size_t bytes) override {
    if (absl::Status allowed = CopyAllowed(); !allowed.ok()) return allowed;
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }

  absl::Status CopyOnLane(Lane lane, const void* src, MemoryLocation src_location, void* dst,
                          MemoryLocation dst_location, size_t bytes) override {
    if (lane == Lane::kCompute || bytes == 0) {
      return CopyOnStream(src, src_location, dst, dst_location, bytes);
    }
    if (absl::Status allowed = CopyAllowed(); !allowed.ok()) return allowed;
    HostStream& stream = lane == Lane::kUpload ? upload_ : download_;
    stream.Enqueue([=] { std::memcpy(dst, src, bytes); });
    // As on a GPU: a copy into host memory has landed when the call returns.
    if (dst_location.kind == MemoryKind::kHost) stream.RecordEvent()->Wait();
    return absl::OkStatus();
  }

  absl::StatusOr<std::shared_ptr<LaneMark>> MarkLane(Lane lane) override {
    if (lane == Lane::kCompute) {
      // Kernels ran on the calling thread: everything issued is done.
      auto done = std::make_shared<HostEvent>();
      done->Signal();
      return std::make_shared<StandInMark>(std::move(done));
    }
    return std::make_shared<StandInMark>(
        (lane == Lane::kUpload ? upload_ : download_).RecordEvent());
  }

  absl::Status WaitForMark(Lane lane, const LaneMark* mark) override {
    if (mark == nullptr) return absl::OkStatus();
    const StandInMark* point = static_cast<const StandInMark*>(mark);
    if (lane == Lane::kCompute) {
      point->event().Wait();  // Kernels run on this thread, next.
      return absl::OkStatus();
    }
    // Keep the mark's event alive until the lane got past it.
    std::shared_ptr<StandInMark> keep = std::make_shared<StandInMark>(*point);
    (lane == Lane::kUpload ? upload_ : download_).Enqueue([keep] { keep->event().Wait(); });
    return absl::OkStatus();
  }

  absl::Status AwaitStream() override {
    upload_.Synchronize();
    download_.Synchronize();
    return health();
  }

  absl::Status health() const override {
    if (fault_ != nullptr && fault_->failed.load()) return FaultError();
    return cpu_->health();
  }
  absl::StatusOr<std::unique_ptr<Kernel>> MakeKernel(const KernelSpec& spec) override {
    return cpu_->MakeKernel(spec);
  }

  bool records_work() const override { return recording_ != nullptr; }
  absl::StatusOr<std::unique_ptr<RecordedWork>> Record(
      std::function<absl::Status()> issue) override {
    if (recording_ == nullptr) return Device::Record(std::move(issue));
    if (recording_->refuse.load()) {
      ++recording_->refused;
      return absl::FailedPreconditionError("stand-in: recording refused");
    }
    ++recording_->recorded;
    return std::make_unique<KeptWork>(std::move(issue), recording_);
  }

 private:
  // Recorded work as the stand-in keeps it: the issuing itself, run again.
  class KeptWork final : public RecordedWork {
   public:
    KeptWork(std::function<absl::Status()> issue, std::shared_ptr<RecordingStandIn> counts)
        : issue_(std::move(issue)), counts_(std::move(counts)) {}
    absl::Status Replay() override {
      ++counts_->replayed;
      return issue_();
    }

   private:
    std::function<absl::Status()> issue_;
    std::shared_ptr<RecordingStandIn> counts_;
  };

  absl::Status FaultError() const {
    return absl::InternalError(
        absl::StrCat(DeviceIdToString(info_.id), ": injected fault: the device is lost"));
  }
  // Counts a copy against the injected fault; its error once it struck.
  absl::Status CopyAllowed() {
    if (fault_ == nullptr) return absl::OkStatus();
    if (!fault_->failed.load()) {
      if (fault_->copies_before_failure.load() < 0) return absl::OkStatus();
      if (fault_->copies_before_failure.fetch_sub(1) > 0) return absl::OkStatus();
      fault_->failed = true;
    }
    return FaultError();
  }

  std::unique_ptr<Device> cpu_;
  const MemoryLocation location_;
  DeviceInfo info_;
  const size_t limit_;
  const std::shared_ptr<InjectedFault> fault_;
  const std::shared_ptr<RecordingStandIn> recording_;  // Null: records nothing.
  std::shared_ptr<std::atomic<size_t>> in_use_ = std::make_shared<std::atomic<size_t>>(0);
  HostStream upload_{[] {}};
  HostStream download_{[] {}};
};

}  // namespace

std::unique_ptr<Device> MakeDeviceMemoryStandIn(std::unique_ptr<Device> cpu_slot, int ordinal,
                                                size_t memory_limit_bytes,
                                                std::shared_ptr<InjectedFault> fault,
                                                std::shared_ptr<RecordingStandIn> recording) {
  return std::make_unique<DeviceMemoryStandIn>(std::move(cpu_slot), ordinal, memory_limit_bytes,
                                               std::move(fault), std::move(recording));
}

}  // namespace replicad::testing
