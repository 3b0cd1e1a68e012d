#include "core/backends/cuda/cublas_library.h"

#include <fstream>
#include <sstream>
#include <string>

#include "core/backends/cuda/cuda_call.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace replicad {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string MappedFiles() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str();
}

// One test: the first half needs a process that has not opened cuBLAS yet.
TEST(CublasLibraryTest, OpenedOnFirstUseNotAtStart) {
  // Linking the CUDA backend does not load cuBLAS (~150 MB resident).
  EXPECT_THAT(MappedFiles(), Not(HasSubstr("libcublas")));

  absl::StatusOr<const CublasLibrary*> cublas = OpenCublas();
  ASSERT_TRUE(cublas.ok()) << cublas.status();
  EXPECT_THAT(MappedFiles(), HasSubstr("libcublas"));
  EXPECT_STREQ((*cublas)->GetStatusName(CUBLAS_STATUS_NOT_INITIALIZED),
               "CUBLAS_STATUS_NOT_INITIALIZED");
  absl::StatusOr<const CublasLibrary*> again = OpenCublas();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *cublas);

  // Its errors read as they did when it was linked.
  absl::Status failed = CudaCallStatus(CUBLAS_STATUS_ALLOC_FAILED, "cuda:0", "cublasSgemm_64");
  EXPECT_EQ(failed.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(failed.message(),
              HasSubstr("cuda:0: cublasSgemm_64 failed: CUBLAS_STATUS_ALLOC_FAILED"));
  EXPECT_EQ(CudaCallStatus(CUBLAS_STATUS_SUCCESS, "cuda:0", "x"), absl::OkStatus());
}

}  // namespace
}  // namespace replicad
