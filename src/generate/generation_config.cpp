#include "generate/generation_config.h"

#include "core/error.h"
#include "core/json_text.h"
#include "core/text_file.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "generate";

// eos_token_id as an int or a list of ints; ids outside [0, vocab) are an error naming the file.
std::vector<int32_t> eos_ids_of(const nlohmann::json& json, int64_t vocab, const std::string& source) {
  std::vector<int32_t> ids;
  const auto it = json.find("eos_token_id");
  if (it == json.end() || it->is_null()) return ids;
  std::vector<nlohmann::json> values;
  if (it->is_array())
    values.assign(it->begin(), it->end());
  else
    values.push_back(*it);
  for (const auto& v : values) {
    FERRY_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < vocab, kWhere,
                "{}: eos_token_id {} is not a token id of this model (vocabulary of {}); fix the file",
                source, v.dump(), vocab);
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

}  // namespace

GenerationDefaults load_generation_defaults(const std::filesystem::path& model_dir,
                                            const ModelConfig& config) {
  GenerationDefaults d;
  const auto path = model_dir / "generation_config.json";
  std::error_code ec;
  nlohmann::json generation = nlohmann::json::object();
  if (std::filesystem::exists(path, ec))
    generation = parse_json(read_text_file(path, kWhere), kWhere, path.string(), "fix or re-download it");
  d.eos_ids = eos_ids_of(generation, config.vocab_size, path.string());
  if (d.eos_ids.empty())
    d.eos_ids = eos_ids_of(config.raw, config.vocab_size, (model_dir / "config.json").string());

  const auto number = [&](const char* key, double fallback) {
    const auto it = generation.find(key);
    return it != generation.end() && it->is_number() ? it->get<double>() : fallback;
  };
  const auto sample = generation.find("do_sample");
  if (sample != generation.end() && sample->is_boolean() && sample->get<bool>()) {
    d.sampling.temperature = number("temperature", 1.0);
    d.sampling.top_k = static_cast<int64_t>(number("top_k", 50.0));
    d.sampling.top_p = number("top_p", 1.0);
  }
  return d;
}

}  // namespace ferry
