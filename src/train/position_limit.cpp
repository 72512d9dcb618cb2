#include "train/position_limit.h"

#include "core/error.h"

namespace ferry {

void check_seq_len_positions(const ModelConfig& model, int64_t seq_len) {
  const int64_t limit = model.max_position_embeddings;
  if (limit <= 0 || seq_len <= limit) return;
  // The scaling that stretches the trained positions over seq_len: the model's own (llama3 or
  // yarn) with a larger factor, else YaRN, which transformers applies to every architecture ferry
  // trains. The factor counts from the positions the model was trained on before any scaling.
  const bool scaled = model.rope_scaling.type != RopeScaling::Type::None;
  const int64_t original = scaled ? model.rope_scaling.original_max_position_embeddings : limit;
  const int64_t factor = (seq_len + original - 1) / original;
  const char* type = model.rope_scaling.type == RopeScaling::Type::Llama3 ? "llama3" : "yarn";
  fail("config",
       "seq_len {} is longer than the {} positions {} handles (max_position_embeddings in config.json{}); "
       "set seq_len to at most {}, or train on a copy of the model whose config.json extends its context: "
       "\"max_position_embeddings\": {} and, in \"rope_scaling\", \"rope_type\": \"{}\", \"factor\": {}, "
       "\"original_max_position_embeddings\": {}",
       seq_len, limit, model.architecture_name.empty() ? std::string("the model") : model.architecture_name,
       scaled ? fmt::format(", with {} rope scaling", type) : std::string(), limit, factor * original, type,
       factor, original);
}

}  // namespace ferry
