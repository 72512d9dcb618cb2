// Learning-rate schedules with linear warmup, as Hugging Face transformers defines them
// (get_cosine_schedule_with_warmup, get_linear_schedule_with_warmup, get_constant_schedule_with_warmup),
// so that a run configured like a transformers/TRL run sees the same learning rate at every step.
#pragma once

#include <cstdint>
#include <string_view>

namespace ferry {

enum class LrSchedule { Cosine, Linear, Constant };

// "cosine", "linear" or "constant"; anything else throws ferry::Error listing the choices.
LrSchedule parse_lr_schedule(std::string_view name);
std::string_view lr_schedule_name(LrSchedule schedule);

// The learning rate of optimizer step `step` (0-based: the first update uses step 0, as transformers'
// LambdaLR does before its first scheduler.step()). lr = base_lr * factor(step):
//   warmup (step < warmup_steps): factor = step / max(1, warmup_steps)  (so step 0 has lr 0)
//   cosine:   progress = (step - warmup) / max(1, total - warmup)
//             factor = max(0, 0.5 * (1 + cos(pi * 0.5 * 2 * progress)))         (num_cycles = 0.5)
//             with min_lr_ratio r > 0: factor = max(0, cosine_factor * (1 - r) + r), as transformers'
//             get_cosine_with_min_lr_schedule_with_warmup (min_lr_rate); r = 0 is the plain schedule.
//   linear:   factor = max(0, (total - step) / max(1, total - warmup))
//   constant: factor = 1
// min_lr_ratio applies to the cosine schedule only. Steps past total_steps are computed by the same
// formulas (transformers does not clamp them: the cosine factor rises again).
// Throws ferry::Error for negative steps or counts, or min_lr_ratio outside [0, 1].
double lr_at(LrSchedule schedule, double base_lr, int64_t step, int64_t warmup_steps, int64_t total_steps,
             double min_lr_ratio = 0.0);

}  // namespace ferry
