#include "client/train_progress.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace replicad::client {
namespace {

constexpr int kBarWidth = 20;
constexpr double kRedrawSeconds = 0.1;

double Rate(const EpochProgress& p) {
  return p.seconds > 0 ? static_cast<double>(p.done) / p.seconds : 0;
}

}  // namespace

ProgressLine::ProgressLine(std::ostream& out, bool interactive)
    : out_(out), interactive_(interactive) {}

void ProgressLine::Update(const EpochProgress& p) {
  if (p.epoch != epoch_) {
    epoch_ = p.epoch;
    last_draw_seconds_ = 0;
    tenths_printed_ = 0;
  }
  const bool last = p.done >= p.total;
  if (interactive_) {
    // Redrawing after every step would cost more than small steps themselves.
    if (!last && drawn_width_ > 0 && p.seconds - last_draw_seconds_ < kRedrawSeconds) return;
    last_draw_seconds_ = p.seconds;
    const int filled =
        p.total > 0 ? static_cast<int>(kBarWidth * std::min(p.done, p.total) / p.total) : 0;
    std::string line =
        absl::StrFormat("epoch %d/%d [%s%s] %d/%d  %.0f samples/s  loss %.4f", p.epoch, p.epochs,
                        std::string(filled, '#'), std::string(kBarWidth - filled, '.'), p.done,
                        p.total, Rate(p), p.mean_loss);
    if (p.accuracy.has_value()) absl::StrAppendFormat(&line, "  accuracy %.4f", *p.accuracy);
    // Spaces over whatever a longer previous line left behind; no terminal
    // escape codes needed.
    const size_t width = line.size();
    if (width < drawn_width_) line.append(drawn_width_ - width, ' ');
    drawn_width_ = width;
    out_ << '\r' << line << std::flush;
    return;
  }
  const int64_t tenths = p.total > 0 ? 10 * std::min(p.done, p.total) / p.total : 10;
  if (tenths <= tenths_printed_) return;
  tenths_printed_ = tenths;
  std::string line = absl::StrFormat(
      "epoch %d/%d: %d/%d samples (%d%%), %.0f samples/s, loss %.4f", p.epoch, p.epochs, p.done,
      p.total, p.total > 0 ? 100 * std::min(p.done, p.total) / p.total : 100, Rate(p), p.mean_loss);
  if (p.accuracy.has_value()) absl::StrAppendFormat(&line, ", accuracy %.4f", *p.accuracy);
  out_ << line << '\n' << std::flush;
}

void ProgressLine::Clear() {
  if (!interactive_ || drawn_width_ == 0) return;
  out_ << '\r' << std::string(drawn_width_, ' ') << '\r' << std::flush;
  drawn_width_ = 0;
}

}  // namespace replicad::client
