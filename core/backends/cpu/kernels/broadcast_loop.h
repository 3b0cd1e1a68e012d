#ifndef REPLICAD_CORE_BACKENDS_CPU_KERNELS_BROADCAST_LOOP_H_
#define REPLICAD_CORE_BACKENDS_CPU_KERNELS_BROADCAST_LOOP_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "core/device/kernel.h"
#include "core/ops/broadcast.h"
#include "core/tensor/shape.h"

namespace replicad {

// Internal to the CPU kernels: out = op(in_0, ..., in_k) element by element
// with numpy broadcasting of every input to the output's shape, for what
// oneDNN has no primitive for (integer and bool data, comparisons, Where,
// float32 operands that both broadcast, forms oneDNN only has a reference
// implementation of). Strides of broadcast dims are 0; the innermost dim
// runs as a tight loop, rows in parallel on the slot's team. `Op` is default-constructed and
// called as op(In_0, ..., In_k) -> Out.
template <typename Op, typename Out, typename... Ins>
class BroadcastLoopKernel : public Kernel {
 public:
  static constexpr size_t kInputs = sizeof...(Ins);

  BroadcastLoopKernel(const std::array<Shape, kInputs>& inputs, const Shape& out) {
    std::array<std::vector<int64_t>, kInputs> strides;
    for (size_t i = 0; i < kInputs; ++i) strides[i] = Strides(inputs[i], out);
    Collapse(out, strides);
  }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    RunRows(inputs, static_cast<Out*>(outputs[0]), std::index_sequence_for<Ins...>{});
    return absl::OkStatus();
  }

 private:
  // Below this many output elements one thread does the whole op.
  static constexpr int64_t kParallelMin = int64_t{1} << 15;

  template <size_t... I>
  void RunRows(const void* const* inputs, Out* out, std::index_sequence<I...>) {
    const int64_t total = NumElements(out_);
    if (total == 0) return;
    const std::tuple<const Ins*...> data{static_cast<const Ins*>(inputs[I])...};
    const int rank = static_cast<int>(out_.size());
    const int64_t inner = rank == 0 ? 1 : out_.back();
    std::array<int64_t, kInputs> inner_strides{};
    bool unit = true;  // Every input runs along the row (no broadcast in it).
    for (size_t i = 0; i < kInputs; ++i) {
      inner_strides[i] = rank == 0 ? 0 : strides_[i].back();
      unit &= inner_strides[i] == 1;
    }
    const int64_t rows = total / inner;
#pragma omp parallel for schedule(static) if (total >= kParallelMin)
    for (int64_t row = 0; row < rows; ++row) {
      // The row's offset in each input, from its index (rows are
      // independent, so threads take any of them).
      std::array<int64_t, kInputs> offsets{};
      int64_t rest = row;
      for (int d = rank - 2; d >= 0; --d) {
        const int64_t index = rest % out_[d];
        rest /= out_[d];
        for (size_t i = 0; i < kInputs; ++i) offsets[i] += index * strides_[i][d];
      }
      Op op;
      Out* out_row = out + row * inner;
      if (unit) {
        const std::tuple<const Ins*...> at{std::get<I>(data) + offsets[I]...};
        for (int64_t j = 0; j < inner; ++j) out_row[j] = op(std::get<I>(at)[j]...);
      } else {
        for (int64_t j = 0; j < inner; ++j) {
          out_row[j] = op(std::get<I>(data)[offsets[I] + j * inner_strides[I]]...);
        }
      }
    }
  }

  static std::vector<int64_t> Strides(const Shape& shape, const Shape& out) {
    const Shape padded = PadToRank(shape, out.size());
    std::vector<int64_t> strides(out.size(), 0);
    int64_t stride = 1;
    for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
      strides[d] = padded[d] == 1 ? 0 : stride;
      stride *= padded[d];
    }
    return strides;
  }

  // Drops dims of 1 and merges each dim into the next where every input
  // steps through both alike (both broadcast, or both contiguous): the
  // attention mask added to scores [1, 64, 3, 49, 49] + [1, 64, 1, 49, 49]
  // becomes [64, 3, 2401] + [64, 1, 2401], rows long enough to vectorize.
  void Collapse(const Shape& out, const std::array<std::vector<int64_t>, kInputs>& strides) {
    for (size_t d = 0; d < out.size(); ++d) {
      if (out[d] == 1) continue;
      bool merges = !out_.empty();
      for (size_t i = 0; merges && i < kInputs; ++i) {
        merges = strides_[i].back() == strides[i][d] * out[d];
      }
      if (merges) {
        out_.back() *= out[d];
        for (size_t i = 0; i < kInputs; ++i) strides_[i].back() = strides[i][d];
        continue;
      }
      out_.push_back(out[d]);
      for (size_t i = 0; i < kInputs; ++i) strides_[i].push_back(strides[i][d]);
    }
  }

  Shape out_;  // The output's shape, collapsed (rank 0 for one element).
  std::array<std::vector<int64_t>, kInputs> strides_;  // Per input, per collapsed dim.
};

// A binary BroadcastLoopKernel: out = op(A, B).
template <typename Op, typename Out, typename A = Out, typename B = A>
std::unique_ptr<Kernel> MakeBinaryLoop(const Shape& a, const Shape& b, const Shape& out) {
  return std::make_unique<BroadcastLoopKernel<Op, Out, A, B>>(std::array<Shape, 2>{a, b}, out);
}

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_BROADCAST_LOOP_H_
