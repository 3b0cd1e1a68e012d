#ifndef REPLICAD_CLIENT_TRAIN_PROGRESS_H_
#define REPLICAD_CLIENT_TRAIN_PROGRESS_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

namespace replicad::client {

// Where a training epoch stands.
struct EpochProgress {
  int64_t epoch = 1;  // 1-based, as printed.
  int64_t epochs = 1;
  int64_t done = 0;                // Samples trained so far in this epoch.
  int64_t total = 0;               // Samples in this epoch.
  double seconds = 0;              // Wall time since the epoch began.
  double mean_loss = 0;            // Sample-weighted over the steps so far.
  std::optional<double> accuracy;  // Likewise; none when the server reports none.
};

// The progress of `replicactl train` on one stream (stderr), in two forms:
//  - interactive (a terminal): one line redrawn in place with '\r', e.g.
//      epoch 1/5 [######..............] 18000/60000  5120 samples/s  loss 0.6231  accuracy 0.7810
//    at most every 0.1 s of the epoch's time, and always at its last step;
//  - otherwise (a pipe or log file): one whole line per tenth of the epoch,
//      epoch 1/5: 6000/60000 samples (10%), 5120 samples/s, loss 0.9102, accuracy 0.6811
//    so that logs grow by about ten lines per epoch, however many steps it has.
// Not thread-safe: one training loop drives it. `out` must outlive it.
class ProgressLine {
 public:
  ProgressLine(std::ostream& out, bool interactive);

  // After every step. A new `epoch` value starts the counting afresh.
  void Update(const EpochProgress& progress);
  // Erases the interactive line, so that what is printed next starts on a clean
  // line; nothing otherwise.
  void Clear();

 private:
  std::ostream& out_;
  const bool interactive_;
  int64_t epoch_ = -1;
  double last_draw_seconds_ = 0;
  int64_t tenths_printed_ = 0;
  size_t drawn_width_ = 0;  // Of the interactive line now on screen; 0: none.
};

}  // namespace replicad::client

#endif  // REPLICAD_CLIENT_TRAIN_PROGRESS_H_
