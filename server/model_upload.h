#ifndef REPLICAD_SERVER_MODEL_UPLOAD_H_
#define REPLICAD_SERVER_MODEL_UPLOAD_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/serve/serving_core.h"

namespace replicad {

// Models sent with a load request, as Triton's RepositoryModelLoad takes them
// (its `config` and `file:<path>` parameters; replicad.v1's LoadModel): their
// files are written under a directory the daemon owns (--model-upload-root),
// which the daemon's repository lists beside --model-repository, and the
// model is then loaded from there like any other.

// One file of an uploaded model: its path in the model's directory,
// "VERSION/NAME" (VERSION a positive integer, NAME a plain file name), its
// bytes, and what the request called it, for messages ("parameters.file:1/model.onnx").
// The bytes are the request's own, viewed, not copied (an upload may be a
// GiB): they must outlive ModelUploads::Stage, which writes them before it
// returns (LoadModelOrUpload stages before it returns too).
struct UploadedFile {
  std::string path;
  absl::string_view bytes;
  std::string field;
};

struct ModelUpload {
  std::string model;
  // inference.ModelConfig as JSON (Triton's `config`); empty: none. Written
  // as the model's config.pbtxt, so that it is read and checked as a
  // repository's would be.
  std::string config_json;
  std::string config_field = "parameters.config";
  std::vector<UploadedFile> files;
};

// The upload root. Every file operation is relative to the root's
// descriptor, creates with O_EXCL|O_NOFOLLOW and follows no link, so no
// path a client sends, and no link placed in the root, leads outside it.
// A model's upload is written whole beside the model's current directory
// (DIR/.upload-<random>), then swapped in (the current one moved aside to
// DIR/.previous-<random>); the load that follows keeps it (Keep) or puts
// the previous files back (Revert). One upload per model at a time.
// Thread-safe.
class ModelUploads {
 public:
  // Opens DIR (created with its parents when missing). `max_bytes` bounds one
  // upload's files and configuration together. InvalidArgument when DIR is
  // not a directory; the errno's code, naming it, when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<ModelUploads>> Open(const std::string& directory,
                                                            uint64_t max_bytes);
  ~ModelUploads();
  ModelUploads(const ModelUploads&) = delete;
  ModelUploads& operator=(const ModelUploads&) = delete;

  const std::string& directory() const { return directory_; }

  // Checks `upload` and swaps its files in as DIR/<model>. Nothing is
  // written when a check fails:
  //  - InvalidArgument naming the field, the expected and the received
  //    value: a model name that is not a plain name (empty, ".", "..",
  //    holding '/', starting with '.', control characters, over 255
  //    bytes); a file path other than VERSION/NAME; no VERSION/model.onnx;
  //    a configuration that is not a ModelConfig in JSON (unknown fields
  //    included) or names another model.
  //  - ResourceExhausted: more bytes than --max-upload-bytes.
  //  - Unimplemented: a configuration without files (Triton's override of
  //    a repository model's configuration).
  //  - FailedPrecondition: an upload of the same model is still loading.
  //  - The errno's code, naming the path, when writing fails (what was
  //    written is removed).
  absl::Status Stage(const ModelUpload& upload);
  // After the load of a staged model: Keep removes the previous files;
  // Revert puts them back (or removes the model's directory when it had
  // none). Either ends the model's upload.
  void Keep(const std::string& model);
  void Revert(const std::string& model);

  // Removes DIR/<model> (an unloaded upload the client is done with).
  // InvalidArgument for a name Stage would refuse; FailedPrecondition while
  // an upload of it loads; NotFound when the root holds no such model.
  absl::Status Remove(const std::string& model);

 private:
  ModelUploads(std::string directory, int fd, uint64_t max_bytes)
      : directory_(std::move(directory)), fd_(fd), max_bytes_(max_bytes) {}
  // The upload checked, and its config.pbtxt ("" without a configuration).
  absl::StatusOr<std::string> Check(const ModelUpload& upload) const;
  absl::Status WriteStaging(const ModelUpload& upload, const std::string& config_text,
                            const std::string& staging) const;
  // Ends `model`'s upload: where its previous directory went ("" none), or
  // nullopt when it had none pending.
  std::optional<std::string> EndUpload(const std::string& model);

  const std::string directory_;
  const int fd_;
  const uint64_t max_bytes_;
  absl::Mutex mu_;
  // Models between Stage and Keep/Revert, and where their previous
  // directory went ("": they had none).
  std::vector<std::pair<std::string, std::string>> pending_ ABSL_GUARDED_BY(mu_);
};

// What every protocol's load does: without files or a configuration, the
// repository's model (ServingCore::LoadModel); with them, Stage, then the
// load, then Keep or Revert as it went. `uploads` null (no
// --model-upload-root): FailedPrecondition saying so. `done` as LoadModel's.
void LoadModelOrUpload(ServingCore& core, ModelUploads* uploads, ModelUpload upload,
                       ServingCore::LoadDone done);

// ServingCore::UnloadModel, then, with `remove_upload`, ModelUploads::Remove
// (`uploads` null: FailedPrecondition naming --model-upload-root).
void UnloadModelAndUpload(ServingCore& core, ModelUploads* uploads, std::string model,
                          bool remove_upload, ServingCore::LoadDone done);

}  // namespace replicad

#endif  // REPLICAD_SERVER_MODEL_UPLOAD_H_
