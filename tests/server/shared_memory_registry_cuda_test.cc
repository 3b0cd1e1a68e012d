// The CUDA regions of SharedMemoryRegistry (Triton's cuda_shared_memory
// extension) with host-memory stand-ins for the clients' GPU allocations
// (tests/testing/shared_device_memory_stand_in.h): a request's input in a
// CUDA region is copied out of it (no host mapping to read in place) and its
// output copied into it after the run, with the client's bytes; status,
// unregister and errors read as Triton's, in one namespace of names with
// system regions; a region's allocation stays open while a view holds it.
// What CUDA itself does with the handle runs in the gpu test
// cuda_ipc_memory_test.
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/inference_request.h"
#include "server/shared_memory_registry.h"
#include "tests/testing/region_outputs.h"
#include "tests/testing/shared_device_memory_stand_in.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr SharedMemoryKind kCuda = SharedMemoryKind::kCuda;
constexpr SharedMemoryKind kSystem = SharedMemoryKind::kSystem;

std::string Text(const absl::Status& status) { return std::string(status.message()); }

TEST(SharedMemoryRegistryCudaTest, RegisterStatusFindAndUnregister) {
  testing::SharedDeviceMemoryStandIn gpus;
  const std::string handle = gpus.Export(4096, /*device=*/1);
  SharedMemoryRegistry registry(SharedMemoryRegistry::kDefaultMaxRegions, gpus.Opener());
  EXPECT_TRUE(registry.cuda_enabled());
  ASSERT_TRUE(registry.RegisterCuda("gpu_in", handle, 1, 1024).ok());
  EXPECT_EQ(gpus.open(), 1);

  absl::StatusOr<std::vector<SharedMemoryRegistry::RegionStatus>> status =
      registry.Status("", kCuda);
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->size(), 1u);
  EXPECT_EQ((*status)[0].name, "gpu_in");
  EXPECT_EQ((*status)[0].device_id, 1);
  EXPECT_EQ((*status)[0].byte_size, 1024u);
  EXPECT_TRUE(registry.Status("", kSystem)->empty());  // Each extension lists its own.
  EXPECT_EQ(Text(registry.Status("gpu_in", kSystem).status()),
            "The region named 'gpu_in' is registered as CUDA shared memory, not system shared "
            "memory");
  EXPECT_EQ(registry.Status("nope", kCuda).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Text(registry.Status("nope", kCuda).status()),
            "Unable to find cuda shared memory region: 'nope'");

  // A view copies: nothing of a GPU is mapped into the daemon.
  absl::StatusOr<SharedMemoryView> view = registry.Find("gpu_in", 100, 8, "inputs[0] 'x'");
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->data(), nullptr);
  EXPECT_TRUE(view->CheckIntact().ok());
  std::memcpy(gpus.bytes(handle) + 100, "abcdefgh", 8);
  char read[8];
  ASSERT_TRUE(view->Read(read).ok());
  EXPECT_EQ(std::string(read, 8), "abcdefgh");
  ASSERT_TRUE(view->Write("ABCD", 4).ok());
  EXPECT_EQ(std::string(gpus.bytes(handle) + 100, 8), "ABCDefgh");
  // Past the region (1024 of the allocation's 4096): refused as for system regions.
  EXPECT_THAT(Text(registry.Find("gpu_in", 1020, 8, "inputs[0] 'x'").status()),
              StartsWith("Invalid offset + byte size for shared memory region: 'gpu_in'"));

  // Unregistering as the other kind leaves it; as its own kind forgets it,
  // and the allocation closes when the last view lets go.
  EXPECT_TRUE(registry.Unregister("gpu_in", kSystem).ok());
  EXPECT_TRUE(registry.Unregister("", kSystem).ok());
  EXPECT_EQ(registry.Status("", kCuda)->size(), 1u);
  EXPECT_TRUE(registry.Unregister("gpu_in", kCuda).ok());
  EXPECT_TRUE(registry.Status("", kCuda)->empty());
  EXPECT_EQ(gpus.open(), 1);
  ASSERT_TRUE(view->Read(read).ok());
  *view = SharedMemoryView();
  EXPECT_EQ(gpus.open(), 0);
}

TEST(SharedMemoryRegistryCudaTest, RefusalsNameTheRegionTheFieldAndTheValues) {
  testing::SharedDeviceMemoryStandIn gpus;
  const std::string handle = gpus.Export(256);
  SharedMemoryRegistry registry(SharedMemoryRegistry::kDefaultMaxRegions, gpus.Opener());
  auto refused = [&](const std::string& name, const std::string& raw, int64_t device,
                     uint64_t bytes) { return registry.RegisterCuda(name, raw, device, bytes); };

  absl::Status s = refused("r", handle.substr(1), 0, 64);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Text(s),
            "failed to register CUDA shared memory region 'r': invalid args: raw_handle holds 63 "
            "bytes, expected the 64 of a cudaIpcMemHandle_t (cudaIpcGetMemHandle)");
  EXPECT_THAT(Text(refused("r", handle, -1, 64)),
              HasSubstr("device_id is -1, expected a GPU ordinal >= 0"));
  EXPECT_THAT(Text(refused("r", handle, 0, 0)), HasSubstr("byte_size is 0"));
  EXPECT_THAT(Text(refused("", handle, 0, 64)), HasSubstr("name is empty"));
  // The allocation is on GPU 0: CUDA refuses the handle elsewhere.
  s = refused("r", handle, 3, 64);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Text(s), StartsWith("failed to register CUDA shared memory region 'r': failed "
                                  "to open CUDA IPC handle: "));
  EXPECT_EQ(Text(refused("r", handle, 0, 257)),
            "failed to register CUDA shared memory region 'r': invalid args: byte_size 257 runs "
            "past the end of the GPU allocation the handle names, which holds 256 bytes");
  // Without the allocation's size from the driver, a region is not bounded
  // by the client's word alone: refused.
  s = refused("r", gpus.Export(256, 0, /*size_reported=*/false), 0, 64);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Text(s), HasSubstr("did not report the allocation's size"));
  EXPECT_EQ(gpus.open(), 0);  // Every refused open closed again.

  // One namespace with system regions, as Triton's.
  ASSERT_TRUE(refused("r", handle, 0, 256).ok());
  s = refused("r", handle, 0, 256);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(Text(s),
            "failed to register CUDA shared memory region 'r': shared memory region 'r' already in "
            "manager");
  s = registry.Register("r", "/some_key", 0, 16);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);

  SharedMemoryRegistry without_cuda;
  EXPECT_FALSE(without_cuda.cuda_enabled());
  EXPECT_EQ(without_cuda.RegisterCuda("r", handle, 0, 16).code(), absl::StatusCode::kUnimplemented);
}

TEST(SharedMemoryRegistryCudaTest, AnInferenceReadsItsInputFromAndWritesItsOutputToGpuRegions) {
  testing::SharedDeviceMemoryStandIn gpus;
  const std::string in = gpus.Export(64), out = gpus.Export(64);
  SharedMemoryRegistry registry(SharedMemoryRegistry::kDefaultMaxRegions, gpus.Opener());
  ASSERT_TRUE(registry.RegisterCuda("in", in, 0, 64).ok());
  ASSERT_TRUE(registry.RegisterCuda("out", out, 0, 64).ok());
  const float x[4] = {1, 2, 3, 4};
  std::memcpy(gpus.bytes(in) + 16, x, sizeof(x));

  const inference::ModelInferRequest request = testing::RegionRequest("in", 16, "out", 32);
  RequestContext context;
  std::vector<WireBytes> none(1);
  absl::StatusOr<DecodedInfer> decoded = DecodeInferRequest(request, none, &registry, &context);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->inputs.copies.size(), 1u);  // Copied off the GPU, not read in place.
  EXPECT_TRUE(decoded->inputs.in_place.empty());
  const RequestInput& got = decoded->request.inputs[0];
  ASSERT_EQ(got.bytes, 16u);
  EXPECT_EQ(std::memcmp(got.data, x, sizeof(x)), 0);

  testing::RegionOutputs outputs(std::move(decoded->output_regions));
  outputs.HoldInputs(std::move(decoded->inputs));
  const TensorSpec y{"y", {DType::kFloat32, {4}}};
  absl::StatusOr<void*> place = outputs.AddOutput(y, y.type);
  ASSERT_TRUE(place.ok()) << place.status();
  const float answer[4] = {5, 6, 7, 8};
  std::memcpy(*place, answer, sizeof(answer));
  EXPECT_NE(std::memcmp(gpus.bytes(out) + 32, answer, sizeof(answer)), 0);  // Not yet.
  ASSERT_TRUE(outputs.FinishRegions().ok());
  EXPECT_EQ(std::memcmp(gpus.bytes(out) + 32, answer, sizeof(answer)), 0);
}

}  // namespace
}  // namespace replicad
