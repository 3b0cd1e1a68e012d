#ifndef REPLICAD_CORE_OPS_POOL3D_WINDOW_H_
#define REPLICAD_CORE_OPS_POOL3D_WINDOW_H_

#include <cstdint>

#include "core/ops/conv_attributes.h"
#include "core/ops/exact_float.h"
#include "core/ops/host_device.h"
#include "core/tensor/shape.h"

namespace replicad {

// 3-D MaxPool and AveragePool (Pool3dAttributes, conv_attributes.h), and
// an int8 model's 2-D MaxPool on CUDA slots, one output element at a time,
// written once for the CPU kernel and the CUDA kernel so both give the same
// bytes (exact_float.h says why the rounding
// agrees). A window holding a NaN gives NaN for max, as PyTorch's does; an
// average sums in double, in window order, and divides once. Every NaN
// output has quiet_NaN's bits (x86 and CUDA arithmetic make NaNs of
// different bits). Pure functions; thread-safe.

// One spatial dim of the window: output `o` reads input positions
// o * stride - pad_begin + k * dilation for k in [0, kernel); those inside
// [0, size) count, and so do the explicit pads for an average that includes
// them (not a ceil_mode window's overhang past pad_end).
struct Pool3dAxis {
  int64_t size = 0, kernel = 1, stride = 1, dilation = 1, pad_begin = 0, pad_end = 0;

  REPLICAD_HOST_DEVICE int64_t Start(int64_t o) const { return o * stride - pad_begin; }
  // Taps of output `o` within [lo, hi).
  REPLICAD_HOST_DEVICE int64_t TapsWithin(int64_t o, int64_t lo, int64_t hi) const {
    int64_t n = 0;
    for (int64_t k = 0; k < kernel; ++k) {
      const int64_t at = Start(o) + k * dilation;
      n += at >= lo && at < hi ? 1 : 0;
    }
    return n;
  }
};

// The pooling of one (image, channel) plane: X's plane [D, H, W] (axes'
// sizes) into Y's [out[0], out[1], out[2]].
struct Pool3dWindow {
  Pool3dAxis axes[3];
  int64_t out[3] = {0, 0, 0};
  bool max = true;
  bool count_include_pad = false;
};

// The window of `pool` over X [N, C, D, H, W] (host only).
inline Pool3dWindow Pool3dWindowOf(const Pool3dAttributes& pool, const Shape& x) {
  Pool3dWindow w;
  for (int d = 0; d < 3; ++d) {
    w.axes[d] = Pool3dAxis{x[2 + d],
                           pool.window.kernel[d],
                           pool.window.strides[d],
                           pool.window.dilations[d],
                           pool.window.pads_begin[d],
                           pool.window.pads_end[d]};
    w.out[d] = pool.window.output[d];
  }
  w.max = pool.max;
  w.count_include_pad = pool.count_include_pad;
  return w;
}

// Elements an average at output (o[0], o[1], o[2]) divides by: those of X
// in the window, or with count_include_pad those within the explicit pads
// too; at least 1.
REPLICAD_HOST_DEVICE inline int64_t Pool3dDivisor(const Pool3dWindow& w, const int64_t* o) {
  int64_t n = 1;
  for (int d = 0; d < 3; ++d) {
    const Pool3dAxis& a = w.axes[d];
    n *= w.count_include_pad ? a.TapsWithin(o[d], -a.pad_begin, a.size + a.pad_end)
                             : a.TapsWithin(o[d], 0, a.size);
  }
  return n > 1 ? n : 1;
}

// Calls visit(value) for each tap of output (od, oh, ow) of the plane `x`
// that lies inside X, in row-major order (d, then h, then w).
template <typename T, typename Visit>
REPLICAD_HOST_DEVICE inline void Pool3dForEachTap(const Pool3dWindow& w, const T* x, int64_t od,
                                                  int64_t oh, int64_t ow, Visit&& visit) {
  const Pool3dAxis &ad = w.axes[0], &ah = w.axes[1], &aw = w.axes[2];
  for (int64_t kd = 0; kd < ad.kernel; ++kd) {
    const int64_t d = ad.Start(od) + kd * ad.dilation;
    if (d < 0 || d >= ad.size) continue;
    for (int64_t kh = 0; kh < ah.kernel; ++kh) {
      const int64_t h = ah.Start(oh) + kh * ah.dilation;
      if (h < 0 || h >= ah.size) continue;
      const T* row = x + (d * ah.size + h) * aw.size;
      for (int64_t kw = 0; kw < aw.kernel; ++kw) {
        const int64_t col = aw.Start(ow) + kw * aw.dilation;
        if (col >= 0 && col < aw.size) visit(row[col]);
      }
    }
  }
}

// Output (od, oh, ow) of the plane `x`: its window's taps inside X folded
// into the max (-infinity for a window over padding only) or a double sum.
REPLICAD_HOST_DEVICE inline float Pool3dValue(const Pool3dWindow& w, const float* x, int64_t od,
                                              int64_t oh, int64_t ow) {
  float best = -exact_float::Infinity();
  double sum = 0;
  bool nan = false;
  Pool3dForEachTap(w, x, od, oh, ow, [&](float v) {
    if (w.max) {
      nan |= exact_float::IsNaN(v);
      best = exact_float::Max(best, v);
    } else {
      sum = exact_float::Add(sum, static_cast<double>(v));
    }
  });
  if (w.max) return nan ? exact_float::QuietNaN() : best;
  const int64_t o[3] = {od, oh, ow};
  const float mean =
      static_cast<float>(exact_float::Div(sum, static_cast<double>(Pool3dDivisor(w, o))));
  return exact_float::IsNaN(mean) ? exact_float::QuietNaN() : mean;
}

// The max of an int8 model's values (int8 or uint8) over output (od, oh,
// ow)'s taps inside X: exact, so any backend's order gives it; `lowest`
// (the type's) for a window over padding only, as oneDNN's int8 pooling
// starts from it.
template <typename T>
REPLICAD_HOST_DEVICE inline T Pool3dIntegerMax(const Pool3dWindow& w, const T* x, int64_t od,
                                               int64_t oh, int64_t ow, T lowest) {
  T best = lowest;
  Pool3dForEachTap(w, x, od, oh, ow, [&](T v) { best = v > best ? v : best; });
  return best;
}

// A 2-D window (Window2d, over X [N, C, H, W]) as a 3-D one of depth 1.
inline Pool3dWindow Pool3dWindowOf2d(const Window2d& window, const Shape& x) {
  Pool3dWindow w;
  w.axes[0] = Pool3dAxis{1, 1, 1, 1, 0, 0};
  w.out[0] = 1;
  for (int d = 0; d < 2; ++d) {
    w.axes[1 + d] = Pool3dAxis{x[2 + d],
                               window.kernel[d],
                               window.strides[d],
                               window.dilations[d],
                               window.pads_begin[d],
                               window.pads_end[d]};
    w.out[1 + d] = window.output[d];
  }
  return w;
}

}  // namespace replicad

#endif  // REPLICAD_CORE_OPS_POOL3D_WINDOW_H_
