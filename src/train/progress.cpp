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

RunProgress::RunProgress(int64_t total_steps, int64_t first_step, double predicted_step_seconds,
                         EvaluationPlan evaluation)
    : total_steps_(total_steps),
      done_(first_step),
      predicted_(predicted_step_seconds),
      evaluation_(evaluation),
      evaluated_step_(first_step) {}

void RunProgress::step_done(double seconds) {
  ++done_;
  if (measured_++ == 0)
    first_seconds_ = seconds;
  else
    later_seconds_ += seconds;
}

void RunProgress::evaluation_done(double seconds) {
  evaluated_step_ = done_;
  ++evaluations_measured_;
  evaluation_seconds_ += seconds;
}

int64_t RunProgress::evaluations_left() const {
  if (!evaluation_.enabled) return 0;
  const int64_t every = evaluation_.every_steps;
  // Due steps in (done_, total_steps_]: the multiples of `every`, and the last step unless it is one.
  int64_t left = every > 0 ? total_steps_ / every - done_ / every : 0;
  if (done_ < total_steps_ && (every <= 0 || total_steps_ % every != 0)) ++left;
  const bool last_due = done_ == total_steps_ || (every > 0 && done_ % every == 0);
  if (done_ > evaluated_step_ && last_due) ++left;
  return left;
}

std::optional<double> RunProgress::evaluation_seconds() const {
  if (evaluations_measured_ > 0) return evaluation_seconds_ / static_cast<double>(evaluations_measured_);
  if (evaluation_.predicted_seconds > 0) return evaluation_.predicted_seconds;
  return std::nullopt;
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
  const double evaluations = static_cast<double>(evaluations_left()) * evaluation_seconds().value_or(0.0);
  return *per_step * static_cast<double>(std::max<int64_t>(0, total_steps_ - done_)) + evaluations;
}

std::string RunProgress::eta_text() const {
  const auto eta = eta_seconds();
  if (!eta) return "";
  return fmt::format("ETA {}{}", format_duration(*eta), measured_ == 0 ? " predicted" : "");
}

}  // namespace ferry
