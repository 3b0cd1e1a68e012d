// ThreadSanitizer annotations for Debian's absl::Mutex, CondVar and Notification.
//
// Debian's libabsl_synchronization is not built with -fsanitize=thread, so its lock and
// unlock paths (atomics and futexes inside the library) carry none of Abseil's own TSan
// annotations: TSan would see no ordering between two critical sections of one absl::Mutex
// and report every ABSL_GUARDED_BY member as a race. Only REPLICAD_SANITIZE=thread builds
// link this library, ahead of Abseil, into every executable: it defines the public entry
// points, tells TSan what each one does (the annotations Abseil's mutex.cc makes when it is
// itself built with TSan) and calls the library's own definition found with
// dlsym(RTLD_NEXT). gRPC's own locks are absl::Mutex too and are covered through the PLT.
//
// Between a pre_ and post_ annotation TSan ignores memory accesses: a Condition evaluated
// inside the library (by the waiter or by the thread that unlocks) is not reported.
//
// ~Mutex is not annotated: gRPC destroys its mutexes once reference counts inside libgrpc
// (invisible to TSan) say the last user is gone, and a destroy annotation would report that
// as a race. Freeing a mutex's memory resets TSan's state for it anyway.

#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/config.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace {

#define REPLICAD_TSAN_STR2(x) #x
#define REPLICAD_TSAN_STR(x) REPLICAD_TSAN_STR2(x)

// "_ZN4absl" plus the inline namespace Abseil was configured with, as the Itanium ABI
// mangles it ("7debian3" on Debian 12).
std::string MangledAbsl() {
  std::string prefix = "_ZN4absl";
#if ABSL_OPTION_USE_INLINE_NAMESPACE
  const std::string ns = REPLICAD_TSAN_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  prefix += std::to_string(ns.size()) + ns;
#endif
  return prefix;
}

// The library's definition of `suffix` (the mangled name after the namespace). Aborts when it
// is missing: an unannotated lock would give false reports, a missing one a crash later.
template <typename Fn>
Fn Real(const char* suffix, bool is_const = false) {
  std::string name = MangledAbsl() + suffix;
  if (is_const) name.insert(3, "K");  // _ZN -> _ZNK for const member functions.
  void* symbol = dlsym(RTLD_NEXT, name.c_str());
  if (symbol == nullptr) {
    std::fprintf(stderr, "tsan_absl_annotations: %s not found: %s\n", name.c_str(), dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(symbol);
}

// Mutexes this thread holds in reader mode: Await and CondVar::Wait release and take the
// mutex again in the mode it is held in, and TSan must be told which.
thread_local const void* reader_held[16];
thread_local int reader_held_count = 0;

void NoteReaderLock(const void* mu) {
  if (reader_held_count < 16) reader_held[reader_held_count++] = mu;
}

void NoteReaderUnlock(const void* mu) {
  for (int i = reader_held_count - 1; i >= 0; --i) {
    if (reader_held[i] == mu) {
      reader_held[i] = reader_held[--reader_held_count];
      return;
    }
  }
}

unsigned HeldFlags(const void* mu) {
  for (int i = 0; i < reader_held_count; ++i) {
    if (reader_held[i] == mu) return __tsan_mutex_read_lock;
  }
  return 0;
}

// Set while this thread is inside an annotated Mutex or CondVar call. The library forwards
// some entry points to others through the PLT (AwaitWithTimeout to AwaitWithDeadline,
// CondVar::WaitWithTimeout to WaitWithDeadline): only the outermost call is annotated.
thread_local bool inside_call = false;

class Outermost {
 public:
  Outermost() : outermost_(!inside_call) { inside_call = true; }
  ~Outermost() {
    if (outermost_) inside_call = false;
  }
  bool outermost() const { return outermost_; }

 private:
  const bool outermost_;
};

// The mutex is released and taken again inside `wait` (Await, CondVar::Wait).
template <typename Wait>
auto ReleaseAndRetake(absl::Mutex* mu, Wait wait) {
  Outermost scope;
  if (!scope.outermost()) return wait();
  const unsigned flags = HeldFlags(mu);
  __tsan_mutex_pre_unlock(mu, flags);
  auto result = wait();
  __tsan_mutex_post_unlock(mu, flags);
  __tsan_mutex_pre_lock(mu, flags);
  __tsan_mutex_post_lock(mu, flags, 0);
  return result;
}

template <typename Lock>
auto Locking(absl::Mutex* mu, unsigned flags, Lock lock) {
  Outermost scope;
  if (!scope.outermost()) return lock();
  __tsan_mutex_pre_lock(mu, flags);
  auto result = lock();
  __tsan_mutex_post_lock(mu, flags, 0);
  if (flags & __tsan_mutex_read_lock) NoteReaderLock(mu);
  return result;
}

template <typename TryLock>
bool TryLocking(absl::Mutex* mu, unsigned flags, TryLock try_lock) {
  Outermost scope;
  if (!scope.outermost()) return try_lock();
  flags |= __tsan_mutex_try_lock;
  __tsan_mutex_pre_lock(mu, flags);
  const bool locked = try_lock();
  __tsan_mutex_post_lock(mu, locked ? flags : flags | __tsan_mutex_try_lock_failed, 0);
  if (locked && (flags & __tsan_mutex_read_lock)) NoteReaderLock(mu);
  return locked;
}

void Unlocking(absl::Mutex* mu, unsigned flags, void (*unlock)(absl::Mutex*)) {
  Outermost scope;
  if (!scope.outermost()) return unlock(mu);
  if (flags & __tsan_mutex_read_lock) NoteReaderUnlock(mu);
  __tsan_mutex_pre_unlock(mu, flags);
  unlock(mu);
  __tsan_mutex_post_unlock(mu, flags);
}

// The address HasBeenNotified() loads with acquire in our (instrumented) code.
void* NotifiedFlag(const absl::Notification* n) {
  // Notification is {Mutex mutex_; std::atomic<bool> notified_yet_;}.
  static_assert(sizeof(absl::Notification) >= sizeof(absl::Mutex) + sizeof(std::atomic<bool>));
  return const_cast<char*>(reinterpret_cast<const char*>(n)) + sizeof(absl::Mutex);
}

using Cond = const absl::Condition&;

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex4LockEv");
  Locking(this, 0, [&] { return real(this), 0; });
}

void Mutex::ReaderLock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex10ReaderLockEv");
  Locking(this, __tsan_mutex_read_lock, [&] { return real(this), 0; });
}

bool Mutex::TryLock() {
  static auto real = Real<bool (*)(Mutex*)>("5Mutex7TryLockEv");
  return TryLocking(this, 0, [&] { return real(this); });
}

bool Mutex::ReaderTryLock() {
  static auto real = Real<bool (*)(Mutex*)>("5Mutex13ReaderTryLockEv");
  return TryLocking(this, __tsan_mutex_read_lock, [&] { return real(this); });
}

void Mutex::Unlock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex6UnlockEv");
  Unlocking(this, 0, real);
}

void Mutex::ReaderUnlock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex12ReaderUnlockEv");
  Unlocking(this, __tsan_mutex_read_lock, real);
}

void Mutex::LockWhen(Cond cond) {
  static auto real = Real<void (*)(Mutex*, Cond)>("5Mutex8LockWhenERKNS0_9ConditionE");
  Locking(this, 0, [&] { return real(this, cond), 0; });
}

void Mutex::ReaderLockWhen(Cond cond) {
  static auto real = Real<void (*)(Mutex*, Cond)>("5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  Locking(this, __tsan_mutex_read_lock, [&] { return real(this, cond), 0; });
}

// The *WithTimeout/*WithDeadline forms hold the mutex on return whatever they answer.
bool Mutex::LockWhenWithTimeout(Cond cond, Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, Cond, Duration)>(
      "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return Locking(this, 0, [&] { return real(this, cond, timeout); });
}

bool Mutex::LockWhenWithDeadline(Cond cond, Time deadline) {
  static auto real = Real<bool (*)(Mutex*, Cond, Time)>(
      "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return Locking(this, 0, [&] { return real(this, cond, deadline); });
}

bool Mutex::ReaderLockWhenWithTimeout(Cond cond, Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, Cond, Duration)>(
      "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return Locking(this, __tsan_mutex_read_lock, [&] { return real(this, cond, timeout); });
}

bool Mutex::ReaderLockWhenWithDeadline(Cond cond, Time deadline) {
  static auto real = Real<bool (*)(Mutex*, Cond, Time)>(
      "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return Locking(this, __tsan_mutex_read_lock, [&] { return real(this, cond, deadline); });
}

void Mutex::Await(Cond cond) {
  static auto real = Real<void (*)(Mutex*, Cond)>("5Mutex5AwaitERKNS0_9ConditionE");
  ReleaseAndRetake(this, [&] { return real(this, cond), 0; });
}

bool Mutex::AwaitWithTimeout(Cond cond, Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, Cond, Duration)>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return ReleaseAndRetake(this, [&] { return real(this, cond, timeout); });
}

bool Mutex::AwaitWithDeadline(Cond cond, Time deadline) {
  static auto real =
      Real<bool (*)(Mutex*, Cond, Time)>("5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return ReleaseAndRetake(this, [&] { return real(this, cond, deadline); });
}

void CondVar::Wait(Mutex* mu) {
  static auto real = Real<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  ReleaseAndRetake(mu, [&] { return real(this, mu), 0; });
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, Duration)>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  return ReleaseAndRetake(mu, [&] { return real(this, mu, timeout); });
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static auto real =
      Real<bool (*)(CondVar*, Mutex*, Time)>("7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  return ReleaseAndRetake(mu, [&] { return real(this, mu, deadline); });
}

// Notify's store and the fast paths of the waits (which return without taking mutex_ once
// notified) are inside the library; HasBeenNotified() is inline, in instrumented code.
void Notification::Notify() {
  static auto real = Real<void (*)(Notification*)>("12Notification6NotifyEv");
  __tsan_release(NotifiedFlag(this));
  real(this);
}

void Notification::WaitForNotification() const {
  static auto real = Real<void (*)(const Notification*)>("12Notification19WaitForNotificationEv",
                                                         /*is_const=*/true);
  real(this);
  __tsan_acquire(NotifiedFlag(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  static auto real = Real<bool (*)(const Notification*, Duration)>(
      "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE", /*is_const=*/true);
  const bool notified = real(this, timeout);
  if (notified) __tsan_acquire(NotifiedFlag(this));
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  static auto real = Real<bool (*)(const Notification*, Time)>(
      "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE", /*is_const=*/true);
  const bool notified = real(this, deadline);
  if (notified) __tsan_acquire(NotifiedFlag(this));
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
