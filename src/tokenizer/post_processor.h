// Post-processors of tokenizer.json ("post_processor"): TemplateProcessing, ByteLevel (ids
// unchanged), RobertaProcessing, BertProcessing and Sequence. Only single sequences: ferry never
// encodes pairs.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <vector>

namespace ferry::tok {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds what the processor adds around one sequence when add_special_tokens is true.
  virtual void process(std::vector<int32_t>& ids) const = 0;
};

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& config);

// A processor that puts `prefix` before and `suffix` after the sequence.
std::unique_ptr<PostProcessor> make_affix_processor(std::vector<int32_t> prefix, std::vector<int32_t> suffix);

}  // namespace ferry::tok
