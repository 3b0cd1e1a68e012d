#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/backends/cuda/cuda_backend.h"
#include "core/backends/cuda/cuda_call.h"
#include "core/backends/cuda/cuda_graph.h"
#include "core/backends/cuda/cuda_slot.h"
#include "core/backends/cuda/kernels/cuda_kernel_factory.h"
#include "core/backends/cuda/scoped_gpu.h"
#include "core/base/status_macros.h"
#include "core/device/caching_allocator.h"
#include "core/device/host_stream.h"

namespace replicad {
namespace {

// Big enough that a chunk's DMA setup is noise, small enough that two fit
// in cache-friendly pinned memory and the first DMA starts early.
constexpr size_t kStagingChunkBytes = size_t{8} << 20;
// What NVIDIA recommends for cuBLAS on Hopper (less suffices on Ampere).
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

// cudaMalloc/cudaFree on one GPU from whatever thread allocates (gRPC
// threads build plans), restoring that thread's current device after.
class CudaRawAllocator : public RawAllocator {
 public:
  CudaRawAllocator(int ordinal, std::string device)
      : ordinal_(ordinal), device_(std::move(device)) {}

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    ScopedGpu scope(ordinal_);
    void* pointer = nullptr;
    REPLICAD_CUDA_RETURN_IF_ERROR(device_, cudaMalloc(&pointer, bytes));
    return pointer;
  }

  void Free(void* pointer) override {
    ScopedGpu scope(ordinal_);
    cudaFree(pointer);
  }

 private:
  int ordinal_;
  std::string device_;
};

// The slot's memory: its caching allocator and the raw allocator under it,
// kept alive by every buffer they handed out.
struct SlotMemory {
  SlotMemory(int ordinal, const std::string& device) : raw(ordinal, device), cache(device, &raw) {}
  CudaRawAllocator raw;
  CachingAllocator cache;
};

// Ready once the host thread has issued everything before it and the GPU
// has run it.
class CudaEvent : public Event {
 public:
  ~CudaEvent() override {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }

  // On the stream's host thread.
  void Record(cudaStream_t stream) {
    if (cudaEventCreateWithFlags(&event_, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventRecord(event_, stream) != cudaSuccess) {
      // The event is then ready when the host got here; the stream's own
      // error surfaces at its next synchronization.
      if (event_ != nullptr) cudaEventDestroy(event_);
      event_ = nullptr;
      // Not this thread's next kernel launch error (LastLaunchStatus).
      cudaGetLastError();
    }
    issued_.Signal();
  }

  void Wait() override {
    issued_.Wait();
    if (event_ != nullptr) cudaEventSynchronize(event_);
  }
  bool IsReady() override {
    return issued_.IsReady() && (event_ == nullptr || cudaEventQuery(event_) == cudaSuccess);
  }

 private:
  HostEvent issued_;
  cudaEvent_t event_ = nullptr;
};

// Cross-lane marks: events recorded on one of a slot's CUDA streams for
// another to wait on, recycled so that a pipelined slice creates none after
// warm-up. Used from the slot's stream thread only.
class MarkPool {
 public:
  ~MarkPool() {
    for (cudaEvent_t event : free_) cudaEventDestroy(event);
  }
  // A free event, or a new one: cudaEventCreateWithFlags's error.
  cudaError_t Take(cudaEvent_t* event) {
    if (free_.empty()) return cudaEventCreateWithFlags(event, cudaEventDisableTiming);
    *event = free_.back();
    free_.pop_back();
    return cudaSuccess;
  }
  void Give(cudaEvent_t event) { free_.push_back(event); }

 private:
  std::vector<cudaEvent_t> free_;
};

class CudaLaneMark : public Device::LaneMark {
 public:
  CudaLaneMark(std::shared_ptr<MarkPool> pool, cudaEvent_t event)
      : pool_(std::move(pool)), event_(event) {}
  ~CudaLaneMark() override { pool_->Give(event_); }
  cudaEvent_t event() const { return event_; }

 private:
  std::shared_ptr<MarkPool> pool_;
  cudaEvent_t event_;
};

// Lets every GPU read and write every other one's memory directly (peer
// copies for --merge-device cuda:N), once per process, where the hardware
// can. Where it cannot, cudaMemcpyDefault still copies, through the host.
void EnablePeerAccessOnce() {
  static absl::once_flag once;
  absl::call_once(once, [] {
    int count = 0;
    int previous = -1;
    if (cudaGetDeviceCount(&count) != cudaSuccess || cudaGetDevice(&previous) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    for (int from = 0; from < count; ++from) {
      if (cudaSetDevice(from) != cudaSuccess) continue;
      for (int to = 0; to < count; ++to) {
        int can = 0;
        if (to != from && cudaDeviceCanAccessPeer(&can, from, to) == cudaSuccess && can != 0) {
          cudaDeviceEnablePeerAccess(to, 0);  // Already enabled is fine.
        }
      }
    }
    cudaSetDevice(previous);
    cudaGetLastError();  // Not any thread's next launch error.
  });
}

// CreateCudaDevice's slot on one GPU. Its stream is a host thread (which
// made the GPU current) issuing work, in order, onto its own non-blocking
// CUDA stream, with its own cuDNN and cuBLAS handles bound to that stream;
// several slots on one GPU run concurrently. Two more streams carry the
// copies issued on the upload and download lanes, so those run on the copy
// engines beside the slot's kernels. Device memory
// comes from the slot's CachingAllocator (no cudaMalloc per request after
// warm-up). Host<->device copies go through two pinned staging buffers in
// chunks, so the CPU's copy of one chunk overlaps the DMA of the other.
//
// Every failure names the device and the call (cuda_call.h). A sticky CUDA
// error marks the slot unhealthy for good (Device::health). Fails to create
// when the GPU, stream or library handles cannot be set up.
class CudaDevice : public Device {
 public:
  CudaDevice(DeviceInfo info, const CudaSlotOptions& options)
      : info_(std::move(info)),
        name_(DeviceIdToString(info_.id)),
        memory_(std::make_shared<SlotMemory>(info_.id.ordinal, name_)),
        stream_([ordinal = info_.id.ordinal] { cudaSetDevice(ordinal); }) {
    context_.device = name_;
    context_.tf32 = options.tf32;
    context_.deterministic_convolutions = options.cudnn_deterministic;
    context_.max_workspace_bytes = options.max_workspace_bytes;
    records_work_ = options.graphs;
    context_.allocate = [this](size_t bytes) { return Allocate(bytes); };
  }

  ~CudaDevice() override {
    stream_.Synchronize();
    stream_.Enqueue([this] { ReleaseResources(); });
    stream_.Synchronize();
  }

  // Creates the CUDA stream, the library handles and the staging buffers on
  // the slot's thread.
  absl::Status Init() {
    absl::Status status;
    stream_.Enqueue([&] { status = CreateResources(); });
    stream_.Synchronize();
    return status;
  }

  const DeviceInfo& info() const override { return info_; }
  MemoryLocation memory_location() const override {
    return MemoryLocation{MemoryKind::kCuda, info_.id.ordinal};
  }

  absl::StatusOr<std::shared_ptr<Buffer>> Allocate(size_t bytes) override {
    // Within a recording on this thread (Record): a block of the cache would
    // go back to it after, and the graph write it on every replay; a
    // cudaMalloc would be refused by the capture, and the allocator's retry
    // drop its cache. The recording fails instead; other threads allocate.
    if (recording_thread_.load() == std::this_thread::get_id()) {
      return absl::FailedPreconditionError(
          absl::StrCat(name_, ": a kernel allocates memory while its run is recorded"));
    }
    allocations_.fetch_add(1, std::memory_order_relaxed);
    absl::StatusOr<void*> block = memory_->cache.Allocate(bytes);
    if (!block.ok()) return block.status();
    std::shared_ptr<SlotMemory> memory = memory_;
    return std::make_shared<Buffer>(*block, bytes, memory_location(),
                                    [memory](void* pointer) { memory->cache.Release(pointer); });
  }
  uint64_t allocation_count() const override {
    return allocations_.load(std::memory_order_relaxed);
  }

  void Enqueue(absl::AnyInvocable<void() &&> work) override { stream_.Enqueue(std::move(work)); }

  void EnqueueCopy(const void* src, MemoryLocation src_location, void* dst,
                   MemoryLocation dst_location, size_t bytes) override {
    stream_.Enqueue([=] {
      absl::Status status = CopyOnStream(src, src_location, dst, dst_location, bytes);
      if (!status.ok()) NoteStreamError(status);
    });
  }

  std::shared_ptr<Event> RecordEvent() override {
    auto event = std::make_shared<CudaEvent>();
    stream_.Enqueue([this, event] { event->Record(cuda_stream_); });
    return event;
  }

  absl::Status Synchronize() override {
    absl::Status status;
    stream_.Enqueue([&] { status = AwaitStream(); });
    stream_.Synchronize();
    absl::MutexLock lock(&mu_);
    if (status.ok() && !stream_error_.ok()) status = stream_error_;
    stream_error_ = absl::OkStatus();
    return status;
  }

  absl::Status CopyOnStream(const void* src, MemoryLocation src_location, void* dst,
                            MemoryLocation dst_location, size_t bytes) override {
    return CopyOn(cuda_stream_, src, src_location, dst, dst_location, bytes);
  }

  absl::Status CopyOnLane(Lane lane, const void* src, MemoryLocation src_location, void* dst,
                          MemoryLocation dst_location, size_t bytes) override {
    return CopyOn(LaneStream(lane), src, src_location, dst, dst_location, bytes);
  }

  absl::StatusOr<std::shared_ptr<LaneMark>> MarkLane(Lane lane) override {
    cudaEvent_t event = nullptr;
    REPLICAD_RETURN_IF_ERROR(Check(marks_->Take(&event), "cudaEventCreateWithFlags(lane mark)"));
    auto mark = std::make_shared<CudaLaneMark>(marks_, event);
    REPLICAD_RETURN_IF_ERROR(
        Check(cudaEventRecord(event, LaneStream(lane)), "cudaEventRecord(lane mark)"));
    return mark;
  }

  absl::Status WaitForMark(Lane lane, const LaneMark* mark) override {
    if (mark == nullptr) return absl::OkStatus();
    return Check(
        cudaStreamWaitEvent(LaneStream(lane), static_cast<const CudaLaneMark*>(mark)->event(), 0),
        "cudaStreamWaitEvent(lane mark)");
  }

  absl::Status AwaitStream() override {
    // Through a blocking-sync event, so the thread sleeps (see the staging
    // events); cudaStreamSynchronize would spin by default.
    for (cudaStream_t stream : {upload_stream_, download_stream_, cuda_stream_}) {
      REPLICAD_RETURN_IF_ERROR(
          Check(cudaEventRecord(stream_done_, stream), "cudaEventRecord(stream done)"));
      REPLICAD_RETURN_IF_ERROR(
          Check(cudaEventSynchronize(stream_done_), "cudaEventSynchronize(stream done)"));
    }
    return absl::OkStatus();
  }

  absl::Status health() const override {
    absl::MutexLock lock(&mu_);
    return health_;
  }

  bool records_work() const override { return records_work_; }
  absl::StatusOr<std::unique_ptr<RecordedWork>> Record(
      std::function<absl::Status()> issue) override {
    if (!records_work_) return Device::Record(std::move(issue));
    recording_thread_ = std::this_thread::get_id();
    absl::StatusOr<std::unique_ptr<RecordedWork>> recorded =
        RecordCudaGraph(cuda_stream_, name_, issue);
    recording_thread_ = std::thread::id();
    return recorded;
  }
  size_t memory_in_use_bytes() const override { return memory_->cache.bytes_in_use(); }
  size_t memory_cached_bytes() const override { return memory_->cache.bytes_cached(); }

  // Made by Init, before the slot is handed out, and fixed after.
  cudaStream_t cuda_stream() const { return cuda_stream_; }

  // Shape arithmetic of types or ops the CUDA kernels lack folds on the host.
  Device* host_folding_device() override { return HostFoldingDevice(); }

  absl::StatusOr<std::unique_ptr<Kernel>> MakeKernel(const KernelSpec& spec) override {
    // On the slot's thread: the handles are the slot's and not thread-safe,
    // and that thread has made the GPU current.
    absl::StatusOr<std::unique_ptr<Kernel>> kernel;
    stream_.Enqueue([&] { kernel = MakeCudaKernel(spec, context_); });
    stream_.Synchronize();
    return kernel;
  }

 private:
  cudaStream_t LaneStream(Lane lane) const {
    switch (lane) {
      case Lane::kUpload:
        return upload_stream_;
      case Lane::kDownload:
        return download_stream_;
      case Lane::kCompute:
        break;
    }
    return cuda_stream_;
  }

  absl::Status CopyOn(cudaStream_t stream, const void* src, MemoryLocation src_location, void* dst,
                      MemoryLocation dst_location, size_t bytes) {
    if (bytes == 0) return absl::OkStatus();
    const bool from_host = src_location.kind == MemoryKind::kHost;
    const bool to_host = dst_location.kind == MemoryKind::kHost;
    if (from_host && to_host) {
      std::memcpy(dst, src, bytes);
      return absl::OkStatus();
    }
    if (from_host) {
      return StagedUpload(stream, static_cast<const char*>(src), static_cast<char*>(dst), bytes);
    }
    if (to_host) {
      return StagedDownload(stream, static_cast<const char*>(src), static_cast<char*>(dst), bytes);
    }
    // Between GPUs (peer copy where peer access is on, else through the
    // host) or within this one: unified addressing tells the driver which.
    return Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream),
                 "cudaMemcpyAsync(device to device)");
  }

  absl::Status CreateResources() {
    REPLICAD_RETURN_IF_ERROR(Check(cudaSetDevice(info_.id.ordinal), "cudaSetDevice"));
    REPLICAD_RETURN_IF_ERROR(Check(cudaStreamCreateWithFlags(&cuda_stream_, cudaStreamNonBlocking),
                                   "cudaStreamCreateWithFlags"));
    context_.stream = cuda_stream_;
    for (cudaStream_t* lane : {&upload_stream_, &download_stream_}) {
      REPLICAD_RETURN_IF_ERROR(Check(cudaStreamCreateWithFlags(lane, cudaStreamNonBlocking),
                                     "cudaStreamCreateWithFlags(copy lane)"));
    }
    REPLICAD_CUDA_RETURN_IF_ERROR(name_, cudnnCreate(&context_.cudnn));
    REPLICAD_CUDA_RETURN_IF_ERROR(name_, cudnnSetStream(context_.cudnn, cuda_stream_));
    REPLICAD_ASSIGN_OR_RETURN(context_.cublas_library, OpenCublas());
    const CublasLibrary& cublas = *context_.cublas_library;
    REPLICAD_CUDA_RETURN_IF_ERROR(name_, cublas.Create(&context_.cublas));
    REPLICAD_CUDA_RETURN_IF_ERROR(name_, cublas.SetStream(context_.cublas, cuda_stream_));
    // cuBLAS would otherwise allocate its scratch space on first use inside
    // a request; the slot gives it its own once.
    REPLICAD_ASSIGN_OR_RETURN(cublas_workspace_, Allocate(kCublasWorkspaceBytes));
    REPLICAD_CUDA_RETURN_IF_ERROR(name_,
                                  cublas.SetWorkspace(context_.cublas, cublas_workspace_->data(),
                                                      cublas_workspace_->bytes()));
    REPLICAD_RETURN_IF_ERROR(Check(
        cudaEventCreateWithFlags(&stream_done_, cudaEventDisableTiming | cudaEventBlockingSync),
        "cudaEventCreateWithFlags"));
    for (int half = 0; half < 2; ++half) {
      REPLICAD_RETURN_IF_ERROR(
          Check(cudaHostAlloc(&staging_[half], kStagingChunkBytes, cudaHostAllocDefault),
                "cudaHostAlloc(staging buffer)"));
      REPLICAD_RETURN_IF_ERROR(
          // Blocking: a slot thread waiting for its DMA (and the compute
          // before it) sleeps instead of spinning a core other slots need.
          Check(cudaEventCreateWithFlags(&staging_free_[half],
                                         cudaEventDisableTiming | cudaEventBlockingSync),
                "cudaEventCreateWithFlags"));
    }
    return absl::OkStatus();
  }

  void ReleaseResources() {
    for (cudaStream_t stream : {upload_stream_, download_stream_, cuda_stream_}) {
      if (stream != nullptr) cudaStreamSynchronize(stream);
    }
    for (int half = 0; half < 2; ++half) {
      if (staging_[half] != nullptr) cudaFreeHost(staging_[half]);
      if (staging_free_[half] != nullptr) cudaEventDestroy(staging_free_[half]);
    }
    if (stream_done_ != nullptr) cudaEventDestroy(stream_done_);
    if (context_.cublas != nullptr) context_.cublas_library->Destroy(context_.cublas);
    cublas_workspace_.reset();
    if (context_.cudnn != nullptr) cudnnDestroy(context_.cudnn);
    for (cudaStream_t stream : {upload_stream_, download_stream_, cuda_stream_}) {
      if (stream != nullptr) cudaStreamDestroy(stream);
    }
  }

  // Pageable host memory cannot be read by the GPU's copy engines; a chunk
  // goes through a pinned half while the other half's DMA runs, so the
  // CPU's copy and the transfer overlap. The halves are shared by the
  // slot's streams: waiting for a half's event waits for its last user on
  // any of them. Returns once issued.
  absl::Status StagedUpload(cudaStream_t stream, const char* src, char* dst, size_t bytes) {
    for (size_t offset = 0; offset < bytes; offset += kStagingChunkBytes) {
      // Halves alternate across copies too, so consecutive small inputs
      // overlap like the chunks of a large one.
      const int half = next_half_;
      next_half_ = 1 - next_half_;
      const size_t n = std::min(kStagingChunkBytes, bytes - offset);
      REPLICAD_RETURN_IF_ERROR(
          Check(cudaEventSynchronize(staging_free_[half]), "cudaEventSynchronize(staging)"));
      std::memcpy(staging_[half], src + offset, n);
      REPLICAD_RETURN_IF_ERROR(
          Check(cudaMemcpyAsync(dst + offset, staging_[half], n, cudaMemcpyHostToDevice, stream),
                "cudaMemcpyAsync(host to device)"));
      REPLICAD_RETURN_IF_ERROR(
          Check(cudaEventRecord(staging_free_[half], stream), "cudaEventRecord(staging)"));
    }
    return absl::OkStatus();
  }

  // The reverse, with the next chunk's DMA issued before the CPU copies the
  // current one out; a half an upload on another stream may still be
  // reading is waited for on the GPU. Returns with `dst` written.
  absl::Status StagedDownload(cudaStream_t stream, const char* src, char* dst, size_t bytes) {
    auto issue = [&](size_t offset, int half) {
      const size_t n = std::min(kStagingChunkBytes, bytes - offset);
      REPLICAD_RETURN_IF_ERROR(Check(cudaStreamWaitEvent(stream, staging_free_[half], 0),
                                     "cudaStreamWaitEvent(staging)"));
      REPLICAD_RETURN_IF_ERROR(
          Check(cudaMemcpyAsync(staging_[half], src + offset, n, cudaMemcpyDeviceToHost, stream),
                "cudaMemcpyAsync(device to host)"));
      return Check(cudaEventRecord(staging_free_[half], stream), "cudaEventRecord(staging)");
    };
    REPLICAD_RETURN_IF_ERROR(issue(0, 0));
    for (size_t offset = 0, chunk = 0; offset < bytes; offset += kStagingChunkBytes, ++chunk) {
      const int half = static_cast<int>(chunk % 2);
      if (offset + kStagingChunkBytes < bytes) {
        REPLICAD_RETURN_IF_ERROR(issue(offset + kStagingChunkBytes, 1 - half));
      }
      REPLICAD_RETURN_IF_ERROR(
          Check(cudaEventSynchronize(staging_free_[half]), "cudaEventSynchronize(staging)"));
      std::memcpy(dst + offset, staging_[half], std::min(kStagingChunkBytes, bytes - offset));
    }
    return absl::OkStatus();
  }

  // The call's Status; a sticky error also takes the slot out for good.
  absl::Status Check(cudaError_t error, absl::string_view call) {
    absl::Status status = CudaCallStatus(error, name_, call);
    if (!status.ok() && IsStickyCudaError(error)) {
      absl::MutexLock lock(&mu_);
      if (health_.ok()) {
        health_ = absl::UnavailableError(absl::StrCat(
            status.message(), "; the GPU needs a restart of replicad, so slot is out of service"));
      }
    }
    return status;
  }

  void NoteStreamError(const absl::Status& status) {
    absl::MutexLock lock(&mu_);
    if (stream_error_.ok()) stream_error_ = status;
  }

  const DeviceInfo info_;
  const std::string name_;
  std::shared_ptr<SlotMemory> memory_;
  std::atomic<uint64_t> allocations_{0};
  bool records_work_ = false;  // CudaSlotOptions::graphs; fixed.
  // The thread recording this slot's work (Record), while it does.
  std::atomic<std::thread::id> recording_thread_{};
  mutable absl::Mutex mu_;
  absl::Status health_ ABSL_GUARDED_BY(mu_);
  absl::Status stream_error_ ABSL_GUARDED_BY(mu_);  // From EnqueueCopy, until Synchronize.
  // Used on the stream's host thread only.
  cudaStream_t cuda_stream_ = nullptr;  // The compute lane.
  cudaStream_t upload_stream_ = nullptr;
  cudaStream_t download_stream_ = nullptr;
  std::shared_ptr<MarkPool> marks_ = std::make_shared<MarkPool>();
  CudaKernelContext context_;
  std::shared_ptr<Buffer> cublas_workspace_;
  void* staging_[2] = {nullptr, nullptr};
  int next_half_ = 0;                  // The staging half StagedUpload fills next.
  cudaEvent_t stream_done_ = nullptr;  // AwaitStream's.
  cudaEvent_t staging_free_[2] = {nullptr, nullptr};
  HostStream stream_;  // Last: its thread stops before the members it uses go.
};

}  // namespace

cudaStream_t CudaSlotStream(Device& device) {
  auto* slot = dynamic_cast<CudaDevice*>(&device);
  return slot == nullptr ? nullptr : slot->cuda_stream();
}

absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(const DeviceInfo& info,
                                                         const CudaSlotOptions& options) {
  EnablePeerAccessOnce();
  auto device = std::make_unique<CudaDevice>(info, options);
  REPLICAD_RETURN_IF_ERROR(device->Init());
  return device;
}

}  // namespace replicad
