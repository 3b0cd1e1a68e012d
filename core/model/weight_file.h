#ifndef REPLICAD_CORE_MODEL_WEIGHT_FILE_H_
#define REPLICAD_CORE_MODEL_WEIGHT_FILE_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/model/model.h"

namespace replicad {

// A model's large weights in a file of their own, mapped into memory, so
// that the template's copy need not stay resident. A CPU slot's kernels keep
// most weights in oneDNN's blocked layouts (one copy per process) and a GPU
// slot holds its own copy on the device: once the replicas are built, the
// template's row-major bytes are read only to build a plan that needs a new
// layout, to start training or to save a checkpoint. In anonymous memory they
// were a second copy of every weight (14 torchvision models on two CPU
// slots: 1.9 GB against ONNX Runtime's 1.2 GB); in a file they leave the
// process's resident memory after warm-up (ReleaseResidentPages) and come
// back from the page cache, or the disk, on the next read.
//
// The file is created unlinked (O_TMPFILE, else a name removed at once),
// with its blocks reserved before anything is written (a full disk fails
// here with ResourceExhausted, never later as a SIGBUS), and lives as long
// as any tensor viewing it. It is mapped shared and writable, so the pages
// the kernel drops are never lost. Nothing else can open it.
class WeightFile {
 public:
  ~WeightFile();
  WeightFile(const WeightFile&) = delete;
  WeightFile& operator=(const WeightFile&) = delete;

  size_t bytes() const { return bytes_; }
  // Drops the weights' pages from this process's resident memory (madvise
  // MADV_DONTNEED on a shared file mapping: their bytes stay in the file).
  void ReleaseResidentPages() const;

 private:
  friend absl::StatusOr<std::shared_ptr<const Model>> WithWeightsInFile(
      std::shared_ptr<const Model> model, const std::string& directory, size_t min_bytes);
  WeightFile(char* base, size_t bytes) : base_(base), bytes_(bytes) {}
  char* const base_;
  const size_t bytes_;
};

// `model` with every initializer of at least `min_bytes` moved into a new
// WeightFile in `directory` (the model itself when none is that large).
// Errors leave `model` as it was: NotFound or PermissionDenied when the
// directory cannot hold the file, ResourceExhausted when its filesystem has
// no room, naming the directory and the bytes.
absl::StatusOr<std::shared_ptr<const Model>> WithWeightsInFile(std::shared_ptr<const Model> model,
                                                               const std::string& directory,
                                                               size_t min_bytes);

// Whether files in `directory` live in memory (tmpfs, ramfs): a WeightFile
// there would save nothing.
bool IsMemoryBackedDirectory(const std::string& directory);

}  // namespace replicad

#endif  // REPLICAD_CORE_MODEL_WEIGHT_FILE_H_
