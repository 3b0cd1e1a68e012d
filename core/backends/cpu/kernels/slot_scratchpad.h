#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_SLOT_SCRATCHPAD_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_SLOT_SCRATCHPAD_H_

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace replicad {

// Internal to the CPU kernels: the scratch memory of one CPU slot's oneDNN
// primitives. A slot runs one primitive at a time, so every primitive of
// every plan of the slot shares one buffer sized for the largest live one,
// instead of each holding its own (Winograd convolutions need tens of MB
// each, and hundreds for a batch of thousands of rows). Once the plans that
// needed the most are gone (evicted from the plan cache), the buffer shrinks
// to what the remaining ones need, so one huge request does not hold its
// scratch memory for the daemon's lifetime.
//
// The buffer is only touched on the slot's stream thread, where CpuDevice
// makes kernels and runs them, so it never moves under a running primitive;
// claims may be dropped on any thread (a plan freed elsewhere).
class SlotScratchpad {
 public:
  // A primitive's need, while it lives.
  class Claim {
   public:
    Claim() = default;
    Claim(Claim&& other) noexcept;
    Claim& operator=(Claim&& other) noexcept;
    ~Claim();

   private:
    friend class SlotScratchpad;
    struct Needs;
    Claim(std::shared_ptr<Needs> needs, size_t bytes) : needs_(std::move(needs)), bytes_(bytes) {}
    std::shared_ptr<Needs> needs_;
    size_t bytes_ = 0;
  };

  SlotScratchpad();
  // Makes data() at least `bytes` long (64-byte aligned) for as long as the
  // claim lives. Invalidates earlier data() pointers; primitives read data()
  // on every execution. Stream thread only.
  Claim Reserve(size_t bytes);
  // Shrinks the buffer to the largest live claim when claims were dropped
  // since the last call. Stream thread only, between primitives.
  void Trim();
  void* data() const { return buffer_.get(); }
  size_t size() const { return size_; }

 private:
  void Resize(size_t bytes);

  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::shared_ptr<Claim::Needs> needs_;
  std::unique_ptr<void, Free> buffer_;
  size_t size_ = 0;
};

// What the live claims need: a count per size.
struct SlotScratchpad::Claim::Needs {
  absl::Mutex mu;
  std::map<size_t, int> sizes ABSL_GUARDED_BY(mu);
  std::atomic<bool> dropped{false};
};

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_SLOT_SCRATCHPAD_H_
