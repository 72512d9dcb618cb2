// seq_len against the positions a model handles, for `ferry plan`: a plan is for sequences of
// seq_len tokens, a document that long reaches positions the model never saw in training (RoPE
// gives every position an angle, so nothing else would fail), and planning reads no documents.
// Training checks the packed documents themselves (trainer.cpp's check_positions): packing's
// per-document positions let shorter documents fill longer rows.
#pragma once

#include <cstdint>

#include "model/model_config.h"

namespace ferry {

// Throws ferry::Error when seq_len > max_position_embeddings, naming the two fixes: a shorter
// seq_len, or a config.json whose context was extended (max_position_embeddings with the rope
// scaling that stretches the trained positions to it).
void check_seq_len_positions(const ModelConfig& model, int64_t seq_len);

}  // namespace ferry
