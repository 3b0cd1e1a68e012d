#ifndef REPLICAD_CORE_TRAIN_CHECKPOINT_ROTATION_H_
#define REPLICAD_CORE_TRAIN_CHECKPOINT_ROTATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/train/checkpoint_directory.h"

namespace replicad {

// The checkpoints a model's training writes into its checkpoint_dir (every
// checkpoint_every_steps, or SaveCheckpoint with no path) are numbered by
// step, so a new one never replaces an older one:
//   DIR/MODEL-step000001200.onnx, with its ".state" file beside it
// (core/train/checkpoint.h; a '/' in MODEL becomes '_'). Each carries the
// id of the run of training that wrote it ("replicad.run_id": drawn when a
// model starts training, kept when it restarts from one of its run's
// checkpoints), and a run removes only its own: the `keep` it wrote last
// stay; older ones are removed only once a newer one is whole on disk, and
// never the one just written or the one the model was loaded from, so a
// good checkpoint always exists after the first. Another run's checkpoints
// in the same directory (an earlier daemon's, another replica's), and files
// with no run id, are never removed. Checkpoints a client names by path are
// not numbered and never removed.

// DIR/MODEL-stepNNNNNNNNN.onnx (the step zero-padded to nine digits, so a
// directory listing sorts by step).
std::string NumberedCheckpointPath(const std::string& directory, const std::string& model,
                                   int64_t step);
// Its file name alone: MODEL-stepNNNNNNNNN.onnx.
std::string NumberedCheckpointName(const std::string& model, int64_t step);

// Removes MODEL's numbered checkpoints in `directory` (both files of each)
// that run `run_id` wrote, but the `keep` of them written last (by
// modification time; by step among equal times) and those named in `spare`
// (full paths); keep < 1 counts as 1; an empty run_id removes nothing.
// Written last, not highest step: a run restarted from an older checkpoint
// writes lower steps than files already there, and those must not be the
// ones to go. Files that do not match the pattern exactly, that belong to
// another run or to none, or that cannot be read are left alone, and so are
// symbolic links (never followed). Every operation is relative to the open
// directory. The first failing unlink is returned, naming the path; the
// rest are still tried.
absl::Status PruneNumberedCheckpoints(const CheckpointDirectory& directory,
                                      const std::string& model, int keep, const std::string& run_id,
                                      const std::vector<std::string>& spare = {});

}  // namespace replicad

#endif  // REPLICAD_CORE_TRAIN_CHECKPOINT_ROTATION_H_
