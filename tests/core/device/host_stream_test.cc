#include "core/device/host_stream.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

TEST(HostStreamTest, RunsWorkInSubmissionOrderOnItsOwnThread) {
  std::thread::id stream_thread;
  HostStream stream([&] { stream_thread = std::this_thread::get_id(); });
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  for (int i = 0; i < 100; ++i) {
    stream.Enqueue([&, i] {
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
    });
  }
  stream.Synchronize();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(order[i], i);
    EXPECT_EQ(threads[i], stream_thread);
  }
  EXPECT_NE(stream_thread, std::this_thread::get_id());
}

TEST(HostStreamTest, EventBecomesReadyAfterEarlierWork) {
  HostStream stream(nullptr);
  std::atomic<bool> release{false};
  std::atomic<bool> ran{false};
  stream.Enqueue([&] {
    while (!release.load()) std::this_thread::yield();
    ran = true;
  });
  std::shared_ptr<Event> event = stream.RecordEvent();
  EXPECT_FALSE(event->IsReady());
  release = true;
  event->Wait();
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(event->IsReady());
}

TEST(HostStreamTest, DestructorDrainsQueuedWork) {
  std::atomic<int> count{0};
  {
    HostStream stream(nullptr);
    for (int i = 0; i < 50; ++i) stream.Enqueue([&] { ++count; });
  }
  EXPECT_EQ(count.load(), 50);
}

TEST(HostStreamTest, AroundLongSleepWrapsEachLongSleepOnTheStreamThread) {
  absl::Mutex mu;
  int sleeps = 0;
  bool inside = false;
  std::thread::id stream_thread, sleeping_thread;
  {
    HostStream stream([&] { stream_thread = std::this_thread::get_id(); },
                      [&](absl::FunctionRef<void()> sleep) {
                        {
                          absl::MutexLock lock(&mu);
                          ++sleeps;
                          inside = true;
                          sleeping_thread = std::this_thread::get_id();
                        }
                        sleep();
                        absl::MutexLock lock(&mu);
                        inside = false;
                      });
    // With nothing queued for kLongIdle the stream sleeps through the wrapper...
    {
      absl::MutexLock lock(&mu);
      ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&inside), absl::Seconds(30)));
      EXPECT_EQ(sleeps, 1);
      EXPECT_EQ(sleeping_thread, stream_thread);
    }
    // ...its `sleep` returns when work comes, and the work runs after it.
    bool inside_during_work = true;
    stream.Enqueue([&] {
      absl::MutexLock lock(&mu);
      inside_during_work = inside;
    });
    stream.Synchronize();
    EXPECT_FALSE(inside_during_work);
    // Idle again: a second sleep, which the destructor ends.
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(
                                        +[](int* n) { return *n >= 2; }, &sleeps),
                                    absl::Seconds(30)));
  }
  absl::MutexLock lock(&mu);
  EXPECT_FALSE(inside);
}

}  // namespace
}  // namespace replicad
