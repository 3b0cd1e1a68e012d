#ifndef REPLICAD_SERVER_HTTP_INFER_EXCHANGE_H_
#define REPLICAD_SERVER_HTTP_INFER_EXCHANGE_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/serve/loaded_model.h"
#include "inference/grpc_service.pb.h"
#include "server/http/http_server.h"
#include "server/http/json_body.h"
#include "server/inference_protocol.h"
#include "server/inference_request.h"

namespace replicad {

// One inference over HTTP, from the parsed body to the written answer. Owns
// every byte the core's request views (the body, JSON data converted) and
// the outputs until the answer is sent.
class InferExchange : public InferOutputs {
 public:
  explicit InferExchange(HttpRequest request) : request_(std::move(request)) {}

  // Parses the body into `protocol_` and the bytes of each input.
  absl::Status Parse(const std::string& model, const std::string& version);

  const inference::ModelInferRequest& protocol() const { return protocol_; }
  const std::vector<WireBytes>& input_bytes() const { return input_bytes_; }
  // Where the decoder placed tensors in shared memory.
  void Placed(std::map<std::string, TensorRegion> outputs, InputMemory inputs);

  // The answer: JSON, with the binary outputs after it when there are any.
  HttpResponse Answer(const LoadedModel& model) const;

 private:
  struct Output {
    std::string name;
    TensorType type;
    std::vector<char> bytes;  // Not a string: a short string's bytes move with it.
    std::optional<TensorRegion> region;
    bool binary = false;
  };

  // What input and output tensors share: an object with a "name" and
  // optional "parameters". Returns how messages name the tensor.
  template <typename Tensor>
  static absl::StatusOr<std::string> ParseTensor(const json& object, const std::string& field,
                                                 Tensor* tensor);

  absl::Status ParseInput(const json& input, size_t i, absl::string_view binary,
                          size_t* binary_used);

  absl::Status ParseOutput(const json& output, size_t i);

  absl::StatusOr<void*> Place(const TensorSpec& spec, const TensorType& type,
                              const TensorRegion* region) override;

  static json DataOf(const Output& o);

  HttpRequest request_;                    // The binary inputs view its body.
  inference::ModelInferRequest protocol_;  // The request without tensor bytes.
  std::vector<WireBytes> input_bytes_;
  std::vector<std::vector<char>> json_data_;  // JSON data, as each input's elements.
  bool default_binary_ = false;
  std::map<std::string, bool> binary_outputs_;
  std::vector<Output> outputs_;
};

}  // namespace replicad

#endif  // REPLICAD_SERVER_HTTP_INFER_EXCHANGE_H_
