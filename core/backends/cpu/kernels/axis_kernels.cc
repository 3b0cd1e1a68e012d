// ArgMax, ArgMin, Hardmax, CumSum and TopK (core/ops/axis_attributes.h): loops
// over the lines of input 0, each line on its own, so lines run in parallel
// on the slot's OpenMP team once there is enough work.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/backends/cpu/kernels/kernel_builders.h"
#include "core/base/status_macros.h"
#include "core/ops/axis_attributes.h"
#include "core/ops/op_util.h"

namespace replicad {
namespace {

// Below this many input elements one thread does the whole op.
constexpr int64_t kParallelMin = 1 << 15;

// Whether a sorts before b in the order "greatest first" (NaN above all).
template <typename T>
bool Greater(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return b == b;
  }
  return a > b;
}

// Whether a sorts before b in the order "least first" (NaN below all).
template <typename T>
bool Less(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return b == b;
  }
  return a < b;
}

// The index in [0, n) of the first (or last) element of the line at `line`
// (elements `stride` apart) that no other one beats in order `beats`.
template <typename T, typename Beats>
int64_t BestIndex(const T* line, int64_t n, int64_t stride, bool last, Beats beats) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    const T x = line[i * stride];
    const T b = line[best * stride];
    if (beats(x, b) || (last && !beats(b, x))) best = i;
  }
  return best;
}

template <typename T>
class ArgReduceKernel : public Kernel {
 public:
  ArgReduceKernel(const ArgReduceAttributes& attributes, bool max)
      : lines_(attributes.lines), last_(attributes.last_index), max_(max) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const T* in = static_cast<const T*>(inputs[0]);
    int64_t* out = static_cast<int64_t*>(outputs[0]);
    const int64_t n = lines_.axis_dim;
    const int64_t inner = lines_.inner;
    const int64_t count = lines_.outer * inner;
#pragma omp parallel for schedule(static) if (count * n >= kParallelMin)
    for (int64_t l = 0; l < count; ++l) {
      const T* line = in + (l / inner) * n * inner + l % inner;
      out[l] = max_ ? BestIndex(line, n, inner, last_, Greater<T>)
                    : BestIndex(line, n, inner, last_, Less<T>);
    }
    return absl::OkStatus();
  }

 private:
  AxisLines lines_;
  bool last_;
  bool max_;
};

class HardmaxKernel : public Kernel {
 public:
  explicit HardmaxKernel(const AxisLines& lines) : lines_(lines) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const float* in = static_cast<const float*>(inputs[0]);
    float* out = static_cast<float*>(outputs[0]);
    const int64_t n = lines_.axis_dim;
    const int64_t inner = lines_.inner;
    std::fill(out, out + lines_.outer * n * inner, 0.0f);
    for (int64_t l = 0; l < lines_.outer * inner; ++l) {
      const int64_t start = (l / inner) * n * inner + l % inner;
      // Hardmax's reference (numpy's argmax) takes the first greatest.
      out[start + BestIndex(in + start, n, inner, false, Greater<float>) * inner] = 1.0f;
    }
    return absl::OkStatus();
  }

 private:
  AxisLines lines_;
};

template <typename T>
class CumSumKernel : public Kernel {
 public:
  explicit CumSumKernel(const CumSumAttributes& attributes) : attributes_(attributes) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const T* in = static_cast<const T*>(inputs[0]);
    T* out = static_cast<T*>(outputs[0]);
    const AxisLines& lines = attributes_.lines;
    const int64_t n = lines.axis_dim;
    const int64_t inner = lines.inner;
    // Whole rows of `inner` elements at a time, so the adds vectorize.
    for (int64_t o = 0; o < lines.outer; ++o) {
      const T* in_block = in + o * n * inner;
      T* out_block = out + o * n * inner;
      for (int64_t step = 0; step < n; ++step) {
        const int64_t i = attributes_.reverse ? n - 1 - step : step;
        const int64_t previous = attributes_.reverse ? i + 1 : i - 1;
        T* row = out_block + i * inner;
        const T* own = in_block + i * inner;
        if (step == 0) {
          for (int64_t j = 0; j < inner; ++j) row[j] = attributes_.exclusive ? T{0} : own[j];
          continue;
        }
        const T* before = out_block + previous * inner;
        const T* added = attributes_.exclusive ? in_block + previous * inner : own;
        for (int64_t j = 0; j < inner; ++j) row[j] = static_cast<T>(before[j] + added[j]);
      }
    }
    return absl::OkStatus();
  }

 private:
  CumSumAttributes attributes_;
};

template <typename T>
class TopKKernel : public Kernel {
 public:
  explicit TopKKernel(const TopKAttributes& attributes)
      : attributes_(attributes), order_(attributes.lines.axis_dim) {}

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    const T* in = static_cast<const T*>(inputs[0]);
    T* values = static_cast<T*>(outputs[0]);
    int64_t* indices = static_cast<int64_t*>(outputs[1]);
    const AxisLines& lines = attributes_.lines;
    const int64_t n = lines.axis_dim;
    const int64_t k = attributes_.k;
    const int64_t inner = lines.inner;
    for (int64_t l = 0; l < lines.outer * inner; ++l) {
      const int64_t o = l / inner;
      const int64_t j = l % inner;
      const T* line = in + o * n * inner + j;
      for (int64_t i = 0; i < n; ++i) order_[i] = i;
      // Strict weak order on (value, index): equal values keep index order.
      auto before = [&](int64_t a, int64_t b) {
        const T x = line[a * inner];
        const T y = line[b * inner];
        // NaN counts as greater than every number either way (PyTorch's
        // topk): first among the largest, last among the smallest.
        const bool ahead = attributes_.largest ? Greater(x, y) : Greater(y, x);
        const bool behind = attributes_.largest ? Greater(y, x) : Greater(x, y);
        return ahead || (!behind && a < b);
      };
      std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), before);
      for (int64_t r = 0; r < k; ++r) {
        const int64_t at = o * k * inner + r * inner + j;
        values[at] = line[order_[r] * inner];
        indices[at] = order_[r];
      }
    }
    return absl::OkStatus();
  }

 private:
  TopKAttributes attributes_;
  std::vector<int64_t> order_;  // Sized here so that Run does not allocate.
};

}  // namespace

KernelOrStatus MakeArgReduceKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(ArgReduceAttributes attributes, ParseArgReduce(spec));
  return VisitDType(spec.inputs[0]->dtype, [&](auto traits) -> KernelOrStatus {
    using T = typename decltype(traits)::Type;
    return std::make_unique<ArgReduceKernel<T>>(attributes, spec.op_type == "ArgMax");
  });
}

KernelOrStatus MakeHardmaxKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(AxisLines lines, ParseHardmax(spec));
  return std::make_unique<HardmaxKernel>(lines);
}

KernelOrStatus MakeCumSumKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(CumSumAttributes attributes, ParseCumSum(spec));
  return VisitDType(spec.inputs[0]->dtype, [&](auto traits) -> KernelOrStatus {
    using T = typename decltype(traits)::Type;
    return std::make_unique<CumSumKernel<T>>(attributes);
  });
}

KernelOrStatus MakeTopKKernel(const KernelSpec& spec, CpuKernelContext&) {
  REPLICAD_ASSIGN_OR_RETURN(TopKAttributes attributes, ParseTopK(spec));
  return VisitDType(spec.inputs[0]->dtype, [&](auto traits) -> KernelOrStatus {
    using T = typename decltype(traits)::Type;
    return std::make_unique<TopKKernel<T>>(attributes);
  });
}

}  // namespace replicad
