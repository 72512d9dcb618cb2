#include "planner/model_flops.h"

namespace ferry {

double training_flops_per_token(const ModelConfig& config, double parameters, int64_t seq_len) {
  const double attention = 6.0 * static_cast<double>(seq_len) * static_cast<double>(config.q_dim()) *
                           static_cast<double>(config.num_layers);
  return 6.0 * parameters + attention;
}

}  // namespace ferry
