#include "server/grpc/model_download.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "core/base/clock.h"
#include "server/grpc/call_context.h"
#include "server/grpc/grpc_status.h"

namespace replicad {
namespace {

constexpr char kMethod[] = "DownloadModel";

class ModelDownload final : public grpc::ServerWriteReactor<v1::ModelChunk> {
 public:
  ModelDownload(grpc::CallbackServerContext* context, ServerMetrics& metrics,
                const AccessTokens* tokens)
      : context_(context),
        metrics_(metrics),
        tokens_(tokens),
        start_(std::chrono::steady_clock::now()) {}

  void Start(ServingCore& core, const std::string& model) {
    if (absl::Status access = CheckAccess(context_, tokens_, kMethod); !access.ok()) {
      return End(access);
    }
    // The callback runs on the model's training thread; the reactor lives
    // until End's Finish completes, so `this` outlives it.
    core.ExportModel(model, [this](absl::StatusOr<TrainingSession::Exported> exported,
                                   std::shared_ptr<LoadedModel> loaded) {
      if (loaded != nullptr) model_ = loaded->name;
      if (!exported.ok()) return End(exported.status());
      if (exported->trained) {
        absl::Status access = CheckAccessAs(context_, tokens_, kMethod, Role::kTrain);
        if (!access.ok()) return End(access);
      }
      onnx_ = std::move(exported->onnx);
      chunk_.set_step(exported->step);
      chunk_.set_total_bytes(static_cast<int64_t>(onnx_.size()));
      WriteNext();
    });
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return End(absl::CancelledError("the client went away during the download"));
    chunk_.clear_step();
    chunk_.clear_total_bytes();
    if (sent_ == onnx_.size()) return End(absl::OkStatus());
    WriteNext();
  }

  void OnDone() override { delete this; }

 private:
  // The next piece (the first even for an empty file, to carry the sizes).
  void WriteNext() {
    const size_t bytes = std::min(kModelChunkBytes, onnx_.size() - sent_);
    chunk_.set_data(onnx_.data() + sent_, bytes);
    sent_ += bytes;
    StartWrite(&chunk_);
  }

  void End(const absl::Status& status) {
    metrics_.RecordRequest(model_, kMethod, status, SecondsSince(start_));
    Finish(ToGrpcStatus(status));
  }

  grpc::CallbackServerContext* const context_;
  ServerMetrics& metrics_;
  const AccessTokens* const tokens_;
  const std::chrono::steady_clock::time_point start_;
  std::string model_;  // For the metrics: known once found.
  std::string onnx_;
  size_t sent_ = 0;
  v1::ModelChunk chunk_;
};

}  // namespace

grpc::ServerWriteReactor<v1::ModelChunk>* StartModelDownload(
    grpc::CallbackServerContext* context, ServingCore& core, ServerMetrics& metrics,
    const AccessTokens* tokens, const v1::DownloadModelRequest& request) {
  auto* download = new ModelDownload(context, metrics, tokens);
  download->Start(core, request.model());
  return download;
}

}  // namespace replicad
