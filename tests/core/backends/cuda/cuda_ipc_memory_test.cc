// OpenCudaIpcMemory (the CUDA shared-memory extension's way into a client's
// GPU allocation) against a real client: a child process, forked before this
// one touches CUDA, allocates 4096 bytes on GPU 0, fills them, exports the
// handle (cudaIpcGetMemHandle) through a pipe and waits. This process opens
// it, reads the child's bytes, writes its own, and the child checks them
// after it is told to; the allocation's size comes back from the driver and
// bounds every copy. Handles CUDA does not open (zeros), of another size, or
// on a device this process lacks are refused. Without a GPU
// (the child says so) it skips (CTest label gpu).
#include "core/backends/cuda/cuda_ipc_memory.h"

#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

constexpr size_t kBytes = 4096;

// The child: 0 when the parent's bytes arrived, 1 otherwise, 2 without a GPU
// (after sending an empty handle).
int Client(int to_parent, int from_parent) {
  void* memory = nullptr;
  cudaIpcMemHandle_t handle;
  std::vector<unsigned char> bytes(kBytes);
  for (size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<unsigned char>(i * 7);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 || cudaSetDevice(0) != cudaSuccess ||
      cudaMalloc(&memory, kBytes) != cudaSuccess ||
      cudaMemcpy(memory, bytes.data(), kBytes, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaIpcGetMemHandle(&handle, memory) != cudaSuccess) {
    char none = 0;
    (void)!write(to_parent, &none, 1);
    return 2;
  }
  char yes = 1;
  (void)!write(to_parent, &yes, 1);
  (void)!write(to_parent, &handle, sizeof(handle));
  char done = 0;
  (void)!read(from_parent, &done, 1);
  if (cudaMemcpy(bytes.data(), memory, kBytes, cudaMemcpyDeviceToHost) != cudaSuccess) return 1;
  for (size_t i = 0; i < 16; ++i) {
    if (bytes[100 + i] != 0xA0 + i) return 1;
  }
  return bytes[99] == static_cast<unsigned char>(99 * 7) ? 0 : 1;
}

TEST(CudaIpcMemoryTest, OpensReadsAndWritesAnotherProcesssAllocation) {
  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(Client(to_parent[1], to_child[0]));
  char has_gpu = 0;
  ASSERT_EQ(read(to_parent[0], &has_gpu, 1), 1);
  if (!has_gpu) {
    int status = 0;
    waitpid(child, &status, 0);
    GTEST_SKIP() << "no CUDA device";
  }
  std::string handle(kIpcHandleBytes, '\0');
  ASSERT_EQ(read(to_parent[0], handle.data(), handle.size()), static_cast<ssize_t>(handle.size()));

  {
    absl::StatusOr<std::unique_ptr<SharedDeviceMemory>> opened = OpenCudaIpcMemory(0, handle);
    ASSERT_TRUE(opened.ok()) << opened.status();
    const SharedDeviceMemory& memory = **opened;
    EXPECT_EQ(memory.device(), 0);
    // The driver's size of the allocation (cudaMalloc may round it up).
    EXPECT_GE(memory.bytes(), kBytes);
    std::vector<unsigned char> read_back(kBytes);
    ASSERT_TRUE(memory.CopyToHost(0, kBytes, read_back.data()).ok());
    for (size_t i = 0; i < kBytes; ++i) {
      ASSERT_EQ(read_back[i], static_cast<unsigned char>(i * 7)) << i;
    }
    unsigned char mine[16];
    for (int i = 0; i < 16; ++i) mine[i] = static_cast<unsigned char>(0xA0 + i);
    ASSERT_TRUE(memory.CopyFromHost(100, mine, sizeof(mine)).ok());
    EXPECT_EQ(memory.CopyToHost(memory.bytes() - 8, 16, read_back.data()).code(),
              absl::StatusCode::kInternal);
  }  // Closed before the child frees it.
  char done = 1;
  ASSERT_EQ(write(to_child[1], &done, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the client did not find this process's bytes";

  absl::StatusOr<std::unique_ptr<SharedDeviceMemory>> zeros =
      OpenCudaIpcMemory(0, std::string(kIpcHandleBytes, '\0'));
  EXPECT_FALSE(zeros.ok());
  EXPECT_THAT(std::string(zeros.status().message()), ::testing::HasSubstr("cudaIpcOpenMemHandle"));
  absl::StatusOr<std::unique_ptr<SharedDeviceMemory>> short_handle = OpenCudaIpcMemory(0, "abc");
  EXPECT_EQ(short_handle.status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<SharedDeviceMemory>> far = OpenCudaIpcMemory(4096, handle);
  EXPECT_THAT(std::string(far.status().message()), ::testing::HasSubstr("device_id"));
}

}  // namespace
}  // namespace replicad
