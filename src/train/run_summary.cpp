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
  if (e.cpu_adamw) {
    const CpuAdamWRates& r = *e.cpu_adamw;
    lines.push_back(
        fmt::format("CPU AdamW: {:.2f} G params/s in the steps (the profile: {:.2f} alone, {:.2f} beside "
                    "copies both ways)",
                    r.measured_params_per_s / 1e9, r.profile_alone_params_per_s / 1e9,
                    r.profile_beside_params_per_s / 1e9));
    // The steps' passes run beside the step's copies, so at most about the profile's rate alone
    // (the passes of a convert-on-upload plan, which write no bf16 copy, ran up to 5% above it on
    // an H100 host). Well above it, the profile was measured while the machine was slow, and the
    // plans it gives leave the CPU too little to do: one such profile cost its runs ~2%.
    if (r.profile_of_this_machine && r.profile_alone_params_per_s > 0 &&
        r.measured_params_per_s > kProfileUndervaluesCpu * r.profile_alone_params_per_s)
      lines.push_back(
          "the profile's CPU AdamW rate is too low: it was measured while other work loaded this machine's "
          "CPUs or memory, and the plans it gives are slower than this machine allows; `ferry profile "
          "CONFIG` measures it again (about a minute)");
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
