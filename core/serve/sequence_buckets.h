#ifndef REPLICAD_CORE_SERVE_SEQUENCE_BUCKETS_H_
#define REPLICAD_CORE_SERVE_SEQUENCE_BUCKETS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/model.h"
#include "core/serve/servable.h"
#include "core/tensor/tensor.h"

namespace replicad {

// Padding requests of a model with an open sequence dim (token ids [N, S])
// to a few lengths (SchedulerOptions::sequence_buckets), so that requests of
// nearby lengths share one plan and fuse into one batch. The model's inputs
// whose dim 1 it leaves open must all hold the same length L; they are
// padded with zeros (a padding token id 0, an attention mask of 0) to the
// smallest bucket B >= L. Outputs whose dim 1 the model leaves open and that
// come back B long are cut back to L; others (a pooled classifier's logits)
// are the answer as they are. This gives the unpadded answer only for models
// that ignore what follows a sequence's end: one that masks by its attention
// mask input, or causal attention. A bidirectional model without a mask
// input would answer differently, which is why buckets are opt-in per model.
class SequenceBucketPadding : public OutputSink {
 public:
  // The padded request for `inputs` (validated against `model`), or null
  // where it needs none: no open dim 1, lengths that differ, a length
  // already a bucket or above the largest.
  static std::unique_ptr<SequenceBucketPadding> For(const Model& model,
                                                    const std::vector<Tensor>& inputs,
                                                    const std::vector<int64_t>& buckets,
                                                    OutputSink* answer);

  // The inputs padded to the bucket (the others as they were).
  std::vector<Tensor>& inputs() { return inputs_; }
  int64_t length() const { return length_; }
  int64_t bucket() const { return bucket_; }

  // OutputSink: an output to cut gets a padded buffer of this object's and
  // its cut type from `answer`; any other goes straight to `answer`.
  absl::StatusOr<void*> Allocate(int index, const TensorType& type) override;

  // Copies every cut output's first L positions of dim 1 into `answer`'s
  // buffer. Call once the run has written the outputs.
  void CutOutputs();

 private:
  SequenceBucketPadding(const Model& model, OutputSink* answer, int64_t length, int64_t bucket)
      : model_(model), answer_(answer), length_(length), bucket_(bucket) {}

  struct Cut {
    Tensor padded;
    void* answer = nullptr;
  };

  const Model& model_;
  OutputSink* answer_;
  int64_t length_, bucket_;
  std::vector<Tensor> inputs_;
  std::vector<Cut> cuts_;
};

}  // namespace replicad

#endif  // REPLICAD_CORE_SERVE_SEQUENCE_BUCKETS_H_
