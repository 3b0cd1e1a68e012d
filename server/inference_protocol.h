#ifndef REPLICAD_SERVER_INFERENCE_PROTOCOL_H_
#define REPLICAD_SERVER_INFERENCE_PROTOCOL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/serve/model_manager.h"
#include "core/serve/serving_core.h"
#include "inference/grpc_service.pb.h"
#include "inference/model_config.pb.h"
#include "server/model_upload.h"
#include "server/shared_memory_registry.h"

namespace replicad {

// The Open Inference Protocol's terms (KServe v2 as Triton extends it),
// shared by its gRPC and HTTP front doors: the HTTP door prints the same
// messages as JSON.

// "replicad" and its version, as ServerMetadata reports them.
inline constexpr char kServerName[] = "replicad";
inline constexpr char kServerVersion[] = "0.2.0";
// The protocol extensions that work, exactly (ServerMetadata.extensions):
// system_shared_memory with a registry, cuda_shared_memory with one that
// opens GPU memory.
std::vector<std::string> SupportedExtensions(const SharedMemoryRegistry* shared_memory);

// An Open Inference Protocol datatype ("FP32", "FP16", "BF16", "INT64",
// "INT32", "INT8", "UINT8", "BOOL") to a DType; InvalidArgument naming
// `field`, the expected and the received datatype for any other (FP64,
// BYTES, ...: no model replicad loads holds one).
absl::StatusOr<DType> DTypeFromDatatype(const std::string& datatype, const std::string& field);
const char* DatatypeOf(DType dtype);  // "FP32", "FP16", "BF16", "INT64", "INT32", "INT8", ...

// A version string: "" (latest, 0) or a positive integer. InvalidArgument
// naming `field` otherwise.
absl::StatusOr<int64_t> ParseModelVersion(const std::string& version, const std::string& field);

// ModelMetadata: every ready version of the model, its platform, and its
// tensors with the batch dimension as a leading -1.
void FillModelMetadata(const std::vector<std::shared_ptr<LoadedModel>>& versions,
                       const LoadedModel& model, inference::ModelMetadataResponse* out);
// Triton's ModelConfig for a loaded version: its config.pbtxt as loaded when
// it has one, completed from the model where the file is silent; otherwise
// max_batch_size (dims then leave out the batch dimension), tensors, one
// instance group per device.
void FillModelConfig(const LoadedModel& model, inference::ModelConfig* out);
void FillModelStatistics(const LoadedModel& model, inference::ModelStatistics* out);
// The answers both doors give, in the protocol's messages; the HTTP door
// prints them as JSON. Each returns the model version it answered about (for
// metrics), or NotFound naming the unknown model or version.
absl::StatusOr<std::shared_ptr<LoadedModel>> FindModelVersion(const ServingCore& core,
                                                              const std::string& name,
                                                              const std::string& version);
absl::StatusOr<std::shared_ptr<LoadedModel>> AnswerModelMetadata(
    ServingCore& core, const std::string& name, const std::string& version,
    inference::ModelMetadataResponse* out);
absl::StatusOr<std::shared_ptr<LoadedModel>> AnswerModelConfig(const ServingCore& core,
                                                               const std::string& name,
                                                               const std::string& version,
                                                               inference::ModelConfig* out);
// An empty `name`: every ready version of every model (no model returned).
absl::StatusOr<std::shared_ptr<LoadedModel>> AnswerModelStatistics(
    ServingCore& core, const std::string& name, const std::string& version,
    inference::ModelStatisticsResponse* out);
void AnswerServerMetadata(const SharedMemoryRegistry* shared_memory,
                          inference::ServerMetadataResponse* out);

// A model load's parameters as an upload (model_upload.h): "config" (a
// string: ModelConfig JSON) and "file:VERSION/NAME" (the file's bytes);
// InvalidArgument naming the parameter when one has another type. Others
// (e.g. unload_dependents) are tolerated. No config and no file: the load
// loads the repository's model. The files view `parameters`' bytes.
absl::StatusOr<ModelUpload> UploadOfParameters(
    const std::string& model,
    const google::protobuf::Map<std::string, inference::ModelRepositoryParameter>& parameters);

// The registry, or Unimplemented when the server runs without one.
absl::StatusOr<SharedMemoryRegistry*> SystemSharedMemory(SharedMemoryRegistry* registry);
// One region (NotFound when unknown), or every one when `name` is empty.
absl::Status FillSharedMemoryStatus(const SharedMemoryRegistry& registry, const std::string& name,
                                    inference::SystemSharedMemoryStatusResponse* out);
// The registry when it opens GPU memory; Unimplemented otherwise, saying why.
absl::StatusOr<SharedMemoryRegistry*> CudaSharedMemory(SharedMemoryRegistry* registry);
// One CUDA region (NotFound when unknown), or every one when `name` is empty.
absl::Status FillCudaSharedMemoryStatus(const SharedMemoryRegistry& registry,
                                        const std::string& name,
                                        inference::CudaSharedMemoryStatusResponse* out);
void FillRepositoryIndex(const std::vector<ModelIndexEntry>& index, bool ready_only,
                         inference::RepositoryIndexResponse* out);

}  // namespace replicad

#endif  // REPLICAD_SERVER_INFERENCE_PROTOCOL_H_
