#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_SLOT_SCRATCHPAD_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_SLOT_SCRATCHPAD_H_

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace replicad {

// Internal to the CPU kernels: the scratch memory of one CPU slot's oneDNN
// primitives. A slot runs one primitive at a time, so every primitive of
// every plan of the slot shares one buffer sized for the largest, instead of
// each holding its own (Winograd convolutions need tens of MB each).
//
// Not thread-safe, by design: it is only touched on the slot's stream thread,
// where CpuDevice makes kernels and runs them, so Reserve can never move the
// buffer under a running primitive.
class SlotScratchpad {
 public:
  // Makes data() at least `bytes` long (64-byte aligned). Invalidates earlier
  // data() pointers; primitives read data() on every execution.
  void Reserve(size_t bytes);
  void* data() const { return buffer_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> buffer_;
  size_t size_ = 0;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_SLOT_SCRATCHPAD_H_
