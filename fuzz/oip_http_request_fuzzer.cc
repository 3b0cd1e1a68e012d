// Feeds Open Inference Protocol HTTP/REST requests (JSON bodies, Triton's
// binary tensor extension) to the HTTP door, InferenceHttpService::Handle,
// in front of the serving core of FuzzDaemon (no sockets: the HTTP parser has
// a fuzzer of its own). Input: when it holds a newline, the first line is
// "METHOD PATH [HEADER_LENGTH]" (HEADER_LENGTH becomes the
// Inference-Header-Content-Length header) and the rest is the body;
// otherwise the whole input is the JSON body of POST /v2/models/fuzz/infer.
// Asserts: the door answers exactly once within 10 s; never 500; a JSON
// answer parses; an error answer is {"error": message} with a bounded
// message; an inference answered 200 returns outputs whose data (or binary
// section) has product(shape) elements, the binary sections adding up to the
// bytes after the JSON header.
#include <chrono>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "fuzz/fuzz_daemon.h"
#include "nlohmann/json.hpp"
#include "server/error_message.h"
#include "server/http/inference_http_service.h"

namespace replicad::fuzz {
namespace {

using json = nlohmann::json;

constexpr char kHeaderLength[] = "Inference-Header-Content-Length";

InferenceHttpService& TheDoor() {
  // No shared-memory registry: registering one opens whatever POSIX object
  // a fuzzed key names.
  static auto* door =
      new InferenceHttpService(FuzzDaemon::Get().core(), FuzzDaemon::Get().metrics(), nullptr);
  return *door;
}

HttpRequest RequestOf(const std::string& input) {
  HttpRequest request;
  const size_t newline = input.find('\n');
  if (newline == std::string::npos) {
    request.method = "POST";
    request.path = absl::StrCat("/v2/models/", FuzzDaemon::kModelName, "/infer");
    request.body = input;
    return request;
  }
  std::vector<std::string> words = absl::StrSplit(input.substr(0, newline), ' ', absl::SkipEmpty());
  if (!words.empty()) request.method = words[0];
  if (words.size() > 1) request.path = words[1];
  if (words.size() > 2) request.headers.emplace_back(kHeaderLength, words[2]);
  request.body = input.substr(newline + 1);
  return request;
}

const std::string* HeaderOf(const HttpResponse& response, const std::string& name) {
  for (const auto& [key, value] : response.headers) {
    if (key == name) return &value;
  }
  return nullptr;
}

void CheckInferAnswer(const json& answer, size_t binary_bytes) {
  if (!answer.is_object() || !answer.contains("outputs") || !answer["outputs"].is_array()) {
    Violated("an inference answered 200 without outputs");
  }
  if (answer.value("model_name", "") != FuzzDaemon::kModelName) {
    Violated("answered for another model");
  }
  size_t binary_seen = 0;
  for (const json& out : answer["outputs"]) {
    std::vector<int64_t> shape;
    for (const json& d : out.at("shape")) shape.push_back(d.get<int64_t>());
    const int64_t elements = ByteCount(shape, 1);
    if (elements < 0) Violated("an output with a negative dim");
    if (out.contains("data")) {
      if (static_cast<int64_t>(out["data"].size()) != elements) {
        Violated(absl::StrCat("output data has ", out["data"].size(), " elements, shape says ",
                              elements));
      }
    } else {
      const uint64_t bytes = out.at("parameters").at("binary_data_size").get<uint64_t>();
      if (static_cast<int64_t>(bytes) != elements * 4) {
        Violated("a binary output's size differs from its shape's");
      }
      binary_seen += bytes;
    }
  }
  if (binary_seen != binary_bytes) Violated("binary sections do not fill the body");
}

void CheckResponse(const HttpRequest& request, const HttpResponse& response) {
  if (response.status == 500) Violated(absl::StrCat("HTTP 500: ", response.body));
  size_t json_bytes = response.body.size();
  if (const std::string* length = HeaderOf(response, kHeaderLength)) {
    if (!absl::SimpleAtoi(*length, &json_bytes) || json_bytes > response.body.size()) {
      Violated(absl::StrCat("bad ", kHeaderLength, " in the answer: ", *length));
    }
  } else if (response.content_type != "application/json") {
    Violated(absl::StrCat("an answer of type ", response.content_type));
  }
  if (json_bytes == 0) return;  // Health and readiness flags, an empty OK.
  const json answer =
      json::parse(response.body.begin(), response.body.begin() + json_bytes, nullptr, false);
  if (answer.is_discarded()) Violated(absl::StrCat("an answer that is not JSON: ", response.body));
  if (response.status != 200) {
    if (!answer.is_object() || !answer.contains("error") || !answer["error"].is_string()) {
      Violated(absl::StrCat("an error answer without {\"error\": ...}: ", response.body));
    }
    if (answer["error"].get<std::string>().size() > kMaxRefusalMessage)
      Violated("a long error message");
    return;
  }
  if (request.method == "POST" && absl::EndsWith(request.path, "/infer")) {
    CheckInferAnswer(answer, response.body.size() - json_bytes);
  }
}

}  // namespace
}  // namespace replicad::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace replicad;
  using namespace replicad::fuzz;
  const HttpRequest request = RequestOf(std::string(reinterpret_cast<const char*>(data), size));
  absl::Notification answered;
  HttpResponse response;
  int calls = 0;
  TheDoor().Handle(request, [&](HttpResponse r) {
    ++calls;
    response = std::move(r);
    answered.Notify();
  });
  if (!answered.WaitForNotificationWithTimeout(absl::Seconds(10))) {
    Violated("the HTTP door did not answer within 10 s");
  }
  if (calls != 1) Violated("answered more than once");
  CheckResponse(request, response);
  return 0;
}
