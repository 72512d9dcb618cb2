#include "planner/adamw_rate.h"

#include <algorithm>

namespace ferry {

double host_adamw_params_per_s(const HostProfile& host, const Plan& plan) {
  double rate = host.cpu_adamw_params_per_s;
  // The profile times the pass that also writes the bf16 copy; without it (the masters are
  // uploaded) the bandwidth-bound pass moves 24 bytes/param instead of 26 (cpu_adamw_bench).
  if (plan.weight_upload == WeightUpload::ConvertOnUpload) rate *= 26.0 / 24.0;
  if (is_exact(plan.optimizer_state)) return rate;
  const double measured = host.lean_adamw_params_per_s[static_cast<int>(plan.optimizer_state)];
  if (measured > 0) return measured;
  const double roofline = rate * adamw_traffic_bytes_per_param(OptimizerStateFormat::Fp32) /
                          adamw_traffic_bytes_per_param(plan.optimizer_state);
  const double computed =
      kLeanAdamWParamsPerThread[static_cast<int>(plan.optimizer_state)] * std::max(host.threads, 1);
  return std::min(roofline, computed);
}

}  // namespace ferry
