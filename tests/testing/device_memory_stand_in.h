#ifndef REPLICAD_TESTS_TESTING_DEVICE_MEMORY_STAND_IN_H_
#define REPLICAD_TESTS_TESTING_DEVICE_MEMORY_STAND_IN_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/device/device.h"

namespace replicad::testing {

// A stand-in for a GPU slot on machines without one: `cpu_slot` (its memory
// and kernels) behind a Device that reports its memory as device memory
// (MemoryKind::kCuda, `ordinal`), so that the paths for memory the host does
// not read (staged copies, chunk pipelines, merging on a device) run with
// CPU kernels. Its upload and download lanes are threads of their own, as a
// GPU's copy engines are streams of their own: a missing lane mark shows as
// wrong results, not as a hang. With `memory_limit_bytes` > 0 it holds at
// most that much at a time and fails beyond with ResourceExhausted, as a
// full GPU does. Thread-safe like any Device.
//
// With `fault`, it fails as a GPU with a sticky error does: once
// fault->copies_before_failure copies have gone through (-1: never), every
// copy fails with Internal naming the device, Synchronize and AwaitStream
// return that error, and health() reports it for good.
struct InjectedFault {
  std::atomic<int64_t> copies_before_failure{-1};
  std::atomic<bool> failed{false};  // Set once the first copy failed.
};
// With `recording`, it records work as a CUDA slot with graphs does
// (Device::Record): Record keeps the issued work, which each Replay runs
// again; with `refuse`, Record fails FailedPrecondition, as a capture that
// meets a host wait does. Both are counted.
struct RecordingStandIn {
  std::atomic<bool> refuse{false};
  std::atomic<int> recorded{0};
  std::atomic<int> refused{0};
  std::atomic<int> replayed{0};
};
std::unique_ptr<Device> MakeDeviceMemoryStandIn(
    std::unique_ptr<Device> cpu_slot, int ordinal, size_t memory_limit_bytes = 0,
    std::shared_ptr<InjectedFault> fault = nullptr,
    std::shared_ptr<RecordingStandIn> recording = nullptr);

}  // namespace replicad::testing

#endif  // REPLICAD_TESTS_TESTING_DEVICE_MEMORY_STAND_IN_H_
