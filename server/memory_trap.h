#ifndef REPLICAD_SERVER_MEMORY_TRAP_H_
#define REPLICAD_SERVER_MEMORY_TRAP_H_

#include <cstddef>
#include <memory>

namespace replicad {

// Keeps the daemon alive when memory someone else owns goes away under it.
// A client's shared memory object is mapped into the daemon (see
// SharedMemoryView), and the client may shrink it at any time; touching a
// mapped page past the object's new end raises SIGBUS, which would kill the
// daemon. A trapped range turns that fault into a flag: the SIGBUS handler
// maps anonymous zero pages over the whole range, marks it fired and returns,
// so the access retries on them and the request is refused afterwards
// (PulseAudio's pa_memtrap does the same for its clients' memory).
//
// The handler is installed once, when the first range is trapped, so a
// process that never maps a client's memory keeps its signal handling as it
// was. A SIGBUS at any other address goes to the handler that was there
// before (AddressSanitizer's, say); where that was the default, the default
// is restored and the fault repeats, so a real fault still kills as before.
class MemoryTrap {
 public:
  // Traps [start, start + bytes), which must be a whole mapping the caller
  // owns (its start page aligned). Null when every slot of the fixed table is
  // taken (the handler may not allocate, so the table cannot grow).
  static std::unique_ptr<MemoryTrap> Add(void* start, size_t bytes);

  // Stops trapping the range; call it before the range is unmapped, since an
  // entry left behind would let the handler map over whatever comes next.
  ~MemoryTrap();
  MemoryTrap(const MemoryTrap&) = delete;
  MemoryTrap& operator=(const MemoryTrap&) = delete;

  // Whether a fault in the range fired: its bytes are now zeros, not the
  // client's, and stay so (the range never maps the object again).
  bool fired() const;

  // Ranges that can be trapped at once.
  static constexpr size_t kSlots = 4096;

 private:
  explicit MemoryTrap(size_t slot) : slot_(slot) {}
  const size_t slot_;
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_MEMORY_TRAP_H_
