#include "server/memory_trap.h"

#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace replicad {
namespace {

// One trapped range. The handler reads the table without a lock (it may not
// take one), so every field is atomic and a slot is published only once its
// range is written: `state` goes kFree -> kClaimed (by Add's compare-exchange)
// -> kActive (range written), and back to kFree in the destructor.
enum : int { kFree = 0, kClaimed = 1, kActive = 2 };
struct Slot {
  std::atomic<int> state{kFree};
  std::atomic<uintptr_t> start{0};
  std::atomic<size_t> bytes{0};
  std::atomic<bool> fired{false};
};
static_assert(std::atomic<uintptr_t>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "the SIGBUS handler reads the table lock-free");

Slot g_slots[MemoryTrap::kSlots];
struct sigaction g_previous;  // Written once, before the handler can run.

void OnSigbus(int signal, siginfo_t* info, void* context) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& slot : g_slots) {
    if (slot.state.load(std::memory_order_acquire) != kActive) continue;
    const uintptr_t start = slot.start.load(std::memory_order_relaxed);
    const size_t bytes = slot.bytes.load(std::memory_order_relaxed);
    if (address < start || address - start >= bytes) continue;
    // mmap is not on POSIX's async-signal-safe list, but on Linux it is a
    // plain system call (PulseAudio relies on the same). Replacing the whole
    // range keeps every later access safe, not only this page.
    void* zeros = mmap(reinterpret_cast<void*>(start), bytes, PROT_READ | PROT_WRITE,
                       MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (zeros != MAP_FAILED) {
      slot.fired.store(true, std::memory_order_release);
      return;  // The faulting access retries on the zero pages.
    }
    break;  // Cannot repair it: fall through to the previous handler.
  }
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(signal, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(signal);
    return;
  }
  // Default (or ignored, which for a fault would loop forever): put the
  // default back and return, so the access faults again and kills the
  // process as it would have without us.
  struct sigaction default_action = {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(SIGBUS, &default_action, nullptr);
}

void InstallOnce() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction action = {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &g_previous);
  });
}

}  // namespace

std::unique_ptr<MemoryTrap> MemoryTrap::Add(void* start, size_t bytes) {
  InstallOnce();
  for (size_t i = 0; i < kSlots; ++i) {
    Slot& slot = g_slots[i];
    int expected = kFree;
    if (!slot.state.compare_exchange_strong(expected, kClaimed, std::memory_order_acq_rel)) {
      continue;
    }
    slot.start.store(reinterpret_cast<uintptr_t>(start), std::memory_order_relaxed);
    slot.bytes.store(bytes, std::memory_order_relaxed);
    slot.fired.store(false, std::memory_order_relaxed);
    slot.state.store(kActive, std::memory_order_release);
    return std::unique_ptr<MemoryTrap>(new MemoryTrap(i));
  }
  return nullptr;
}

MemoryTrap::~MemoryTrap() {
  // No access to the range can be in flight here: its owner (the last view
  // of a region) is going away, so the handler cannot be repairing it.
  g_slots[slot_].state.store(kFree, std::memory_order_release);
}

bool MemoryTrap::fired() const { return g_slots[slot_].fired.load(std::memory_order_acquire); }

}  // namespace replicad
