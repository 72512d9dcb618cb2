#include "generate/generation_config.h"

#include <cmath>

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

// A number of generation_config.json, checked here so that its message names the file and the key
// (checked later it would read as a flag the user never passed): `fallback` where the key is absent
// or null, else a finite number that `ok` accepts.
double sampling_number(const nlohmann::json& json, const char* key, double fallback, bool (*ok)(double),
                       const char* expected, const std::string& source) {
  const auto it = json.find(key);
  if (it == json.end() || it->is_null()) return fallback;
  FERRY_CHECK(it->is_number() && std::isfinite(it->get<double>()) && ok(it->get<double>()), kWhere,
              "{}: {} is {}; expected {}; fix the file", source, key, json_excerpt(*it), expected);
  return it->get<double>();
}

// top_k: a whole number of tokens (50.0 is 50), refused rather than cast when it is a fraction,
// negative or huge (1e30 became -2^63). Up to 2^62: any count past the vocabulary cuts nothing.
int64_t sampling_count(const nlohmann::json& json, const char* key, int64_t fallback,
                       const std::string& source) {
  const auto it = json.find(key);
  if (it == json.end() || it->is_null()) return fallback;
  const double v = it->is_number() ? it->get<double>() : -1.0;
  FERRY_CHECK(v >= 0 && v <= 0x1p62 && v == std::trunc(v), kWhere,
              "{}: {} is {}; expected a whole number of tokens from 0 (no cut) to 2^62; fix the file", source,
              key, json_excerpt(*it));
  return static_cast<int64_t>(v);
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

  const auto sample = generation.find("do_sample");
  if (sample != generation.end() && sample->is_boolean() && sample->get<bool>()) {
    const std::string source = path.string();
    d.sampling.temperature = sampling_number(
        generation, "temperature", 1.0, [](double v) { return v >= 0; }, "a number >= 0 (0: greedy)", source);
    d.sampling.top_k = sampling_count(generation, "top_k", 50, source);
    d.sampling.top_p = sampling_number(
        generation, "top_p", 1.0, [](double v) { return v > 0 && v <= 1; }, "a number in (0, 1] (1: no cut)",
        source);
  }
  return d;
}

}  // namespace ferry
