#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace ferry {

LrSchedule parse_lr_schedule(std::string_view name) {
  if (name == "cosine") return LrSchedule::Cosine;
  if (name == "linear") return LrSchedule::Linear;
  if (name == "constant") return LrSchedule::Constant;
  fail("optim", "unknown lr_scheduler '{}'; choose one of: cosine, linear, constant", name);
}

std::string_view lr_schedule_name(LrSchedule schedule) {
  switch (schedule) {
    case LrSchedule::Cosine:
      return "cosine";
    case LrSchedule::Linear:
      return "linear";
    case LrSchedule::Constant:
      return "constant";
  }
  FERRY_ASSERT(false, "unknown LrSchedule");
  return "";
}

double lr_at(LrSchedule schedule, double base_lr, int64_t step, int64_t warmup_steps, int64_t total_steps,
             double min_lr_ratio) {
  FERRY_CHECK(step >= 0, "optim", "learning-rate schedule asked for step {}; steps count from 0", step);
  FERRY_CHECK(warmup_steps >= 0, "optim", "warmup_steps is {}; it must be >= 0", warmup_steps);
  FERRY_CHECK(total_steps >= 0, "optim", "the number of training steps is {}; it must be >= 0", total_steps);
  FERRY_CHECK(min_lr_ratio >= 0.0 && min_lr_ratio <= 1.0, "optim",
              "min_lr_ratio is {}; it must be in [0, 1] (a fraction of the peak learning rate)",
              min_lr_ratio);

  // The arithmetic mirrors transformers' lambdas term by term (Python floats are doubles), so the
  // factors agree bit for bit.
  const double s = static_cast<double>(step);
  if (step < warmup_steps) return base_lr * (s / static_cast<double>(std::max<int64_t>(1, warmup_steps)));

  const double decay_span = static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  double factor = 1.0;
  switch (schedule) {
    case LrSchedule::Cosine: {
      const double num_cycles = 0.5;
      const double progress = static_cast<double>(step - warmup_steps) / decay_span;
      const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * num_cycles * 2.0 * progress));
      factor = min_lr_ratio == 0.0 ? std::max(0.0, cosine)
                                   : std::max(0.0, cosine * (1.0 - min_lr_ratio) + min_lr_ratio);
      break;
    }
    case LrSchedule::Linear:
      factor = std::max(0.0, static_cast<double>(total_steps - step) / decay_span);
      break;
    case LrSchedule::Constant:
      factor = 1.0;
      break;
  }
  return base_lr * factor;
}

}  // namespace ferry
