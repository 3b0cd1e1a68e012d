#include "core/serve/servable.h"

#include "absl/strings/str_cat.h"

namespace replicad {

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
