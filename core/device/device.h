#ifndef REPLICAD_CORE_DEVICE_DEVICE_H_
#define REPLICAD_CORE_DEVICE_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "core/device/device_id.h"
#include "core/device/kernel.h"
#include "core/tensor/buffer.h"

namespace replicad {

// Completion marker recorded on a device stream. Thread-safe.
class Event {
 public:
  virtual ~Event() = default;
  // Blocks the calling host thread until the stream reached the event.
  virtual void Wait() = 0;
  virtual bool IsReady() = 0;
};

// One execution slot: the memory of a physical device plus one in-order stream
// on it. A physical device carries as many Device objects as it has slots
// (each with its own stream). Every method is thread-safe; work submitted with
// Enqueue/EnqueueCopy runs in submission order, one item at a time.
class Device {
 public:
  virtual ~Device() = default;

  virtual const DeviceInfo& info() const = 0;
  // Where this device's buffers live.
  virtual MemoryLocation memory_location() const = 0;

  // Device memory; ResourceExhausted naming the device and size when it runs out.
  virtual absl::StatusOr<std::shared_ptr<Buffer>> Allocate(size_t bytes) = 0;
  // Allocations made so far: tests prove with it that the hot path allocates nothing.
  virtual uint64_t allocation_count() const = 0;

  // Runs `work` on the stream's host thread after everything submitted before.
  virtual void Enqueue(absl::AnyInvocable<void() &&> work) = 0;
  // Copies `bytes` in stream order; either side may be host or this device.
  virtual void EnqueueCopy(const void* src, MemoryLocation src_location, void* dst,
                           MemoryLocation dst_location, size_t bytes) = 0;
  // An event that becomes ready once everything submitted before it has run.
  virtual std::shared_ptr<Event> RecordEvent() = 0;
  // Blocks until the stream is idle; returns the first stream error, if any.
  virtual absl::Status Synchronize() = 0;

  // For work running on the stream (inside Enqueue), where Enqueue'd copies
  // would only run after it: copies in stream order and returns once the
  // copy is issued. A device copy may still be running; AwaitStream waits
  // for it. Errors name the device.
  virtual absl::Status CopyOnStream(const void* src, MemoryLocation src_location, void* dst,
                                    MemoryLocation dst_location, size_t bytes) = 0;
  // For work running on the stream: blocks until everything issued from it
  // (kernels, copies, on every lane) has finished; the first device error,
  // if any. Host devices have nothing in flight and return OK at once.
  virtual absl::Status AwaitStream() = 0;

  // Lanes: a GPU slot's copies can run on the GPU's copy engines beside its
  // compute, so a slot pipelines a slice (uploading chunk k+1 while chunk k
  // computes and chunk k-1 downloads). Each lane is in-order; lanes are
  // ordered against each other only through marks. Kernels run on kCompute.
  // For work running on the stream, like CopyOnStream. A device without
  // separate engines (host slots) treats every lane as its one stream, where
  // copies complete before the call returns and marks are no-ops.
  enum class Lane { kCompute, kUpload, kDownload };
  // A point in one lane's issue order; opaque. Released on the stream thread.
  class LaneMark {
   public:
    virtual ~LaneMark() = default;
  };
  // CopyOnStream, issued on `lane`. A copy into pageable host memory has
  // landed when it returns; other copies may still run until AwaitStream.
  virtual absl::Status CopyOnLane(Lane lane, const void* src, MemoryLocation src_location,
                                  void* dst, MemoryLocation dst_location, size_t bytes) {
    return CopyOnStream(src, src_location, dst, dst_location, bytes);
  }
  // Everything issued on `lane` so far; nullptr where lanes are one stream.
  virtual absl::StatusOr<std::shared_ptr<LaneMark>> MarkLane(Lane lane) { return nullptr; }
  // Work issued on `lane` from now on starts after `mark` (nullptr: at once).
  virtual absl::Status WaitForMark(Lane lane, const LaneMark* mark) { return absl::OkStatus(); }

  // OK while the slot can run work. After a fault that leaves the device
  // unusable until the process restarts (a CUDA sticky error: illegal
  // address, ECC), that error, for good: the slot leaves the split and
  // readiness.
  virtual absl::Status health() const { return absl::OkStatus(); }
  // Bytes of device memory this slot holds for tensors, and of that, bytes
  // freed but kept for reuse (a caching allocator). Host slots report 0.
  virtual size_t memory_in_use_bytes() const { return 0; }
  virtual size_t memory_cached_bytes() const { return 0; }

  // Work recorded once and launched again as one unit (a CUDA graph): the
  // same kernels on the same pointers, without the host issuing each.
  class RecordedWork {
   public:
    virtual ~RecordedWork() = default;
    // Enqueues the recorded work on the slot's stream (compute lane). Call
    // on the stream thread.
    virtual absl::Status Replay() = 0;
  };
  // Whether Record may be asked (CUDA slots with graphs on, --cuda-graphs).
  virtual bool records_work() const { return false; }
  // Records what `issue` enqueues on the slot's stream (the compute lane)
  // without running it: `issue` runs once, on this thread (a stand-in may
  // keep it). FailedPrecondition when the work cannot be recorded (a kernel
  // waits for the device, allocates, or copies from pageable host memory):
  // nothing was enqueued, and the caller runs the work as ever; Unimplemented
  // where records_work() is false. Call on the stream thread, with nothing
  // of this thread's queued on other streams that the work must wait for.
  virtual absl::StatusOr<std::unique_ptr<RecordedWork>> Record(
      std::function<absl::Status()> issue) {
    return absl::UnimplementedError("this device does not record work");
  }

  // Builds the kernel for one node with concrete types (KernelSpec.outputs
  // filled). Unimplemented naming the op when this backend lacks it. Not to
  // be called on the device's stream thread (a backend may build there).
  virtual absl::StatusOr<std::unique_ptr<Kernel>> MakeKernel(const KernelSpec& spec) = 0;

  // A device on the host on which an execution plan computes, once when it
  // is made, a node whose inputs are all known then and for which this
  // device has no kernel (MakeKernel says Unimplemented): the shape
  // arithmetic of transformers (comparisons, Where, Range on int64, bool and
  // int32) that a GPU backend need not compute. The result is uploaded as a
  // constant. Plans also run their data-dependent part there (execution_
  // plan.h), host slots' plans included: its kernels are made while the
  // slot's own thread runs the plan. nullptr (the default): no such device.
  virtual Device* host_folding_device() { return nullptr; }
};

}  // namespace replicad

#endif  // REPLICAD_CORE_DEVICE_DEVICE_H_
