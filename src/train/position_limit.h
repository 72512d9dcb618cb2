// seq_len against the positions a model handles, checked when the config meets the model (before
// data is read or a plan is searched): a row of seq_len tokens can hold one document that long,
// whose last positions the model never saw in training (RoPE gives every position an angle, so
// nothing else would fail). trainer.cpp's check_positions still checks the packed documents.
#pragma once

#include <cstdint>

#include "model/model_config.h"

namespace ferry {

// Throws ferry::Error when seq_len > max_position_embeddings, naming the two fixes: a shorter
// seq_len, or a config.json whose context was extended (max_position_embeddings with the rope
// scaling that stretches the trained positions to it).
void check_seq_len_positions(const ModelConfig& model, int64_t seq_len);

}  // namespace ferry
