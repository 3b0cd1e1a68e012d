#include "core/backends/cpu/cpu_backend.h"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/backends/cpu/flush_denormals.h"
#include "core/backends/cpu/kernels/cpu_kernel_factory.h"
#include "core/backends/cpu/kernels/weight_cache.h"
#include "core/backends/cpu/openmp_team_park.h"
#include "core/device/host_stream.h"

namespace replicad {
namespace {

std::string CpuModelName() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (absl::StartsWith(line, "model name")) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
    }
  }
  return "CPU";
}

int UsableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

// The stream's around_long_sleep for a slot of `threads` OpenMP threads:
// none for one thread, which has no team to spin.
absl::AnyInvocable<void(absl::FunctionRef<void()>)> ParkTeamWhileIdle(int threads,
                                                                      OpenMpTeamPark* park) {
  if (threads <= 1) return nullptr;
  return [park](absl::FunctionRef<void()> sleep) { park->Park(sleep); };
}

class CpuDevice : public Device {
 public:
  CpuDevice(DeviceInfo info, const CpuSlotOptions& options)
      : info_(std::move(info)),
        team_park_(options.threads),
        // Before the slot's OpenMP team exists: its threads inherit the mode.
        stream_(
            [threads = options.threads] {
              FlushDenormalsOnThisThread();
              omp_set_num_threads(threads);
            },
            ParkTeamWhileIdle(options.threads, &team_park_)),
        kernel_context_{HostEngine(),     dnnl::stream(HostEngine()), HostWeightCache(),
                        options.winograd, SlotScratchpad{},           FiniteOutputs{}} {}

  ~CpuDevice() override { stream_.Synchronize(); }

  const DeviceInfo& info() const override { return info_; }
  MemoryLocation memory_location() const override { return MemoryLocation{}; }

  absl::StatusOr<std::shared_ptr<Buffer>> Allocate(size_t bytes) override {
    allocations_.fetch_add(1, std::memory_order_relaxed);
    try {
      return Buffer::AllocateHost(bytes);
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(
          absl::StrCat(DeviceIdToString(info_.id), ": cannot allocate ", bytes, " bytes"));
    }
  }
  uint64_t allocation_count() const override {
    return allocations_.load(std::memory_order_relaxed);
  }

  void Enqueue(absl::AnyInvocable<void() &&> work) override { stream_.Enqueue(std::move(work)); }

  void EnqueueCopy(const void* src, MemoryLocation, void* dst, MemoryLocation,
                   size_t bytes) override {
    stream_.Enqueue([src, dst, bytes] { std::memcpy(dst, src, bytes); });
  }

  std::shared_ptr<Event> RecordEvent() override { return stream_.RecordEvent(); }

  absl::Status Synchronize() override {
    stream_.Synchronize();
    return absl::OkStatus();
  }

  absl::Status CopyOnStream(const void* src, MemoryLocation, void* dst, MemoryLocation,
                            size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status AwaitStream() override { return absl::OkStatus(); }

  // A plan's data-dependent part runs on another host device: its kernels
  // are made on that device's thread while this slot's thread runs the plan.
  Device* host_folding_device() override {
    Device* host = HostFoldingDevice();
    return host == this ? nullptr : host;
  }

  absl::StatusOr<std::unique_ptr<Kernel>> MakeKernel(const KernelSpec& spec) override {
    // Made on the slot's own thread, for two reasons. oneDNN splits a
    // primitive's work for the OpenMP thread count of the thread that creates
    // it and runs it with that many threads wherever it runs: made on the
    // caller's thread (a gRPC thread, one OpenMP thread per core), every slot
    // would run with all cores' threads and slots would oversubscribe the
    // cores. And kernels share the slot's scratchpad, which may only grow
    // while none of them runs.
    absl::StatusOr<std::unique_ptr<Kernel>> kernel;
    stream_.Enqueue([&] { kernel = MakeCpuKernel(spec, kernel_context_); });
    stream_.Synchronize();
    return kernel;
  }

 private:
  const DeviceInfo info_;
  std::atomic<uint64_t> allocations_{0};
  OpenMpTeamPark team_park_;  // Before stream_, whose thread uses it.
  HostStream stream_;
  CpuKernelContext kernel_context_;
};

}  // namespace

std::vector<DeviceInfo> EnumerateCpuDevices() {
  const std::string name = CpuModelName();
  const uint64_t memory =
      static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  std::vector<DeviceInfo> devices;
  const int cores = UsableCores();
  for (int i = 0; i < cores; ++i) {
    devices.push_back(DeviceInfo{DeviceId{DeviceKind::kCpu, i}, name, memory, "", "", ""});
  }
  return devices;
}

absl::Status SetCpuPrimitiveCacheCapacity(int capacity) {
  if (capacity < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the kernel cache capacity must be 0 or more; received ", capacity));
  }
  dnnl::set_primitive_cache_capacity(capacity);
  return absl::OkStatus();
}

std::unique_ptr<Device> CreateCpuDevice(const DeviceInfo& info, const CpuSlotOptions& options) {
  return std::make_unique<CpuDevice>(info, options);
}

Device* HostFoldingDevice() {
  // Never destroyed: plans of any slot may fold on it until the process ends.
  static Device* const device = []() -> Device* {
    const std::vector<DeviceInfo> cpus = EnumerateCpuDevices();
    return cpus.empty() ? nullptr : CreateCpuDevice(cpus.front(), CpuSlotOptions{}).release();
  }();
  return device;
}

}  // namespace replicad
