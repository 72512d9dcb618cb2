// The lines a run ends with: how long it took, how fast it went against the plan, where the loss
// ended, the most memory it held, and where the model is. What a person checks before the next run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace ferry {

// The exact CPU AdamW's rate in a run's steps (UnitUpdater::cpu_update_rate), beside the rates the
// machine profile gave the plan for it.
struct CpuAdamWRates {
  double measured_params_per_s = 0.0;        // the steps' passes over whole units
  double profile_alone_params_per_s = 0.0;   // the profile's, with nothing beside it
  double profile_beside_params_per_s = 0.0;  // the profile's, beside pinned copies both ways
  bool profile_of_this_machine = true;       // false: a `profile: FILE` measured elsewhere
};

struct RunEnd {
  double runtime_seconds = 0.0;                 // wall time of the whole run, loading included
  int64_t steps = 0;                            // steps this run executed (not those of a resumed checkpoint)
  double step_seconds = 0.0;                    // the sum of those steps' wall times
  int64_t tokens = 0;                           // tokens those steps processed (padding included)
  double predicted_step_seconds = 0.0;          // 0: no plan
  std::optional<double> measured_step_seconds;  // RunProgress::measured_step_seconds
  std::optional<CpuAdamWRates> cpu_adamw;       // none without a plan, a lean state, or a second of passes
  std::optional<double> final_loss;
  std::optional<double> best_eval_loss;     // none without evaluation
  std::optional<size_t> peak_device_bytes;  // none on the cpu trainer
  std::optional<size_t> peak_pinned_bytes;
  std::optional<size_t> peak_host_bytes;  // counted resident memory (core/host_memory.h)
  std::filesystem::path model_dir;        // where the model went
};

// How far the steps' CPU AdamW may run above the profile's rate alone before the run end says the
// profile undervalues the CPU (describe_run_end).
inline constexpr double kProfileUndervaluesCpu = 1.25;

std::vector<std::string> describe_run_end(const RunEnd& end);

}  // namespace ferry
