#include "tokenizer/post_processor.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_text.h"
#include "tokenizer/json_util.h"

namespace ferry::tok {

namespace {

class Affix final : public PostProcessor {
 public:
  Affix(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
  void process(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
    ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  }

 private:
  std::vector<int32_t> prefix_, suffix_;
};

class Identity final : public PostProcessor {
 public:
  void process(std::vector<int32_t>&) const override {}
};

class SequenceProcessor final : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> steps) : steps_(std::move(steps)) {}
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& step : steps_) step->process(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

// The template's "single" list: special tokens (by name, looked up in "special_tokens") around
// the sequence "A".
std::unique_ptr<PostProcessor> make_template(const nlohmann::json& config) {
  const auto& single = json_array(config, "single", "TemplateProcessing");
  const auto& specials = json_field(config, "special_tokens", "TemplateProcessing");
  std::vector<int32_t> prefix, suffix;
  bool seen_sequence = false;
  for (const auto& piece : single) {
    if (piece.contains("Sequence")) {
      const std::string id = json_string(piece["Sequence"], "id", "TemplateProcessing sequence");
      if (id != "A") fail("tokenizer", "TemplateProcessing \"single\" uses sequence '{}'; expected A", id);
      if (seen_sequence) fail("tokenizer", "TemplateProcessing \"single\" holds the sequence twice");
      seen_sequence = true;
      continue;
    }
    if (!piece.contains("SpecialToken"))
      fail("tokenizer", "TemplateProcessing piece {} is neither Sequence nor SpecialToken",
           json_excerpt(piece));
    const std::string name = json_string(piece["SpecialToken"], "id", "TemplateProcessing special token");
    const auto it = specials.find(name);
    if (it == specials.end())
      fail("tokenizer", "TemplateProcessing uses special token '{}' missing from its \"special_tokens\"",
           name);
    auto& target = seen_sequence ? suffix : prefix;
    for (const auto& id : json_array(*it, "ids", "TemplateProcessing special token"))
      target.push_back(json_token_id(id, "a TemplateProcessing special token"));
  }
  if (!seen_sequence) fail("tokenizer", "TemplateProcessing \"single\" has no Sequence");
  return make_affix_processor(std::move(prefix), std::move(suffix));
}

// RobertaProcessing / BertProcessing: {"cls": ["<s>", 0], "sep": ["</s>", 2]}.
int32_t pair_id(const nlohmann::json& config, const char* key, const char* what) {
  const auto& v = json_field(config, key, what);
  if (!v.is_array() || v.size() != 2) fail("tokenizer", "\"{}\" of {} is not [token, id]", key, what);
  return json_token_id(v[1], what);
}

}  // namespace

std::unique_ptr<PostProcessor> make_affix_processor(std::vector<int32_t> prefix,
                                                    std::vector<int32_t> suffix) {
  return std::make_unique<Affix>(std::move(prefix), std::move(suffix));
}

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& config) {
  if (config.is_null()) return nullptr;
  const std::string type = json_string(config, "type", "post_processor");
  if (type == "TemplateProcessing") return make_template(config);
  if (type == "ByteLevel") return std::make_unique<Identity>();
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    return make_affix_processor({pair_id(config, "cls", type.c_str())},
                                {pair_id(config, "sep", type.c_str())});
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (const auto& step : json_array(config, "processors", "Sequence post_processor")) {
      auto p = make_post_processor(step);
      if (p) steps.push_back(std::move(p));
    }
    return std::make_unique<SequenceProcessor>(std::move(steps));
  }
  fail("tokenizer",
       "post_processor type '{}' is not supported by ferry (supported: TemplateProcessing, ByteLevel, "
       "RobertaProcessing, BertProcessing, Sequence)",
       type);
}

}  // namespace ferry::tok
