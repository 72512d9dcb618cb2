// The FLOPs a training step is credited with, for model FLOPs utilisation (MFU): 6 per parameter
// per token (forward 2, backward 4), and causal attention's two matrix products (QK^T and PV),
// which a token's query runs against S/2 keys on average: 2 x 2 x q_dim x S/2 = 2 S q_dim forward
// per layer, three times that with the backward. Recomputes are not credited (MFU counts the
// model's work, not the schedule's). Llama-3.1-8B at S = 262,144: 48.2 GFLOP (6N) + 206 GFLOP
// (6 x 262144 x 4096 x 32) per token.
#pragma once

#include <cstdint>

#include "model/model_config.h"

namespace ferry {

// The dense bf16 peak the lent H200 measured (issue 22's yardstick for MFU).
inline constexpr double kH200DenseBf16FlopsPerS = 776e12;

double training_flops_per_token(const ModelConfig& config, double parameters, int64_t seq_len);

}  // namespace ferry
