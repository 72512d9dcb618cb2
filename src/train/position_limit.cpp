#include "train/position_limit.h"

#include "core/error.h"

namespace ferry {

void check_seq_len_positions(const ModelConfig& model, int64_t seq_len) {
  const int64_t limit = model.max_position_embeddings;
  if (limit <= 0 || seq_len <= limit) return;
  // YaRN's factor over the positions the model was trained on: the one rope scaling that
  // transformers applies to every architecture ferry trains.
  const int64_t original = model.rope_scaling.type == RopeScaling::Type::None
                               ? limit
                               : model.rope_scaling.original_max_position_embeddings;
  const int64_t factor = (seq_len + original - 1) / original;
  fail("config",
       "seq_len {} is longer than the {} positions {} handles (max_position_embeddings in config.json{}); "
       "set seq_len to at most {}, or train on a copy of the model whose config.json extends its context: "
       "\"max_position_embeddings\": {} and \"rope_scaling\": {{\"rope_type\": \"yarn\", \"factor\": {}, "
       "\"original_max_position_embeddings\": {}}}",
       seq_len, limit, model.architecture_name.empty() ? std::string("the model") : model.architecture_name,
       model.rope_scaling.type == RopeScaling::Type::Llama3  ? ", with llama3 rope scaling"
       : model.rope_scaling.type == RopeScaling::Type::Yarn ? ", with yarn rope scaling"
                                                              : "",
       limit, factor * original, factor, original);
}

}  // namespace ferry
