// The losses of training graphs (core/ops/training_ops.h). Each writes the
// sum of its rows' losses and the gradient of that sum: the reducer divides
// by the global batch, so a row weighs the same whichever slot ran it.

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/cpu/kernels/kernel_builders.h"

namespace replicad {
namespace {

class SoftmaxCrossEntropyKernel : public Kernel {
 public:
  SoftmaxCrossEntropyKernel(int64_t rows, int64_t classes, bool labels)
      : rows_(rows), classes_(classes), labels_(labels) {}

  absl::Status Run(const RunContext& run, const void* const* inputs,
                   void* const* outputs) override {
    const float* logits = static_cast<const float*>(inputs[0]);
    float* dlogits = static_cast<float*>(outputs[2]);
    double loss = 0;
    int64_t correct = 0;
    for (int64_t r = 0; r < rows_; ++r) {
      const float* row = logits + r * classes_;
      float* grad = dlogits + r * classes_;
      int64_t argmax = 0;
      for (int64_t c = 1; c < classes_; ++c) {
        if (row[c] > row[argmax]) argmax = c;
      }
      // log-sum-exp shifted by the maximum, in double: exp of a large logit
      // would overflow float.
      double sum = 0;
      for (int64_t c = 0; c < classes_; ++c) sum += std::exp(double(row[c]) - row[argmax]);
      const double log_sum = std::log(sum) + row[argmax];
      if (labels_) {
        const int64_t label = static_cast<const int64_t*>(inputs[1])[r];
        if (label < 0 || label >= classes_) {
          // Named by its row in the whole batch, not in this slot's slice.
          return absl::InvalidArgumentError(absl::StrCat("targets[", run.first_row + r,
                                                         "] must be a class in [0, ", classes_,
                                                         "), received ", label));
        }
        loss += log_sum - row[label];
        correct += argmax == label;
        for (int64_t c = 0; c < classes_; ++c) {
          grad[c] = static_cast<float>(std::exp(double(row[c]) - log_sum) - (c == label ? 1 : 0));
        }
      } else {
        const float* target = static_cast<const float*>(inputs[1]) + r * classes_;
        double target_sum = 0;
        int64_t target_argmax = 0;
        for (int64_t c = 0; c < classes_; ++c) {
          loss -= target[c] * (double(row[c]) - log_sum);
          target_sum += target[c];
          if (target[c] > target[target_argmax]) target_argmax = c;
        }
        correct += argmax == target_argmax;
        // d/dlogit_c of -sum_k t_k log softmax_k = softmax_c * sum(t) - t_c.
        for (int64_t c = 0; c < classes_; ++c) {
          grad[c] = static_cast<float>(std::exp(double(row[c]) - log_sum) * target_sum - target[c]);
        }
      }
    }
    *static_cast<float*>(outputs[0]) = static_cast<float>(loss);
    *static_cast<float*>(outputs[1]) = static_cast<float>(correct);
    return absl::OkStatus();
  }

 private:
  int64_t rows_, classes_;
  bool labels_;
};

class MeanSquaredErrorKernel : public Kernel {
 public:
  MeanSquaredErrorKernel(int64_t rows, int64_t row_size) : rows_(rows), row_size_(row_size) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float* y = static_cast<const float*>(inputs[0]);
    const float* t = static_cast<const float*>(inputs[1]);
    float* dy = static_cast<float*>(outputs[1]);
    double loss = 0;
    const double scale = 1.0 / static_cast<double>(row_size_);
    for (int64_t i = 0; i < rows_ * row_size_; ++i) {
      const double diff = double(y[i]) - t[i];
      loss += diff * diff * scale;
      dy[i] = static_cast<float>(2 * diff * scale);
    }
    *static_cast<float*>(outputs[0]) = static_cast<float>(loss);
    return absl::OkStatus();
  }

 private:
  int64_t rows_, row_size_;
};

}  // namespace

KernelOrStatus MakeSoftmaxCrossEntropyKernel(const KernelSpec& spec, CpuKernelContext&) {
  const Shape& logits = spec.inputs[0]->shape;
  return std::make_unique<SoftmaxCrossEntropyKernel>(logits[0], logits[1],
                                                     spec.inputs[1]->dtype == DType::kInt64);
}

KernelOrStatus MakeMeanSquaredErrorKernel(const KernelSpec& spec, CpuKernelContext&) {
  const Shape& y = spec.inputs[0]->shape;
  const int64_t rows = y[0];
  return std::make_unique<MeanSquaredErrorKernel>(rows, rows == 0 ? 0 : NumElements(y) / rows);
}

}  // namespace replicad
