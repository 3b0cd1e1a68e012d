#include "core/serve/servable.h"

#include "absl/strings/str_cat.h"

namespace replicad {

absl::Status CheckSliceCover(const std::vector<BatchSlice>& slices, int64_t batch, size_t slots) {
  if (batch <= 0) return absl::InvalidArgumentError("the batch is empty");
  int64_t next = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    const BatchSlice& slice = slices[i];
    if (slice.slot < 0 || static_cast<size_t>(slice.slot) >= slots || slice.begin != next ||
        slice.end <= slice.begin) {
      return absl::InvalidArgumentError(absl::StrCat(
          "slice ", i, ": expected rows from ", next, " on one of ", slots,
          " slots, received rows [", slice.begin, ", ", slice.end, ") on slot ", slice.slot));
    }
    next = slice.end;
  }
  if (next != batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("the slices cover ", next, " of the batch's ", batch, " rows"));
  }
  return absl::OkStatus();
}

void Servable::Predict(std::vector<Tensor> inputs, OutputSink* sink, Done done) {
  const std::vector<SlotStatus> slots = Slots();
  std::vector<int> healthy;
  std::vector<double> weights;
  absl::Status fault;
  for (size_t s = 0; s < slots.size(); ++s) {
    if (slots[s].health.ok()) {
      healthy.push_back(static_cast<int>(s));
      weights.push_back(slots[s].weight);
    } else if (fault.ok()) {
      fault = slots[s].health;
    }
  }
  if (healthy.empty()) {
    std::move(done)(
        absl::UnavailableError(absl::StrCat("no slot can run the model: ", fault.message())), {});
    return;
  }
  const int64_t batch = inputs.empty() || inputs[0].shape().empty() ? 0 : inputs[0].shape()[0];
  // A model that mixes its rows runs whole on the first healthy slot.
  if (!model().row_mixing().empty()) weights.resize(1);
  std::vector<BatchSlice> slices = SplitBatch(batch, weights);
  for (BatchSlice& slice : slices) slice.slot = healthy[slice.slot];
  Run(std::move(inputs), std::move(slices), sink, nullptr, std::move(done));
}

}  // namespace replicad
