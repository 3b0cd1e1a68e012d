// SharedMemoryRegistry against real POSIX shared memory objects made here with
// shm_open/ftruncate: bytes written through a view are read back through a
// second, independent mapping (and the other way), every error reads as
// Triton's does, an unregistered region stays mapped while a view holds it, a
// client that shrinks its object under a mapped view trips the trap instead of
// killing the process, and nothing leaks (mappings in /proc/self/maps,
// descriptors in /proc/self/fd).
//
// Refusals covered: bad keys, sizes past the object, duplicates, the region limit; also concurrent
// register, find and unregister, and a SIGBUS elsewhere than in a region still kills the process.
#include "server/shared_memory_registry.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// A shared memory object as a client makes one; unlinked when destroyed.
class ShmObject {
 public:
  ShmObject(const std::string& tag, size_t bytes, mode_t mode = 0600)
      : key_("/replicad_shm_test_" + std::to_string(getpid()) + "_" + tag), bytes_(bytes) {
    shm_unlink(key_.c_str());
    int fd = shm_open(key_.c_str(), O_RDWR | O_CREAT | O_EXCL, mode);
    EXPECT_GE(fd, 0) << key_ << ": " << std::strerror(errno);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    // A second mapping, independent of the registry's, to check its bytes.
    void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT_NE(map, MAP_FAILED);
    bytes_at_ = static_cast<unsigned char*>(map);
    close(fd);
  }
  ~ShmObject() {
    munmap(bytes_at_, bytes_);
    shm_unlink(key_.c_str());
  }
  ShmObject(const ShmObject&) = delete;
  ShmObject& operator=(const ShmObject&) = delete;

  const std::string& key() const { return key_; }
  std::string path() const { return "/dev/shm" + key_; }
  unsigned char* bytes() const { return bytes_at_; }

 private:
  std::string key_;
  size_t bytes_;
  unsigned char* bytes_at_ = nullptr;
};

// Lines of /proc/self/maps that map `path`: the registry's mappings.
int MappingsOf(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find(path) != std::string::npos) ++count;
  }
  return count;
}

// absl's string_view is not std's here, and gMock's string matchers want one.
std::string Message(const absl::Status& status) { return std::string(status.message()); }

int OpenDescriptors() {
  int count = 0;
  DIR* dir = opendir("/proc/self/fd");
  while (readdir(dir) != nullptr) ++count;
  closedir(dir);
  return count;
}

TEST(SharedMemoryRegistryTest, ViewWritesAndReadsTheClientsBytesAtAnUnalignedOffset) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  ShmObject object("rw", 3 * page + 100);
  SharedMemoryRegistry registry;
  const uint64_t region_offset = page + 7;  // Not page aligned.
  ASSERT_TRUE(registry.Register("region", object.key(), region_offset, 2 * page).ok());
  // ShmObject's own mapping and the region's, made once at Register.
  EXPECT_EQ(MappingsOf(object.path()), 2);

  absl::StatusOr<SharedMemoryView> view = registry.Find("region", 10, 100, "inputs[0] 'IN'");
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_EQ(view->bytes(), 100u);
  char bytes[100];
  for (int i = 0; i < 100; ++i) bytes[i] = static_cast<char>(i + 1);
  ASSERT_TRUE(view->Write(bytes, 100).ok());
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(object.bytes()[region_offset + 10 + i], i + 1) << i;
  }
  object.bytes()[region_offset + 10 + 50] = 0xEE;
  ASSERT_TRUE(view->Read(bytes).ok());
  EXPECT_EQ(static_cast<unsigned char>(bytes[50]), 0xEE);
  EXPECT_EQ(bytes[49], 50);
  // The same bytes in place, through the daemon's mapping, both ways.
  EXPECT_EQ(static_cast<unsigned char>(view->data()[50]), 0xEE);
  view->data()[51] = 'm';
  EXPECT_EQ(object.bytes()[region_offset + 10 + 51], 'm');
  EXPECT_TRUE(view->CheckIntact().ok());

  // The region's last byte, and an empty view at its start.
  absl::StatusOr<SharedMemoryView> last = registry.Find("region", 2 * page - 1, 1, "outputs[0]");
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_TRUE(last->Write("z", 1).ok());
  EXPECT_EQ(object.bytes()[region_offset + 2 * page - 1], 'z');
  absl::StatusOr<SharedMemoryView> empty = registry.Find("region", 0, 0, "inputs[1]");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->bytes(), 0u);
}

TEST(SharedMemoryRegistryTest, KeyWithoutLeadingSlashOpensTheSameObjectAsGlibcAndTritonDo) {
  ShmObject object("noslash", 64);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("r", object.key().substr(1), 0, 64).ok());
  absl::StatusOr<SharedMemoryView> view = registry.Find("r", 0, 64, "inputs[0]");
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_TRUE(view->Write("q", 1).ok());
  EXPECT_EQ(object.bytes()[0], 'q');
  absl::StatusOr<std::vector<SharedMemoryRegistry::RegionStatus>> status = registry.Status("r");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ((*status)[0].key, object.key().substr(1));  // As the client registered it.
}

TEST(SharedMemoryRegistryTest, StatusListsEveryRegionByNameOrOne) {
  ShmObject object("status", 256);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("b", object.key(), 16, 32).ok());
  ASSERT_TRUE(registry.Register("c", object.key(), 0, 256).ok());
  ASSERT_TRUE(registry.Register("a", object.key(), 255, 1).ok());

  absl::StatusOr<std::vector<SharedMemoryRegistry::RegionStatus>> all = registry.Status("");
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].name, "a");
  EXPECT_EQ((*all)[0].offset, 255u);
  EXPECT_EQ((*all)[0].byte_size, 1u);
  EXPECT_EQ((*all)[1].name, "b");
  EXPECT_EQ((*all)[1].key, object.key());
  EXPECT_EQ((*all)[1].offset, 16u);
  EXPECT_EQ((*all)[1].byte_size, 32u);
  EXPECT_EQ((*all)[2].name, "c");

  absl::StatusOr<std::vector<SharedMemoryRegistry::RegionStatus>> one = registry.Status("b");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].name, "b");

  absl::StatusOr<std::vector<SharedMemoryRegistry::RegionStatus>> none = registry.Status("zz");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Message(none.status()), "Unable to find system shared memory region: 'zz'");

  SharedMemoryRegistry empty;
  absl::StatusOr<std::vector<SharedMemoryRegistry::RegionStatus>> nothing = empty.Status("");
  ASSERT_TRUE(nothing.ok());
  EXPECT_TRUE(nothing->empty());
}

TEST(SharedMemoryRegistryTest, RegisterRejectsBadNamesAndKeys) {
  SharedMemoryRegistry registry;
  absl::Status status = registry.Register("", "/x", 0, 8);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("name is empty"));

  const std::vector<std::string> bad_keys = {"",
                                             "/",
                                             "//",
                                             "/.",
                                             "/..",
                                             "/a/b",
                                             "a/b",
                                             std::string("/a\0b", 4),
                                             "/" + std::string(300, 'k')};
  for (const std::string& key : bad_keys) {
    status = registry.Register("r", key, 0, 8);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << key << ": " << status;
    EXPECT_THAT(Message(status), StartsWith("failed to register shared memory region 'r': "
                                            "invalid args: "))
        << key;
    EXPECT_THAT(Message(status), HasSubstr("key")) << key;
  }
  EXPECT_THAT(Message(registry.Register("r", "/a/b", 0, 8)), HasSubstr("'/a/b'"));
  EXPECT_THAT(Message(registry.Register("r", "/" + std::string(300, 'k'), 0, 8)),
              HasSubstr("300 characters long, expected at most 255"));

  const std::string missing = "/replicad_shm_test_" + std::to_string(getpid()) + "_missing";
  status = registry.Register("r", missing, 0, 8);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(Message(status), HasSubstr("unable to open shared memory key '" + missing + "'"));
  EXPECT_THAT(Message(status), HasSubstr("No such file or directory"));

  EXPECT_TRUE(registry.Status("").value().empty());
}

TEST(SharedMemoryRegistryTest, RegisterRejectsRangesOutsideTheObjectAsTritonDoes) {
  ShmObject object("bounds", 64);
  SharedMemoryRegistry registry;
  // Triton's own out-of-bound cases (qa/L0_shared_memory), then overflow.
  struct Case {
    uint64_t offset, byte_size;
  };
  for (const Case& c : {Case{0, 65}, Case{1, 64}, Case{64, 1}, Case{65, 0}, Case{0, 0},
                        Case{kMax, 2}, Case{2, kMax}, Case{kMax, kMax}}) {
    absl::Status status = registry.Register("r", object.key(), c.offset, c.byte_size);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.offset << " " << c.byte_size;
    EXPECT_THAT(Message(status),
                ContainsRegex("failed to register shared memory region.*invalid args"));
  }
  absl::Status status = registry.Register("r", object.key(), 1, 64);
  EXPECT_THAT(Message(status), HasSubstr("offset 1 + byte_size 64 runs past the end of shared "
                                         "memory key '" +
                                         object.key() + "', which holds 64"));
  EXPECT_THAT(Message(registry.Register("r", object.key(), 0, 0)),
              HasSubstr("byte_size is 0, expected at least 1 byte"));
  EXPECT_TRUE(registry.Status("").value().empty());
  EXPECT_EQ(MappingsOf(object.path()), 1);  // Only ShmObject's own.
}

TEST(SharedMemoryRegistryTest, RegisterRejectsSymlinksFifosAndUnwritableObjects) {
  ShmObject object("target", 64);
  SharedMemoryRegistry registry;
  const std::string base = "/replicad_shm_test_" + std::to_string(getpid());

  const std::string link = base + "_link";
  ASSERT_EQ(symlink(object.path().c_str(), ("/dev/shm" + link).c_str()), 0);
  absl::Status status = registry.Register("r", link, 0, 8);
  unlink(("/dev/shm" + link).c_str());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(Message(status), HasSubstr("symbolic link"));

  const std::string fifo = base + "_fifo";
  ASSERT_EQ(mkfifo(("/dev/shm" + fifo).c_str(), 0600), 0);
  status = registry.Register("r", fifo, 0, 8);
  unlink(("/dev/shm" + fifo).c_str());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(Message(status), HasSubstr("not a regular shared memory object"));

  if (geteuid() != 0) {  // root may open anything.
    ShmObject read_only("readonly", 64, 0400);
    status = registry.Register("r", read_only.key(), 0, 8);
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  }
  EXPECT_TRUE(registry.Status("").value().empty());
}

TEST(SharedMemoryRegistryTest, RegisteringANameTwiceIsAlreadyExists) {
  ShmObject object("twice", 64);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("dummy_data", object.key(), 0, 8).ok());
  absl::Status status = registry.Register("dummy_data", object.key(), 8, 8);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(Message(status), HasSubstr("shared memory region 'dummy_data' already in manager"));
  absl::StatusOr<std::vector<SharedMemoryRegistry::RegionStatus>> all = registry.Status("");
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].offset, 0u);  // The first registration stands.
  // Another name for the same bytes is fine.
  EXPECT_TRUE(registry.Register("alias", object.key(), 0, 8).ok());
}

TEST(SharedMemoryRegistryTest, AtMostMaxRegions) {
  ShmObject object("max", 64);
  SharedMemoryRegistry registry(/*max_regions=*/2);
  ASSERT_TRUE(registry.Register("a", object.key(), 0, 8).ok());
  ASSERT_TRUE(registry.Register("b", object.key(), 0, 8).ok());
  absl::Status status = registry.Register("c", object.key(), 0, 8);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(Message(status), HasSubstr("max_regions 2"));
  ASSERT_TRUE(registry.Unregister("a").ok());
  EXPECT_TRUE(registry.Register("c", object.key(), 0, 8).ok());
}

TEST(SharedMemoryRegistryTest, FindNamesTheTensorTheRegionAndTheValues) {
  ShmObject object("find", 128);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("output0_data", object.key(), 64, 64).ok());
  const std::string tensor = "outputs[0] 'OUTPUT0'";

  absl::StatusOr<SharedMemoryView> view = registry.Find("nope", 0, 8, tensor);
  EXPECT_EQ(view.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(view.status()),
              StartsWith("Unable to find shared memory region: 'nope', named by outputs[0] "
                         "'OUTPUT0'.parameters.shared_memory_region"));

  for (uint64_t offset : {uint64_t{64}, uint64_t{65}, kMax - 31}) {
    view = registry.Find("output0_data", offset, 0, tensor);
    EXPECT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(view.status()),
                HasSubstr("Invalid offset for shared memory region: 'output0_data': outputs[0] "
                          "'OUTPUT0'.parameters.shared_memory_offset is " +
                          std::to_string(offset) + ", expected less than the region's 64 bytes"));
  }
  for (uint64_t byte_size : {uint64_t{64}, kMax}) {
    view = registry.Find("output0_data", 1, byte_size, tensor);
    EXPECT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(view.status()),
                HasSubstr("Invalid offset + byte size for shared memory region: 'output0_data': "
                          "outputs[0] 'OUTPUT0'.parameters.shared_memory_offset 1 + "
                          "shared_memory_byte_size " +
                          std::to_string(byte_size) + " runs past the region's 64 bytes"));
  }
  // Offsets are within the region, not the object.
  view = registry.Find("output0_data", 0, 64, tensor);
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_TRUE(view->Write("A", 1).ok());
  EXPECT_EQ(object.bytes()[64], 'A');
}

TEST(SharedMemoryRegistryTest, UnregisterKeepsHeldViewsWorkingUntilTheyLetGo) {
  ShmObject object("held", 4096);
  const int descriptors = OpenDescriptors();
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("r", object.key(), 0, 4096).ok());
  EXPECT_EQ(OpenDescriptors(), descriptors + 1);  // The region holds the object open.
  absl::StatusOr<SharedMemoryView> view = registry.Find("r", 100, 16, "inputs[0]");
  ASSERT_TRUE(view.ok()) << view.status();

  ASSERT_TRUE(registry.Unregister("r").ok());
  EXPECT_EQ(registry.Find("r", 0, 1, "inputs[0]").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.Status("r").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(OpenDescriptors(), descriptors + 1);  // Still open: the view holds it.
  ASSERT_TRUE(view->Write("v", 1).ok());
  EXPECT_EQ(object.bytes()[100], 'v');
  object.bytes()[101] = 'w';
  char read[16];
  ASSERT_TRUE(view->Read(read).ok());
  EXPECT_EQ(read[1], 'w');

  // The name is free again at once, while the old view lives on.
  ASSERT_TRUE(registry.Register("r", object.key(), 0, 64).ok());
  EXPECT_EQ(OpenDescriptors(), descriptors + 2);

  SharedMemoryView copy = *view;
  view = absl::UnknownError("dropped");
  EXPECT_EQ(OpenDescriptors(), descriptors + 2);  // `copy` still holds it.
  EXPECT_EQ(MappingsOf(object.path()), 3);        // ShmObject's, the old region's, the new one's.
  EXPECT_EQ(copy.data()[1], 'w');                 // Still mapped after Unregister.
  copy = SharedMemoryView();
  EXPECT_EQ(OpenDescriptors(), descriptors + 1);  // Closed with the last holder,
  EXPECT_EQ(MappingsOf(object.path()), 2);        // and unmapped.
}

TEST(SharedMemoryRegistryTest, AnObjectShrunkUnderAPinnedViewTripsTheTrapNotTheProcess) {
  // The daemon maps regions; touching a page past a shrunk object's end
  // raises SIGBUS, which MemoryTrap turns into zeros and CheckIntact's error.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  ShmObject object("pinned", 4 * page);
  ShmObject other("untouched", page);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("t", object.key(), 0, 4 * page).ok());
  ASSERT_TRUE(registry.Register("u", other.key(), 0, page).ok());
  absl::StatusOr<SharedMemoryView> view = registry.Find("t", 2 * page, 2 * page, "inputs[0]");
  absl::StatusOr<SharedMemoryView> fine = registry.Find("u", 0, page, "inputs[1]");
  ASSERT_TRUE(view.ok() && fine.ok());
  object.bytes()[2 * page] = 7;
  ASSERT_EQ(view->data()[0], 7);
  ASSERT_TRUE(view->CheckIntact().ok());
  ASSERT_TRUE(registry.Unregister("t").ok());  // The pinned view keeps it mapped.

  const int fd = shm_open(object.key().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 100), 0);
  close(fd);
  // Without the trap, this read kills the process.
  volatile char* in_place = view->data();
  EXPECT_EQ(in_place[page + 5], 0);  // The trap's zero pages.
  in_place[6] = 1;                   // Writable too: an output may still land here.
  absl::Status intact = view->CheckIntact();
  EXPECT_EQ(intact.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(intact), AllOf(HasSubstr("shared memory region 't'"),
                                     HasSubstr(absl::StrCat("bytes ", 2 * page, " to ", 4 * page)),
                                     HasSubstr("now holds 100 bytes")));
  // Growing the object back does not repair the range: it maps zeros now.
  ASSERT_EQ(truncate(object.path().c_str(), static_cast<off_t>(4 * page)), 0);
  EXPECT_FALSE(view->CheckIntact().ok());
  EXPECT_TRUE(fine->CheckIntact().ok());  // Other regions are untouched.
  view = absl::UnknownError("dropped");   // Unmaps the zero pages and frees the trap.
}

TEST(SharedMemoryRegistryDeathTest, ASigbusOutsideEveryRegionStillKills) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || \
    defined(REPLICAD_THREAD_SANITIZER)
  // The sanitizer's own SIGBUS handler, which the trap hands the fault to,
  // writes a report for the dying child, and any report fails a sanitizer run.
  GTEST_SKIP() << "a sanitizer reports the deliberate SIGBUS of this test's child";
#endif
  ShmObject object("kills", 8192);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("t", object.key(), 0, 8192).ok());  // Installs the trap.
  EXPECT_DEATH(
      {
        // A mapping of our own, not a region: the trap must not swallow it.
        ftruncate(shm_open(object.key().c_str(), O_RDWR, 0), 0);
        volatile unsigned char* mine = object.bytes();
        (void)mine[4096];
      },
      "");
}

TEST(SharedMemoryRegistryTest, OverlapsComparesObjectsNotRegionNames) {
  ShmObject object("overlap", 4096);
  ShmObject other("elsewhere", 4096);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("a", object.key(), 0, 4096).ok());
  ASSERT_TRUE(registry.Register("b", object.key().substr(1), 1024, 2048).ok());  // Same object.
  ASSERT_TRUE(registry.Register("c", other.key(), 0, 4096).ok());
  SharedMemoryView a = *registry.Find("a", 1000, 100, "inputs[0]");    // [1000, 1100)
  SharedMemoryView b = *registry.Find("b", 50, 100, "outputs[0]");     // [1074, 1174)
  SharedMemoryView after = *registry.Find("b", 76, 10, "outputs[1]");  // [1100, 1110)
  SharedMemoryView elsewhere = *registry.Find("c", 1000, 100, "outputs[2]");
  EXPECT_TRUE(a.Overlaps(b));
  EXPECT_TRUE(b.Overlaps(a));
  EXPECT_FALSE(a.Overlaps(after));  // Adjacent, not overlapping.
  EXPECT_FALSE(a.Overlaps(elsewhere));
  a.data()[74] = 'x';  // Two regions, two mappings, the same bytes.
  EXPECT_EQ(b.data()[0], 'x');
  EXPECT_EQ(object.bytes()[1074], 'x');
}

TEST(SharedMemoryRegistryTest, AnObjectShrunkAfterRegisteringFailsTheRequestNotTheDaemon) {
  // Before any access through the mapping: Read, Write and CheckIntact fail.
  ShmObject object("shrunk", 8192);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("t", object.key(), 0, 8192).ok());
  absl::StatusOr<SharedMemoryView> view = registry.Find("t", 4096, 4096, "outputs[0]");
  ASSERT_TRUE(view.ok()) << view.status();
  const int fd = shm_open(object.key().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 100), 0);
  close(fd);
  std::vector<char> bytes(4096);
  absl::Status read = view->Read(bytes.data());
  EXPECT_EQ(read.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(read),
              AllOf(HasSubstr("shared memory region 't'"), HasSubstr("bytes 4096 to 8192"),
                    HasSubstr("now holds 100 bytes")));
  absl::Status write = view->Write(bytes.data(), bytes.size());
  EXPECT_EQ(write.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(write), HasSubstr("now holds 100 bytes"));
  struct stat after;
  ASSERT_EQ(stat(object.path().c_str(), &after), 0);
  EXPECT_EQ(after.st_size, 100);  // A failed write does not grow the client's object.
  EXPECT_THAT(Message(view->CheckIntact()), HasSubstr("now holds 100 bytes"));
}

TEST(SharedMemoryRegistryTest, UnregisterUnknownIsOkAndEmptyNameUnregistersAll) {
  ShmObject object("all", 64);
  const int descriptors = OpenDescriptors();
  {
    SharedMemoryRegistry registry;
    EXPECT_TRUE(registry.Unregister("never_registered").ok());
    for (const char* name : {"input0_data", "input1_data", "output0_data", "output1_data"}) {
      ASSERT_TRUE(registry.Register(name, object.key(), 0, 64).ok());
    }
    EXPECT_EQ(OpenDescriptors(), descriptors + 4);  // One open object each.
    ASSERT_TRUE(registry.Unregister("output0_data").ok());
    EXPECT_EQ(registry.Status("").value().size(), 3u);
    EXPECT_EQ(OpenDescriptors(), descriptors + 3);
    ASSERT_TRUE(registry.Unregister("").ok());
    EXPECT_TRUE(registry.Status("").value().empty());
    EXPECT_EQ(OpenDescriptors(), descriptors);
    EXPECT_TRUE(registry.Unregister("").ok());

    ASSERT_TRUE(registry.Register("kept", object.key(), 0, 64).ok());
  }  // The destructor closes what is left.
  EXPECT_EQ(OpenDescriptors(), descriptors);
}

TEST(SharedMemoryRegistryTest, ConcurrentRegisterFindUnregisterStatus) {
  constexpr int kRegions = 4;
  constexpr int kThreads = 6;
  constexpr int kIterations = 4000;
  ShmObject object("concurrent", 4096);
  std::memset(object.bytes(), 0xAB, 4096);
  SharedMemoryRegistry registry(/*max_regions=*/3);  // So ResourceExhausted happens too.
  std::atomic<int> views{0};
  std::atomic<int> unexpected{0};

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<SharedMemoryView> held;
      for (int i = 0; i < kIterations; ++i) {
        const std::string name = "r" + std::to_string(rng() % kRegions);
        switch (rng() % 4) {
          case 0: {
            absl::Status status = registry.Register(name, object.key(), 0, 4096);
            if (!status.ok() && !absl::IsAlreadyExists(status) &&
                !absl::IsResourceExhausted(status)) {
              ++unexpected;
            }
            break;
          }
          case 1: {
            absl::StatusOr<SharedMemoryView> view = registry.Find(name, 8, 256, "inputs[0]");
            if (view.ok()) {
              ++views;
              std::vector<unsigned char> bytes(view->bytes());
              if (!view->Read(bytes.data()).ok()) ++unexpected;
              for (unsigned char b : bytes) {
                if (b != 0xAB) ++unexpected;
              }
              if (held.size() < 8) held.push_back(*std::move(view));
            } else if (!absl::IsNotFound(view.status())) {
              ++unexpected;
            }
            break;
          }
          case 2:
            if (!registry.Unregister(rng() % 16 == 0 ? "" : name).ok()) ++unexpected;
            break;
          default: {
            absl::StatusOr<std::vector<SharedMemoryRegistry::RegionStatus>> all =
                registry.Status("");
            if (!all.ok() || all->size() > 3) ++unexpected;
            break;
          }
        }
        if (!held.empty() && rng() % 3 == 0) {
          // Views outlive their registration: read one that may be unregistered.
          unsigned char last[256];
          if (!held.back().Read(last).ok() || last[255] != 0xAB) ++unexpected;
          held.pop_back();
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(unexpected.load(), 0);
  EXPECT_GT(views.load(), 0);
  ASSERT_TRUE(registry.Unregister("").ok());
  EXPECT_EQ(MappingsOf(object.path()), 1);  // Only ShmObject's own: every region unmapped.
}

}  // namespace
}  // namespace replicad
