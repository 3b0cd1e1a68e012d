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
// float32 operands that both broadcast). Strides of broadcast dims are 0;
// the innermost dim runs as a tight loop. `Op` is default-constructed and
// called as op(In_0, ..., In_k) -> Out.
template <typename Op, typename Out, typename... Ins>
class BroadcastLoopKernel : public Kernel {
 public:
  static constexpr size_t kInputs = sizeof...(Ins);

  BroadcastLoopKernel(const std::array<Shape, kInputs>& inputs, const Shape& out)
      : out_(out), index_(out.size()) {
    for (size_t i = 0; i < kInputs; ++i) strides_[i] = Strides(inputs[i], out);
  }

  absl::Status Run(const RunContext&, const void* const* inputs, void* const* outputs) override {
    RunRows(inputs, static_cast<Out*>(outputs[0]), std::index_sequence_for<Ins...>{});
    return absl::OkStatus();
  }

 private:
  template <size_t... I>
  void RunRows(const void* const* inputs, Out* out, std::index_sequence<I...>) {
    const int64_t total = NumElements(out_);
    if (total == 0) return;
    const std::tuple<const Ins*...> data{static_cast<const Ins*>(inputs[I])...};
    const int rank = static_cast<int>(out_.size());
    const int64_t inner = rank == 0 ? 1 : out_.back();
    std::array<int64_t, kInputs> inner_strides{};
    for (size_t i = 0; i < kInputs; ++i) inner_strides[i] = rank == 0 ? 0 : strides_[i].back();
    std::fill(index_.begin(), index_.end(), 0);
    Op op;
    for (int64_t row = 0; row < total / inner; ++row) {
      std::array<int64_t, kInputs> offsets{};
      for (int d = 0; d + 1 < rank; ++d) {
        for (size_t i = 0; i < kInputs; ++i) offsets[i] += index_[d] * strides_[i][d];
      }
      Out* out_row = out + row * inner;
      for (int64_t j = 0; j < inner; ++j) {
        out_row[j] = op(std::get<I>(data)[offsets[I] + j * inner_strides[I]]...);
      }
      for (int d = rank - 2; d >= 0; --d) {
        if (++index_[d] < out_[d]) break;
        index_[d] = 0;
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

  Shape out_;
  std::array<std::vector<int64_t>, kInputs> strides_;
  std::vector<int64_t> index_;  // Sized here so that Run does not allocate.
};

// A binary BroadcastLoopKernel: out = op(A, B).
template <typename Op, typename Out, typename A = Out, typename B = A>
std::unique_ptr<Kernel> MakeBinaryLoop(const Shape& a, const Shape& b, const Shape& out) {
  return std::make_unique<BroadcastLoopKernel<Op, Out, A, B>>(std::array<Shape, 2>{a, b}, out);
}

}  // namespace replicad

#endif  // REPLICAD_CORE_BACKENDS_CPU_KERNELS_BROADCAST_LOOP_H_
