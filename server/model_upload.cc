#include "server/model_upload.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/base/client_text.h"
#include "core/base/log.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "inference/model_config.pb.h"

namespace replicad {
namespace {

constexpr size_t kMaxNameBytes = 255;  // NAME_MAX.

absl::Status SysError(absl::string_view call, const std::string& path) {
  const int error = errno;
  return absl::ErrnoToStatus(error, absl::StrCat(call, " ", path));
}

// A name the root may hold as one directory entry of ours: no separator, not
// "." or "..", not hidden (the staging and previous directories are), no
// control characters.
bool PlainName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes || name[0] == '.') return false;
  return std::none_of(name.begin(), name.end(), [](char c) {
    return c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
}

std::string RandomSuffix() {
  static thread_local std::mt19937_64 generator{std::random_device{}()};
  return absl::StrCat(absl::Hex(generator(), absl::kZeroPad16));
}

absl::Status WriteFileAt(int dir, const std::string& name, absl::string_view bytes,
                         const std::string& path) {
  const int fd =
      ::openat(dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return SysError("open", path);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status status = SysError("write", path);
      ::close(fd);
      return status;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    absl::Status status = SysError("fsync", path);
    ::close(fd);
    return status;
  }
  ::close(fd);
  return absl::OkStatus();
}

// The directory entry `name` of `parent` and everything under it, links
// removed as links (never followed). Best effort: what cannot be removed
// stays, and the log says so.
void RemoveTree(int parent, const std::string& name, const std::string& path) {
  const int fd = ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT && ::unlinkat(parent, name.c_str(), 0) != 0 && errno != ENOENT) {
      LogWarning(absl::StrCat("removing ", path, ": ", std::strerror(errno)));
    }
    return;
  }
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    ::close(fd);
    return;
  }
  std::vector<std::string> entries;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string child = entry->d_name;
    if (child != "." && child != "..") entries.push_back(child);
  }
  for (const std::string& child : entries) {
    struct stat info;
    if (::fstatat(fd, child.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(info.st_mode)) {
      RemoveTree(fd, child, absl::StrCat(path, "/", child));
    } else if (::unlinkat(fd, child.c_str(), 0) != 0) {
      LogWarning(absl::StrCat("removing ", path, "/", child, ": ", std::strerror(errno)));
    }
  }
  ::closedir(dir);  // Closes fd.
  if (::unlinkat(parent, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    LogWarning(absl::StrCat("removing ", path, ": ", std::strerror(errno)));
  }
}

absl::Status Invalid(const std::string& field, absl::string_view expected,
                     absl::string_view received) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": expected ", expected, ", received '", ClientText(received), "'"));
}

// "VERSION/NAME" split, or InvalidArgument naming the file's field.
absl::StatusOr<std::pair<std::string, std::string>> SplitFilePath(const UploadedFile& file) {
  constexpr char kExpected[] =
      "VERSION/FILE (VERSION a positive integer, FILE a plain file name, e.g. 1/model.onnx)";
  std::vector<std::string> parts = absl::StrSplit(file.path, '/');
  int64_t version = 0;
  if (parts.size() != 2 || parts[0].size() > 18 || !absl::SimpleAtoi(parts[0], &version) ||
      version <= 0 || parts[0] != absl::StrCat(version) || !PlainName(parts[1])) {
    return Invalid(file.field, kExpected, file.path);
  }
  return std::make_pair(std::move(parts[0]), std::move(parts[1]));
}

// Triton's override of a repository model's configuration.
absl::Status ConfigurationWithoutFiles(const ModelUpload& upload) {
  return absl::UnimplementedError(
      absl::StrCat(upload.config_field,
                   ": a configuration without the model's files (overriding the "
                   "configuration of model '",
                   ClientText(upload.model),
                   "') is not implemented; send its files with it, under --model-upload-root"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelUploads>> ModelUploads::Open(const std::string& directory,
                                                                 uint64_t max_bytes) {
  // The daemon owns the root: it is made with its parents where missing.
  std::error_code made;
  std::filesystem::create_directories(directory, made);
  if (made && made != std::errc::file_exists && made != std::errc::not_a_directory) {
    return absl::ErrnoToStatus(made.value(), absl::StrCat("mkdir ", directory));
  }
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOTDIR) {
      return absl::InvalidArgumentError(
          absl::StrCat("--model-upload-root '", directory, "' is not a directory"));
    }
    return SysError("open", directory);
  }
  return std::unique_ptr<ModelUploads>(new ModelUploads(directory, fd, max_bytes));
}

ModelUploads::~ModelUploads() { ::close(fd_); }

absl::StatusOr<std::string> ModelUploads::Check(const ModelUpload& upload) const {
  if (!PlainName(upload.model)) {
    return Invalid("model", "a plain name (no '/', not starting with '.', at most 255 bytes)",
                   upload.model);
  }
  if (upload.files.empty()) return ConfigurationWithoutFiles(upload);
  uint64_t bytes = upload.config_json.size();
  bool has_model_file = false;
  std::vector<std::string> paths;
  for (const UploadedFile& file : upload.files) {
    absl::StatusOr<std::pair<std::string, std::string>> parts = SplitFilePath(file);
    if (!parts.ok()) return parts.status();
    has_model_file |= parts->second == "model.onnx";
    bytes += file.bytes.size();
    paths.push_back(file.path);
  }
  std::sort(paths.begin(), paths.end());
  if (std::adjacent_find(paths.begin(), paths.end()) != paths.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", upload.model, "': a file is sent twice"));
  }
  if (!has_model_file) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", upload.model,
                     "': expected a file VERSION/model.onnx (e.g. file:1/model.onnx), "
                     "received ",
                     upload.files.size(), " file(s) without one"));
  }
  if (bytes > max_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("model '", upload.model, "': ", bytes,
                     " bytes uploaded, more than --max-upload-bytes ", max_bytes_));
  }
  if (upload.config_json.empty()) return std::string();
  inference::ModelConfig config;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto parsed =
      google::protobuf::util::JsonStringToMessage(upload.config_json, &config, options);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(upload.config_field,
                     ": not a model configuration (inference.ModelConfig in "
                     "JSON): ",
                     ClientText(std::string(parsed.message()))));
  }
  if (!config.name().empty() && config.name() != upload.model) {
    return Invalid(absl::StrCat(upload.config_field, ".name"),
                   absl::StrCat("the model's name '", upload.model, "' or none"), config.name());
  }
  config.set_name(upload.model);
  std::string text;
  google::protobuf::TextFormat::PrintToString(config, &text);
  return text;
}

absl::Status ModelUploads::WriteStaging(const ModelUpload& upload, const std::string& config_text,
                                        const std::string& staging) const {
  const std::string staging_path = absl::StrCat(directory_, "/", staging);
  if (::mkdirat(fd_, staging.c_str(), 0700) != 0) return SysError("mkdir", staging_path);
  const int model_fd =
      ::openat(fd_, staging.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (model_fd < 0) return SysError("open", staging_path);
  absl::Status status;
  if (!config_text.empty()) {
    status = WriteFileAt(model_fd, "config.pbtxt", config_text, staging_path + "/config.pbtxt");
  }
  for (size_t i = 0; status.ok() && i < upload.files.size(); ++i) {
    const UploadedFile& file = upload.files[i];
    const std::pair<std::string, std::string> parts = *SplitFilePath(file);
    const std::string version_path = absl::StrCat(staging_path, "/", parts.first);
    if (::mkdirat(model_fd, parts.first.c_str(), 0700) != 0 && errno != EEXIST) {
      status = SysError("mkdir", version_path);
      break;
    }
    const int version_fd =
        ::openat(model_fd, parts.first.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (version_fd < 0) {
      status = SysError("open", version_path);
      break;
    }
    status = WriteFileAt(version_fd, parts.second, file.bytes, version_path + "/" + parts.second);
    if (status.ok() && ::fsync(version_fd) != 0) status = SysError("fsync", version_path);
    ::close(version_fd);
  }
  if (status.ok() && ::fsync(model_fd) != 0) status = SysError("fsync", staging_path);
  ::close(model_fd);
  return status;
}

absl::Status ModelUploads::Stage(const ModelUpload& upload) {
  absl::StatusOr<std::string> config_text = Check(upload);
  if (!config_text.ok()) return config_text.status();
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [model, previous] : pending_) {
      if (model == upload.model) {
        return absl::FailedPreconditionError(absl::StrCat(
            "model '", upload.model, "': another upload of it is still loading; send it again"));
      }
    }
    pending_.push_back({upload.model, ""});
  }
  const auto fail = [&](absl::Status status) {
    EndUpload(upload.model);
    return status;
  };
  const std::string staging = ".upload-" + RandomSuffix();
  if (absl::Status written = WriteStaging(upload, *config_text, staging); !written.ok()) {
    RemoveTree(fd_, staging, absl::StrCat(directory_, "/", staging));
    return fail(written);
  }
  // The current directory (if any) aside, the new one in its place.
  std::string previous = ".previous-" + RandomSuffix();
  if (::renameat(fd_, upload.model.c_str(), fd_, previous.c_str()) != 0) {
    if (errno != ENOENT) {
      absl::Status status = SysError("rename", absl::StrCat(directory_, "/", upload.model));
      RemoveTree(fd_, staging, absl::StrCat(directory_, "/", staging));
      return fail(status);
    }
    previous.clear();
  }
  if (::renameat(fd_, staging.c_str(), fd_, upload.model.c_str()) != 0) {
    absl::Status status = SysError("rename", absl::StrCat(directory_, "/", staging));
    if (!previous.empty()) ::renameat(fd_, previous.c_str(), fd_, upload.model.c_str());
    RemoveTree(fd_, staging, absl::StrCat(directory_, "/", staging));
    return fail(status);
  }
  ::fsync(fd_);
  absl::MutexLock lock(&mu_);
  for (auto& entry : pending_) {
    if (entry.first == upload.model) entry.second = previous;
  }
  return absl::OkStatus();
}

std::optional<std::string> ModelUploads::EndUpload(const std::string& model) {
  absl::MutexLock lock(&mu_);
  auto it = std::find_if(pending_.begin(), pending_.end(),
                         [&](const auto& entry) { return entry.first == model; });
  if (it == pending_.end()) return std::nullopt;
  std::string previous = std::move(it->second);
  pending_.erase(it);
  return previous;
}

void ModelUploads::Keep(const std::string& model) {
  const std::optional<std::string> previous = EndUpload(model);
  if (previous.has_value() && !previous->empty()) {
    RemoveTree(fd_, *previous, absl::StrCat(directory_, "/", *previous));
  }
}

void ModelUploads::Revert(const std::string& model) {
  const std::optional<std::string> ended = EndUpload(model);
  if (!ended.has_value()) return;
  const std::string& previous = *ended;
  const std::string failed = ".failed-" + RandomSuffix();
  if (::renameat(fd_, model.c_str(), fd_, failed.c_str()) == 0) {
    RemoveTree(fd_, failed, absl::StrCat(directory_, "/", failed));
  }
  if (!previous.empty() && ::renameat(fd_, previous.c_str(), fd_, model.c_str()) != 0) {
    LogWarning(absl::StrCat("model '", model, "': putting its previous files back from ",
                            directory_, "/", previous, ": ", std::strerror(errno)));
  }
  ::fsync(fd_);
}

absl::Status ModelUploads::Remove(const std::string& model) {
  if (!PlainName(model)) {
    return Invalid("model", "a plain name (no '/', not starting with '.', at most 255 bytes)",
                   model);
  }
  absl::MutexLock lock(&mu_);  // No Stage of it may start meanwhile.
  for (const auto& entry : pending_) {
    if (entry.first == model) {
      return absl::FailedPreconditionError(
          absl::StrCat("model '", model, "': an upload of it is loading"));
    }
  }
  const std::string removed = ".removed-" + RandomSuffix();
  if (::renameat(fd_, model.c_str(), fd_, removed.c_str()) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("model '", model, "' has no files under ", "--model-upload-root"));
    }
    return SysError("rename", absl::StrCat(directory_, "/", model));
  }
  RemoveTree(fd_, removed, absl::StrCat(directory_, "/", removed));
  ::fsync(fd_);
  return absl::OkStatus();
}

void UnloadModelAndUpload(ServingCore& core, ModelUploads* uploads, std::string model,
                          bool remove_upload, ServingCore::LoadDone done) {
  if (remove_upload && uploads == nullptr) {
    return std::move(done)(absl::FailedPreconditionError(
        absl::StrCat("remove_upload: model '", ClientText(model),
                     "' cannot have been uploaded: this server runs without --model-upload-root")));
  }
  core.UnloadModel(
      model, [uploads, model, remove_upload, done = std::move(done)](absl::Status status) mutable {
        if (status.ok() && remove_upload) status = uploads->Remove(model);
        std::move(done)(status);
      });
}

void LoadModelOrUpload(ServingCore& core, ModelUploads* uploads, ModelUpload upload,
                       ServingCore::LoadDone done) {
  if (upload.files.empty() && upload.config_json.empty()) {
    return core.LoadModel(std::move(upload.model), std::move(done));
  }
  if (upload.files.empty()) return std::move(done)(ConfigurationWithoutFiles(upload));
  // Protocol maps have no order: one order, so that every message names the same file.
  std::sort(upload.files.begin(), upload.files.end(),
            [](const UploadedFile& a, const UploadedFile& b) { return a.path < b.path; });
  if (uploads == nullptr) {
    return std::move(done)(absl::FailedPreconditionError(
        absl::StrCat("model '", ClientText(upload.model),
                     "': loading a model sent with the request needs --model-upload-root")));
  }
  if (absl::Status staged = uploads->Stage(upload); !staged.ok()) {
    return std::move(done)(staged);
  }
  std::string model = upload.model;
  core.LoadModel(model, [uploads, model, done = std::move(done)](absl::Status status) mutable {
    if (status.ok()) {
      uploads->Keep(model);
    } else {
      uploads->Revert(model);
    }
    std::move(done)(status);
  });
}

}  // namespace replicad
