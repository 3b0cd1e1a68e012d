#include "core/train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <optional>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/status_macros.h"
#include "core/model/onnx_tensor.h"
#include "core/ops/optimizer_step_attributes.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "google/protobuf/wire_format_lite.h"
#include "onnx/onnx_pb.h"

namespace replicad {
namespace {

constexpr char kStepKey[] = "replicad.step";
constexpr char kIdKey[] = "replicad.checkpoint_id";
constexpr char kRunIdKey[] = "replicad.run_id";
constexpr char kFormatKey[] = "replicad.format";
constexpr char kStateFormat[] = "replicad.optimizer_state.v1";
constexpr char kOptimizerPrefix[] = "replicad.optimizer.";
constexpr char kTrainingConfigKey[] = "replicad.training_config";

// "write /x/m.onnx.tmp: No space left on device", with the errno's status code.
absl::Status SysError(absl::string_view call, const std::string& path) {
  const int error = errno;
  return absl::ErrnoToStatus(error, absl::StrCat(call, " ", path));
}

absl::Status WriteAll(int fd, const std::string& bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    // Linux writes at most ~2 GiB per call; smaller chunks keep every call well inside.
    const size_t chunk = std::min<size_t>(bytes.size() - done, size_t{1} << 30);
    const ssize_t n = ::write(fd, bytes.data() + done, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      return SysError("write", path);
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// FNV-1a: stable across builds and runs, so that a temporary file a crash
// left behind is the one the next write of the same target replaces.
uint64_t StableHash(const std::string& text) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

// Short whatever the target's length, so that a name the file system takes
// is never refused for its temporary file's suffix; hidden, so a listing of
// checkpoints does not show it.
std::string TemporaryName(const std::string& name) { return CheckpointTemporaryName(name); }

// Writes `bytes` to a new temporary file for `name` in `directory` and
// makes them durable (fsync) before anyone renames it into place: without
// the fsync, ext4 and XFS may show an empty file after a power loss.
absl::Status WriteTemporary(const CheckpointDirectory& directory, const std::string& name,
                            const std::string& bytes) {
  const std::string temp = TemporaryName(name);
  const std::string shown = directory.PathOf(temp);
  // What is at the temporary name (a crashed write's file, or a link someone
  // planted there) is removed, not written through: the file is then created
  // exclusively, so a link planted again meanwhile fails the open (EEXIST).
  ::unlinkat(directory.fd(), temp.c_str(), 0);
  const int fd = ::openat(directory.fd(), temp.c_str(),
                          O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return SysError("open", shown);
  absl::Status status = WriteAll(fd, bytes, shown);
  if (status.ok() && ::fsync(fd) != 0) status = SysError("fsync", shown);
  // close() reports deferred write errors on some file systems (NFS), so it is checked.
  if (::close(fd) != 0 && status.ok()) status = SysError("close", shown);
  if (!status.ok()) ::unlinkat(directory.fd(), temp.c_str(), 0);
  return status;
}

// rename() within one directory is atomic on POSIX file systems: `name` is
// the old file or the new one, whenever the process dies.
absl::Status RenameTemporary(const CheckpointDirectory& directory, const std::string& name) {
  const std::string temp = TemporaryName(name);
  if (::renameat(directory.fd(), temp.c_str(), directory.fd(), name.c_str()) == 0) {
    return absl::OkStatus();
  }
  absl::Status status =
      SysError("rename", absl::StrCat(directory.PathOf(temp), " to ", directory.PathOf(name)));
  ::unlinkat(directory.fd(), temp.c_str(), 0);
  return status;
}

absl::Status CheckFileName(const std::string& name, const CheckpointDirectory& directory) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(directory.PathOf(name),
                     ": a checkpoint's file name must be a plain name; received '", name, "'"));
  }
  if (name.size() > NAME_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(directory.PathOf(name),
                                                   ": a file name holds at most ", NAME_MAX,
                                                   " bytes; received ", name.size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return SysError("open", path);
  std::string bytes;
  struct stat st;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) bytes.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status status = SysError("read", path);
      ::close(fd);
      return status;
    }
    bytes.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return bytes;
}

const std::string* FindMetadata(const onnx::ModelProto& model, absl::string_view key) {
  for (const onnx::StringStringEntryProto& entry : model.metadata_props()) {
    if (entry.key() == key) return &entry.value();
  }
  return nullptr;
}

// Replaces an existing entry (the source model may itself be a checkpoint) or adds one.
void SetMetadata(onnx::ModelProto* model, const std::string& key, const std::string& value) {
  for (onnx::StringStringEntryProto& entry : *model->mutable_metadata_props()) {
    if (entry.key() == key) {
      entry.set_value(value);
      return;
    }
  }
  onnx::StringStringEntryProto* entry = model->add_metadata_props();
  entry->set_key(key);
  entry->set_value(value);
}

absl::Status CheckHostTensor(const Tensor& tensor, absl::string_view what) {
  if (tensor.buffer() == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has no data"));
  }
  if (tensor.location().kind != MemoryKind::kHost) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be in host memory; received ",
                                                   MemoryLocationToString(tensor.location())));
  }
  return absl::OkStatus();
}

std::string OnnxTypeString(const onnx::TensorProto& proto) {
  const Shape shape(proto.dims().begin(), proto.dims().end());
  absl::StatusOr<DType> dtype = DTypeFromOnnx(proto.data_type());
  if (dtype.ok()) return TensorTypeToString(TensorType{*dtype, shape});
  return absl::StrCat(OnnxDataTypeName(proto.data_type()), ShapeToString(shape));
}

absl::StatusOr<std::string> Serialize(const onnx::ModelProto& model, const std::string& path) {
  // Protobuf cannot encode a message of 2 GiB or more (ONNX's external data would be needed).
  const size_t size = model.ByteSizeLong();
  std::string bytes;
  if (size > static_cast<size_t>(INT_MAX) || !model.SerializeToString(&bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot serialize ", size, " bytes; protobuf's limit is 2 GiB - 1"));
  }
  return bytes;
}

onnx::ModelProto StateModel(const Checkpoint& checkpoint, const std::string& id) {
  onnx::ModelProto state;
  state.set_ir_version(onnx::IR_VERSION);
  state.set_producer_name("replicad");
  state.set_doc_string(
      "replicad optimizer state: step, optimizer config and checkpoint id in metadata_props, "
      "state tensors as initializers");
  SetMetadata(&state, kFormatKey, kStateFormat);
  SetMetadata(&state, kStepKey, absl::StrCat(checkpoint.step));
  SetMetadata(&state, kIdKey, id);
  if (!checkpoint.run_id.empty()) SetMetadata(&state, kRunIdKey, checkpoint.run_id);
  const OptimizerConfig& config = checkpoint.optimizer;
  SetMetadata(&state, absl::StrCat(kOptimizerPrefix, "kind"), OptimizerKindName(config.kind));
  SetMetadata(&state, absl::StrCat(kOptimizerPrefix, "nesterov"),
              config.nesterov ? "true" : "false");
  for (const OptimizerFloatField& field : kOptimizerFloatFields) {
    // %.9g round-trips every float32 exactly.
    SetMetadata(&state, absl::StrCat(kOptimizerPrefix, field.name),
                absl::StrFormat("%.9g", config.*field.member));
  }
  if (!checkpoint.training_config.empty()) {
    SetMetadata(&state, kTrainingConfigKey, checkpoint.training_config);
  }
  onnx::GraphProto* graph = state.mutable_graph();
  graph->set_name("optimizer_state");
  for (const auto& [name, tensor] : checkpoint.optimizer_state) {
    TensorToOnnx(tensor, name, graph->add_initializer());
  }
  return state;
}

absl::Status Invalid(const std::string& path, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", message));
}

// The source model's initializers take the checkpoint's parameters.
absl::Status ReplaceParameters(const Checkpoint& checkpoint, const std::string& onnx_path,
                               onnx::ModelProto* model) {
  std::map<std::string, onnx::TensorProto*> initializers;
  for (onnx::TensorProto& proto : *model->mutable_graph()->mutable_initializer()) {
    initializers.emplace(proto.name(), &proto);
  }
  for (const auto& [name, tensor] : checkpoint.parameters) {
    auto it = initializers.find(name);
    if (it == initializers.end()) {
      return absl::NotFoundError(absl::StrCat(onnx_path, ": parameter '", name,
                                              "' is not an initializer of the source model"));
    }
    const std::string what = absl::StrCat("parameter '", name, "'");
    if (absl::Status status = CheckHostTensor(tensor, what); !status.ok()) {
      return Invalid(onnx_path, status.message());
    }
    onnx::TensorProto* proto = it->second;
    const Shape dims(proto->dims().begin(), proto->dims().end());
    if (proto->data_type() != static_cast<int>(tensor.dtype()) || dims != tensor.shape()) {
      return Invalid(onnx_path, absl::StrCat(what, " must be ", OnnxTypeString(*proto),
                                             " like its initializer; received ",
                                             TensorTypeToString(tensor.type())));
    }
    std::string doc = proto->doc_string();
    TensorToOnnx(tensor, name, proto);
    if (!doc.empty()) proto->set_doc_string(std::move(doc));
  }
  return absl::OkStatus();
}

// The checkpoint's ONNX file: `source_model` with the parameters, step, id
// and run id. Errors name `onnx_path`.
absl::StatusOr<std::string> CheckpointOnnx(const std::string& source_model,
                                           const Checkpoint& checkpoint, const std::string& id,
                                           const std::string& onnx_path) {
  onnx::ModelProto model;
  if (!model.ParseFromString(source_model)) {
    return Invalid(onnx_path, "the source model is not an ONNX model (cannot parse)");
  }
  REPLICAD_RETURN_IF_ERROR(ReplaceParameters(checkpoint, onnx_path, &model));
  SetMetadata(&model, kStepKey, absl::StrCat(checkpoint.step));
  SetMetadata(&model, kIdKey, id);
  if (!checkpoint.run_id.empty()) SetMetadata(&model, kRunIdKey, checkpoint.run_id);
  return Serialize(model, onnx_path);
}

absl::StatusOr<const std::string*> RequiredMetadata(const onnx::ModelProto& model,
                                                    const std::string& path,
                                                    const std::string& key) {
  const std::string* value = FindMetadata(model, key);
  if (value == nullptr) return Invalid(path, absl::StrCat("metadata_props lacks '", key, "'"));
  return value;
}

absl::StatusOr<int64_t> ParseStep(const std::string& path, const std::string& value) {
  int64_t step = 0;
  if (!absl::SimpleAtoi(value, &step) || step < 0) {
    return Invalid(path, absl::StrCat("metadata '", kStepKey,
                                      "' must be an integer >= 0; received '", value, "'"));
  }
  return step;
}

absl::StatusOr<OptimizerConfig> ParseConfig(const onnx::ModelProto& state,
                                            const std::string& path) {
  OptimizerConfig config;
  absl::StatusOr<const std::string*> kind =
      RequiredMetadata(state, path, absl::StrCat(kOptimizerPrefix, "kind"));
  if (!kind.ok()) return kind.status();
  const std::optional<OptimizerConfig::Kind> parsed = OptimizerKindFromName(**kind);
  if (!parsed) {
    return Invalid(path,
                   absl::StrCat("metadata '", kOptimizerPrefix,
                                "kind' must be sgd, adam or rmsprop; received '", **kind, "'"));
  }
  config.kind = *parsed;
  absl::StatusOr<const std::string*> nesterov =
      RequiredMetadata(state, path, absl::StrCat(kOptimizerPrefix, "nesterov"));
  if (!nesterov.ok()) return nesterov.status();
  if (**nesterov != "true" && **nesterov != "false") {
    return Invalid(path,
                   absl::StrCat("metadata '", kOptimizerPrefix,
                                "nesterov' must be true or false; received '", **nesterov, "'"));
  }
  config.nesterov = **nesterov == "true";
  for (const OptimizerFloatField& field : kOptimizerFloatFields) {
    const std::string key = absl::StrCat(kOptimizerPrefix, field.name);
    absl::StatusOr<const std::string*> value = RequiredMetadata(state, path, key);
    if (!value.ok()) return value.status();
    if (!absl::SimpleAtof(**value, &(config.*field.member))) {
      return Invalid(
          path, absl::StrCat("metadata '", key, "' must be a number; received '", **value, "'"));
    }
  }
  if (absl::Status status = ValidateOptimizerConfig(config); !status.ok()) {
    return Invalid(path, status.message());
  }
  return config;
}

absl::StatusOr<Tensor> TensorFromFile(const onnx::TensorProto& proto, const std::string& path) {
  absl::StatusOr<Tensor> tensor = TensorFromOnnx(proto);
  if (!tensor.ok()) {
    return absl::Status(tensor.status().code(),
                        absl::StrCat(path, ": ", tensor.status().message()));
  }
  return tensor;
}

// Fills `loaded`'s optimizer fields from the state file when it belongs to the ONNX file
// (same step and id); leaves them empty when it is missing or from another write.
absl::Status ReadState(const std::string& path, int64_t step, const std::string& id,
                       LoadedCheckpoint* loaded) {
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (absl::IsNotFound(bytes.status())) return absl::OkStatus();
  if (!bytes.ok()) return bytes.status();
  onnx::ModelProto state;
  if (!state.ParseFromString(*bytes)) return Invalid(path, "not an ONNX model (cannot parse)");
  const std::string* format = FindMetadata(state, kFormatKey);
  if (format == nullptr || *format != kStateFormat) {
    return Invalid(path, absl::StrCat("not a replicad optimizer state file (metadata '", kFormatKey,
                                      "' must be '", kStateFormat, "'; received '",
                                      format == nullptr ? "<none>" : *format, "')"));
  }
  absl::StatusOr<const std::string*> step_text = RequiredMetadata(state, path, kStepKey);
  if (!step_text.ok()) return step_text.status();
  REPLICAD_ASSIGN_OR_RETURN(int64_t state_step, ParseStep(path, **step_text));
  absl::StatusOr<const std::string*> state_id = RequiredMetadata(state, path, kIdKey);
  if (!state_id.ok()) return state_id.status();
  if (state_step != step || **state_id != id) return absl::OkStatus();

  absl::StatusOr<OptimizerConfig> config = ParseConfig(state, path);
  if (!config.ok()) return config.status();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const onnx::TensorProto& proto : state.graph().initializer()) {
    absl::StatusOr<Tensor> tensor = TensorFromFile(proto, path);
    if (!tensor.ok()) return tensor.status();
    tensors.emplace_back(proto.name(), *std::move(tensor));
  }
  loaded->checkpoint.optimizer = *config;
  loaded->checkpoint.optimizer_state = std::move(tensors);
  if (const std::string* training = FindMetadata(state, kTrainingConfigKey)) {
    loaded->checkpoint.training_config = *training;
  }
  loaded->state_matches = true;
  return absl::OkStatus();
}

}  // namespace

std::string NewCheckpointId() {
  std::random_device device;
  const uint64_t id = (static_cast<uint64_t>(device()) << 32) ^ device();
  return absl::StrFormat("%016x", id);
}

std::string CheckpointTemporaryName(const std::string& name) {
  return absl::StrFormat(".replicad-%016x.tmp", StableHash(name));
}

std::string CheckpointStateName(const std::string& onnx_name) {
  constexpr char kStateSuffix[] = ".state";
  const std::string plain = onnx_name + kStateSuffix;
  if (plain.size() <= NAME_MAX) return plain;
  // Too long with the suffix: a prefix and the whole name's hash, so that
  // two long names that share the prefix keep apart.
  const std::string tail = absl::StrFormat("~%016x%s", StableHash(onnx_name), kStateSuffix);
  return onnx_name.substr(0, NAME_MAX - tail.size()) + tail;
}

std::string CheckpointStatePath(const std::string& onnx_path) {
  const size_t slash = onnx_path.rfind('/');
  if (slash == std::string::npos) return CheckpointStateName(onnx_path);
  return onnx_path.substr(0, slash + 1) + CheckpointStateName(onnx_path.substr(slash + 1));
}

absl::Status WriteCheckpoint(const std::string& source_model, const CheckpointDirectory& directory,
                             const std::string& name, const Checkpoint& checkpoint) {
  const std::string onnx_path = directory.PathOf(name);
  REPLICAD_RETURN_IF_ERROR(CheckFileName(name, directory));
  if (checkpoint.step < 0) {
    return Invalid(onnx_path,
                   absl::StrCat("checkpoint.step must be >= 0; received ", checkpoint.step));
  }
  if (absl::Status status = ValidateOptimizerConfig(checkpoint.optimizer); !status.ok()) {
    return Invalid(onnx_path, status.message());
  }
  for (const auto& [tensor_name, tensor] : checkpoint.optimizer_state) {
    absl::Status status =
        CheckHostTensor(tensor, absl::StrCat("optimizer state '", tensor_name, "'"));
    if (!status.ok()) return Invalid(onnx_path, status.message());
  }
  const std::string id = NewCheckpointId();
  REPLICAD_ASSIGN_OR_RETURN(std::string onnx_bytes,
                            CheckpointOnnx(source_model, checkpoint, id, onnx_path));
  const std::string state_name = CheckpointStateName(name);
  absl::StatusOr<std::string> state_bytes =
      Serialize(StateModel(checkpoint, id), directory.PathOf(state_name));
  if (!state_bytes.ok()) return state_bytes.status();
  // Only a regular file (or nothing) is replaced: a directory, a device or a
  // link at the name fails here, before anything is written beside it.
  struct stat target;
  const bool had_onnx = ::fstatat(directory.fd(), name.c_str(), &target, AT_SYMLINK_NOFOLLOW) == 0;
  if (had_onnx && !S_ISREG(target.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("write ", onnx_path, ": it exists and is not a regular file"));
  }
  // Both files are whole and durable before either is renamed into place,
  // so a write that fails (a full disk, most often) changes nothing and
  // leaves nothing behind.
  REPLICAD_RETURN_IF_ERROR(WriteTemporary(directory, state_name, *state_bytes));
  if (absl::Status status = WriteTemporary(directory, name, onnx_bytes); !status.ok()) {
    ::unlinkat(directory.fd(), TemporaryName(state_name).c_str(), 0);
    return status;
  }
  // State first: until the ONNX rename, readers see the old ONNX file, whose
  // step and id do not match the new state file, so they ignore it rather
  // than mix the two writes.
  if (absl::Status status = RenameTemporary(directory, state_name); !status.ok()) {
    ::unlinkat(directory.fd(), TemporaryName(name).c_str(), 0);
    return status;
  }
  if (absl::Status status = RenameTemporary(directory, name); !status.ok()) {
    // A first checkpoint leaves nothing behind; over an older one, the new
    // state file stays beside the old ONNX file, which it does not match.
    if (!had_onnx) ::unlinkat(directory.fd(), state_name.c_str(), 0);
    return status;
  }
  // Makes the renames themselves durable.
  if (::fsync(directory.fd()) != 0) return SysError("fsync", directory.path());
  return absl::OkStatus();
}

absl::Status WriteCheckpoint(const std::string& source_model, const std::string& onnx_path,
                             const Checkpoint& checkpoint) {
  const size_t slash = onnx_path.rfind('/');
  REPLICAD_ASSIGN_OR_RETURN(CheckpointDirectory directory,
                            CheckpointDirectory::Open(slash == std::string::npos ? "."
                                                      : slash == 0               ? "/"
                                                                   : onnx_path.substr(0, slash)));
  return WriteCheckpoint(source_model, directory,
                         slash == std::string::npos ? onnx_path : onnx_path.substr(slash + 1),
                         checkpoint);
}

absl::StatusOr<std::string> ReadCheckpointRunId(const CheckpointDirectory& directory,
                                                const std::string& name) {
  using google::protobuf::internal::WireFormatLite;
  const std::string path = directory.PathOf(name);
  const int fd = ::openat(directory.fd(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return SysError("open", path);
  google::protobuf::io::FileInputStream file(fd);
  file.SetCloseOnDelete(true);
  google::protobuf::io::CodedInputStream in(&file);
  // Top-level fields only: the graph (most of the file) is skipped, by
  // seeking, unparsed.
  constexpr int kMetadataPropsField = 14;  // onnx.proto: ModelProto.metadata_props.
  bool parsed = true;
  while (const uint32_t tag = in.ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) == kMetadataPropsField &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t length = 0;
      onnx::StringStringEntryProto entry;
      if (!in.ReadVarint32(&length) || length > static_cast<uint32_t>(INT_MAX)) {
        parsed = false;
        break;
      }
      const auto limit = in.PushLimit(static_cast<int>(length));
      parsed = entry.MergeFromCodedStream(&in) && in.ConsumedEntireMessage();
      in.PopLimit(limit);
      if (!parsed) break;
      if (entry.key() == kRunIdKey) return entry.value();
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      parsed = false;
      break;
    }
  }
  if (file.GetErrno() != 0) {
    errno = file.GetErrno();
    return SysError("read", path);
  }
  // ReadTag gives 0 both at the end of the file and on a malformed tag.
  if (parsed && in.ConsumedEntireMessage()) return std::string();
  return Invalid(path, "not an ONNX model (cannot parse)");
}

absl::StatusOr<std::string> CheckpointOnnxBytes(const std::string& source_model,
                                                const Checkpoint& checkpoint) {
  if (checkpoint.step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint.step must be >= 0; received ", checkpoint.step));
  }
  return CheckpointOnnx(source_model, checkpoint, NewCheckpointId(), "<in memory>");
}

absl::StatusOr<LoadedCheckpoint> ReadCheckpoint(const std::string& onnx_path) {
  REPLICAD_ASSIGN_OR_RETURN(std::string bytes, ReadFile(onnx_path));
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes)) return Invalid(onnx_path, "not an ONNX model (cannot parse)");
  bytes.clear();
  bytes.shrink_to_fit();

  LoadedCheckpoint loaded;
  for (const onnx::TensorProto& proto : model.graph().initializer()) {
    if (proto.data_type() != onnx::TensorProto::FLOAT) continue;
    absl::StatusOr<Tensor> tensor = TensorFromFile(proto, onnx_path);
    if (!tensor.ok()) return tensor.status();
    loaded.checkpoint.parameters.emplace(proto.name(), *std::move(tensor));
  }
  const std::string* step = FindMetadata(model, kStepKey);
  if (step == nullptr) return loaded;
  absl::StatusOr<int64_t> parsed = ParseStep(onnx_path, *step);
  if (!parsed.ok()) return parsed.status();
  loaded.checkpoint.step = *parsed;
  loaded.has_step = true;
  if (const std::string* run = FindMetadata(model, kRunIdKey)) loaded.checkpoint.run_id = *run;
  const std::string* id = FindMetadata(model, kIdKey);
  if (id == nullptr) return loaded;
  REPLICAD_RETURN_IF_ERROR(ReadState(CheckpointStatePath(onnx_path), *parsed, *id, &loaded));
  return loaded;
}

}  // namespace replicad
