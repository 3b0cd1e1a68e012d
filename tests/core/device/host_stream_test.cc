#include "core/device/host_stream.h"

#include <atomic>
#include <thread>
#include <vector>

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

}  // namespace
}  // namespace replicad
