#include "core/backends/cpu/kernels/product_precision.h"

#include <atomic>
#include <optional>
#include <string>

#include "core/backends/cpu/kernels/weight_cache.h"
#include "core/base/log.h"
#include "core/model/compute_precision.h"

namespace replicad {
namespace {

bool HasBFloat16DotProducts() {
  static const bool has = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
  }();
  return has;
}

}  // namespace

dnnl::memory::data_type ProductDataType(const KernelSpec& spec) {
  if (spec.attributes == nullptr) return dnnl::memory::data_type::f32;
  absl::StatusOr<std::string> precision = spec.attributes->GetString(kPrecisionAttribute, "");
  if (precision.ok() && *precision == "tf32") {
    static std::atomic<bool> logged_tf32{false};
    if (!logged_tf32.exchange(true)) {
      LogInfo("precision tf32: CPUs have no TF32; CPU slots compute float32");
    }
  }
  if (precision.ok() && *precision == "fp16") {
    static std::atomic<bool> logged_fp16{false};
    if (!logged_fp16.exchange(true)) {
      LogInfo("precision fp16: CPU slots have no float16 products; they compute float32");
    }
  }
  if (!precision.ok() || *precision != "bf16") return dnnl::memory::data_type::f32;
  if (HasBFloat16DotProducts()) return dnnl::memory::data_type::bf16;
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) {
    LogWarning(
        "precision bf16: this CPU has no bfloat16 dot products (AVX512_BF16 or AMX); "
        "its slots compute float32");
  }
  return dnnl::memory::data_type::f32;
}

dnnl::memory::data_type ConvProductType(const KernelSpec& spec, int64_t group,
                                        const Shape& weights) {
  const dnnl::memory::data_type product = ProductDataType(spec);
  if (product == dnnl::memory::data_type::f32) return product;
  constexpr int64_t kMinProducts = 64;
  const int64_t kernel_area = NumElements(weights) / weights[0] / weights[1];
  const int64_t per_output = weights[1] * kernel_area;
  const int64_t per_input = weights[0] / group * kernel_area;
  const bool pays = per_output >= kMinProducts && per_input >= kMinProducts;
  return pays || ConvWritesBFloat16(spec) || ArrivesBFloat16(spec, 0)
             ? product
             : dnnl::memory::data_type::f32;
}

bool ConvWritesBFloat16(const KernelSpec& spec) {
  if (!spec.native_output || spec.attributes == nullptr || spec.inputs.size() < 2 ||
      !spec.inputs[0] || spec.inputs[0]->shape.size() != 4 || spec.constant_inputs.size() < 2 ||
      spec.constant_inputs[1] == nullptr) {
    return false;
  }
  absl::StatusOr<std::string> output = spec.attributes->GetString(kOutputPrecisionAttribute, "");
  return output.ok() && *output == "bf16" && ProductDataType(spec) == dnnl::memory::data_type::bf16;
}

bool ArrivesBFloat16(const KernelSpec& spec, int index) {
  if (index >= static_cast<int>(spec.input_layouts.size()) || spec.input_layouts[index].empty()) {
    return false;
  }
  std::optional<dnnl::memory::desc> given = DeserializeDesc(spec.input_layouts[index]);
  return given && given->data_type() == dnnl::memory::data_type::bf16;
}

}  // namespace replicad
