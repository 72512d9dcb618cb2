#include "train/run_summary.h"

#include <fmt/format.h>

#include "core/byte_size.h"
#include "train/progress.h"

namespace ferry {

std::vector<std::string> describe_run_end(const RunEnd& e) {
  std::vector<std::string> lines;
  lines.push_back(fmt::format("done: {} steps in {} ({:.0f} tok/s over the steps)", e.steps,
                              format_duration(e.runtime_seconds),
                              e.step_seconds > 0 ? static_cast<double>(e.tokens) / e.step_seconds : 0.0));
  if (e.measured_step_seconds) {
    if (e.predicted_step_seconds > 0)
      lines.push_back(fmt::format("step time: {:.4g} s measured, {:.4g} s predicted by the plan ({:+.0f}%)",
                                  *e.measured_step_seconds, e.predicted_step_seconds,
                                  100.0 * (*e.measured_step_seconds / e.predicted_step_seconds - 1.0)));
    else
      lines.push_back(fmt::format("step time: {:.4g} s measured", *e.measured_step_seconds));
  }
  if (e.final_loss) lines.push_back(fmt::format("final loss: {:.4f}", *e.final_loss));
  if (e.best_eval_loss) lines.push_back(fmt::format("best evaluation loss: {:.4f}", *e.best_eval_loss));
  std::string memory;
  if (e.peak_device_bytes) memory += fmt::format("GPU {}", format_bytes(*e.peak_device_bytes));
  if (e.peak_pinned_bytes)
    memory += fmt::format("{}pinned {}", memory.empty() ? "" : ", ", format_bytes(*e.peak_pinned_bytes));
  if (e.peak_host_bytes)
    memory += fmt::format("{}host {}", memory.empty() ? "" : ", ", format_bytes(*e.peak_host_bytes));
  if (!memory.empty()) lines.push_back("peak memory: " + memory);
  if (!e.model_dir.empty()) lines.push_back("model: " + e.model_dir.string());
  return lines;
}

}  // namespace ferry
