#ifndef REPLICAD_SERVER_CHECKPOINT_ROTATION_H_
#define REPLICAD_SERVER_CHECKPOINT_ROTATION_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace replicad {

// The checkpoints a model's training writes into its checkpoint_dir (every
// checkpoint_every_steps, or SaveCheckpoint with no path) are numbered by
// step, so a new one never replaces an older one:
//   DIR/MODEL-step000001200.onnx, with its ".state" file beside it
// (core/train/checkpoint.h). The newest `keep` stay; older ones are removed
// once a newer one is whole on disk, so at least one good checkpoint always
// exists after the first. Checkpoints a client names by path are not
// numbered and never removed.

// DIR/MODEL-stepNNNNNNNNN.onnx (the step zero-padded to nine digits, so a
// directory listing sorts by step).
std::string NumberedCheckpointPath(const std::string& directory, const std::string& model,
                                   int64_t step);

// Removes MODEL's numbered checkpoints in `directory` (both files of each)
// but the `keep` of the highest steps; keep < 1 counts as 1. Files that do
// not match the pattern exactly are left alone, and so are symbolic links
// (never followed). The first failing unlink is returned, naming the path;
// the rest are still tried.
absl::Status PruneNumberedCheckpoints(const std::string& directory, const std::string& model,
                                      int keep);

}  // namespace replicad

#endif  // REPLICAD_SERVER_CHECKPOINT_ROTATION_H_
