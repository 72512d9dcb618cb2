#include "train/progress.h"

#include <fmt/format.h>

#include <cmath>

namespace ferry {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  return fmt::format("{}d{:02}h", s / 86400, (s % 86400) / 3600);
}

RunProgress::RunProgress(int64_t total_steps, int64_t first_step, double predicted_step_seconds)
    : total_steps_(total_steps), done_(first_step), predicted_(predicted_step_seconds) {}

void RunProgress::step_done(double seconds) {
  ++done_;
  if (measured_++ == 0)
    first_seconds_ = seconds;
  else
    later_seconds_ += seconds;
}

std::optional<double> RunProgress::measured_step_seconds() const {
  if (measured_ == 0) return std::nullopt;
  if (measured_ == 1) return first_seconds_;
  return later_seconds_ / static_cast<double>(measured_ - 1);
}

std::optional<double> RunProgress::step_seconds() const {
  if (auto measured = measured_step_seconds()) return measured;
  if (predicted_ > 0) return predicted_;
  return std::nullopt;
}

std::optional<double> RunProgress::eta_seconds() const {
  const auto per_step = step_seconds();
  if (!per_step) return std::nullopt;
  return *per_step * static_cast<double>(std::max<int64_t>(0, total_steps_ - done_));
}

std::string RunProgress::eta_text() const {
  const auto eta = eta_seconds();
  if (!eta) return "";
  return fmt::format("ETA {}{}", format_duration(*eta), measured_ == 0 ? " predicted" : "");
}

}  // namespace ferry
