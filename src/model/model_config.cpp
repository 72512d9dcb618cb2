// Parsing and writing Hugging Face config.json for the decoder-only architectures ferry trains.
//
// Defaults are transformers' own (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config), so a
// config.json that omits a key means here what it means there.
#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/text_file.h"

namespace ferry {

namespace {

using nlohmann::json;

constexpr const char* kSupported =
    "ferry trains LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM";

struct ArchInfo {
  Architecture arch;
  const char* architecture_name;
  const char* model_type;
  int64_t default_max_positions;  // transformers' default max_position_embeddings
};
constexpr ArchInfo kArchs[] = {
    {Architecture::Llama, "LlamaForCausalLM", "llama", 2048},
    {Architecture::Mistral, "MistralForCausalLM", "mistral", 4096 * 32},
    {Architecture::Qwen2, "Qwen2ForCausalLM", "qwen2", 32768},
    {Architecture::Qwen3, "Qwen3ForCausalLM", "qwen3", 32768},
};

// Upper bounds on the sizes, each far above any real model (Llama 3.1 405B: hidden 16384,
// intermediate 53248, 126 layers, 128 heads; the largest vocabularies hold ~262k tokens). A size
// beyond them is a corrupt config.json, and is refused by name here, before anything is allocated
// from it: a bad_alloc (or a layout of 1e9 layers) would name nothing.
struct SizeLimits {
  int64_t vocab = int64_t{1} << 24;  // token ids are int32; 16.7M
  int64_t hidden = int64_t{1} << 17;
  int64_t intermediate = int64_t{1} << 20;
  int64_t layers = int64_t{1} << 12;
  int64_t heads = int64_t{1} << 12;
  int64_t head_dim = int64_t{1} << 12;
  int64_t positions = int64_t{1} << 30;
  int64_t parameters = int64_t{1} << 40;  // 1.1 trillion
};
constexpr SizeLimits kLimits;

const ArchInfo& arch_info(Architecture arch) {
  for (const ArchInfo& a : kArchs)
    if (a.arch == arch) return a;
  FERRY_ASSERT(false, "unknown Architecture");
  return kArchs[0];
}

// Reads typed keys of one JSON object, naming `source` and the key's path in every error.
class Keys {
 public:
  Keys(const json& object, const std::string& source, std::string prefix = "")
      : object_(object), source_(source), prefix_(std::move(prefix)) {}

  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) const {
    fail("config", "{}: {}", source_, fmt::format(format, std::forward<Args>(args)...));
  }

  // Present and not null (transformers treats null as "use the default").
  bool has(const char* key) const {
    auto it = object_.find(key);
    return it != object_.end() && !it->is_null();
  }
  // Present and explicitly null.
  bool has_null(const char* key) const {
    auto it = object_.find(key);
    return it != object_.end() && it->is_null();
  }
  const json& at(const char* key) const { return object_.at(key); }
  std::string name(const char* key) const { return prefix_ + key; }
  const std::string& source() const { return source_; }
  // Keys of an object nested under this one, e.g. rope_scaling.
  Keys nested(const char* key) const { return Keys(at(key), source_, prefix_ + key + "."); }

  const json& required(const char* key) const {
    if (!has(key)) error("missing required key '{}'; add it to the config", name(key));
    return at(key);
  }
  int64_t integer(const char* key) const { return as_integer(key, required(key)); }
  int64_t integer(const char* key, int64_t fallback) const {
    return has(key) ? as_integer(key, at(key)) : fallback;
  }
  int64_t positive(const char* key) const { return check_positive(key, integer(key)); }
  int64_t positive(const char* key, int64_t fallback) const {
    return check_positive(key, integer(key, fallback));
  }
  // A positive size no larger than `limit` (see kLimits).
  int64_t size(const char* key, int64_t limit) const { return check_limit(key, positive(key), limit); }
  int64_t size(const char* key, int64_t fallback, int64_t limit) const {
    return check_limit(key, positive(key, fallback), limit);
  }
  double number(const char* key) const { return as_number(key, required(key)); }
  double number(const char* key, double fallback) const {
    return has(key) ? as_number(key, at(key)) : fallback;
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!at(key).is_boolean()) error("key '{}' must be true or false, got {}", name(key), show(at(key)));
    return at(key).get<bool>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!at(key).is_string()) error("key '{}' must be a string, got {}", name(key), show(at(key)));
    return at(key).get<std::string>();
  }

  static std::string show(const json& value) { return json_excerpt(value) + " (" + value.type_name() + ")"; }

 private:
  int64_t as_integer(const char* key, const json& value) const {
    if (!value.is_number_integer() ||
        (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())))
      error("key '{}' must be an integer, got {}", name(key), show(value));
    return value.get<int64_t>();
  }
  double as_number(const char* key, const json& value) const {
    if (!value.is_number()) error("key '{}' must be a number, got {}", name(key), show(value));
    return value.get<double>();
  }
  int64_t check_positive(const char* key, int64_t value) const {
    if (value <= 0) error("key '{}' must be positive, got {}", name(key), value);
    return value;
  }
  int64_t check_limit(const char* key, int64_t value, int64_t limit) const {
    if (value > limit)
      error(
          "key '{}' is {}, more than {}, far beyond any real model of these architectures; the config.json "
          "is "
          "corrupt or was edited by mistake",
          name(key), value, limit);
    return value;
  }

  const json& object_;
  const std::string& source_;
  std::string prefix_;
};

void parse_architecture(const Keys& keys, ModelConfig& c) {
  const ArchInfo* found = nullptr;
  std::string model_type = keys.string("model_type", "");
  if (keys.has("architectures")) {
    const json& list = keys.at("architectures");
    if (!list.is_array() || list.empty() || !list[0].is_string())
      keys.error("key 'architectures' must be a list of names, got {}", Keys::show(list));
    const std::string name = list[0].get<std::string>();
    for (const ArchInfo& a : kArchs)
      if (name == a.architecture_name) found = &a;
    if (!found) keys.error("architecture '{}' is not supported; {}", name, kSupported);
  } else {
    if (model_type.empty())
      keys.error("missing required key 'architectures' (nor is there a 'model_type'); {}", kSupported);
    for (const ArchInfo& a : kArchs)
      if (model_type == a.model_type) found = &a;
    if (!found) keys.error("model_type '{}' is not supported; {}", model_type, kSupported);
  }
  // transformers picks the model class from model_type; a different one would build another model.
  if (!model_type.empty() && model_type != found->model_type)
    keys.error("architecture '{}' does not match model_type '{}' (expected '{}'); fix one of them",
               found->architecture_name, model_type, found->model_type);
  c.arch = found->arch;
  c.architecture_name = found->architecture_name;
  c.model_type = found->model_type;
}

// The parameters a config describes (biases and norms aside), from sizes already within kLimits,
// so that no product can overflow.
int64_t approximate_parameters(const ModelConfig& c) {
  const int64_t embeddings = c.vocab_size * c.hidden_size * (c.tie_word_embeddings ? 1 : 2);
  const int64_t attention = c.hidden_size * (2 * c.q_dim() + 2 * c.kv_dim());
  const int64_t mlp = 3 * c.hidden_size * c.intermediate_size;
  return embeddings + c.num_layers * (attention + mlp);
}

void parse_shape(const Keys& keys, ModelConfig& c) {
  c.vocab_size = keys.size("vocab_size", kLimits.vocab);
  c.hidden_size = keys.size("hidden_size", kLimits.hidden);
  c.intermediate_size = keys.size("intermediate_size", kLimits.intermediate);
  c.num_layers = keys.size("num_hidden_layers", kLimits.layers);
  c.num_heads = keys.size("num_attention_heads", kLimits.heads);
  c.num_kv_heads = keys.size("num_key_value_heads", c.num_heads, kLimits.heads);
  if (c.num_heads % c.num_kv_heads != 0)
    keys.error(
        "num_attention_heads ({}) is not a multiple of num_key_value_heads ({}); grouped-query attention "
        "needs whole groups",
        c.num_heads, c.num_kv_heads);
  if (keys.has("head_dim")) {
    c.head_dim = keys.size("head_dim", kLimits.head_dim);
  } else if (c.arch == Architecture::Qwen3) {
    c.head_dim = 128;  // Qwen3Config's default, not hidden_size / heads
  } else {
    if (c.hidden_size % c.num_heads != 0)
      keys.error(
          "hidden_size ({}) is not a multiple of num_attention_heads ({}) and no head_dim is given; set "
          "head_dim or fix the sizes",
          c.hidden_size, c.num_heads);
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) keys.error("head_dim ({}) must be even for rotary embeddings", c.head_dim);
  c.max_position_embeddings =
      keys.size("max_position_embeddings", arch_info(c.arch).default_max_positions, kLimits.positions);
  c.rms_norm_eps = keys.number("rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps > 0)) keys.error("rms_norm_eps must be positive, got {}", c.rms_norm_eps);
  c.initializer_range = keys.number("initializer_range", 0.02);
}

// A rope_type other than those ferry computes is an error: it would silently change positions.
void parse_rope_type(const Keys& keys, const char* where, const std::string& type, ModelConfig& c) {
  if (type == "default") {
    c.rope_scaling = RopeScaling{};
    return;
  }
  if (type == "llama3") {
    RopeScaling& s = c.rope_scaling;
    s.type = RopeScaling::Type::Llama3;
    s.factor = keys.number("factor");
    s.low_freq_factor = keys.number("low_freq_factor");
    s.high_freq_factor = keys.number("high_freq_factor");
    s.original_max_position_embeddings = keys.positive("original_max_position_embeddings");
    if (!(s.factor > 0)) keys.error("{}.factor must be positive, got {}", where, s.factor);
    if (!(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor))
      keys.error("{} needs 0 < low_freq_factor < high_freq_factor, got {} and {}", where, s.low_freq_factor,
                 s.high_freq_factor);
    return;
  }
  if (type == "yarn") {
    RopeScaling& s = c.rope_scaling;
    s.type = RopeScaling::Type::Yarn;
    // transformers fills original_max_position_embeddings from max_position_embeddings, and a
    // missing factor from their ratio.
    s.original_max_position_embeddings = keys.has("original_max_position_embeddings")
                                             ? keys.positive("original_max_position_embeddings")
                                             : c.max_position_embeddings;
    s.factor = keys.has("factor") && !keys.at("factor").is_null()
                   ? keys.number("factor")
                   : static_cast<double>(c.max_position_embeddings) /
                         static_cast<double>(s.original_max_position_embeddings);
    if (!(s.factor > 0)) keys.error("{}.factor must be positive, got {}", where, s.factor);
    auto optional = [&](const char* key, double fallback) {
      return keys.has(key) && !keys.at(key).is_null() ? keys.number(key) : fallback;
    };
    // `or 32` / `or 1` there: a zero or null takes the default too.
    s.beta_fast = optional("beta_fast", 0.0);
    if (s.beta_fast == 0) s.beta_fast = 32.0;
    s.beta_slow = optional("beta_slow", 0.0);
    if (s.beta_slow == 0) s.beta_slow = 1.0;
    if (!(s.beta_fast > 0) || !(s.beta_slow > 0))
      keys.error("{} needs positive beta_fast and beta_slow, got {} and {}", where, s.beta_fast, s.beta_slow);
    s.truncate = keys.boolean("truncate", true);  // absent or null: transformers' default
    const auto mscale_of = [](double scale, double mscale) {
      return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
    };
    const double mscale = optional("mscale", 0.0), mscale_all_dim = optional("mscale_all_dim", 0.0);
    if (keys.has("attention_factor") && !keys.at("attention_factor").is_null())
      s.attention_factor = keys.number("attention_factor");
    else if (mscale != 0 && mscale_all_dim != 0)
      s.attention_factor = mscale_of(s.factor, mscale) / mscale_of(s.factor, mscale_all_dim);
    else
      s.attention_factor = mscale_of(s.factor, 1.0);
    if (!(s.attention_factor > 0))
      keys.error("{}.attention_factor must be positive, got {}", where, s.attention_factor);
    return;
  }
  keys.error(
      "rope type '{}' (in {}) is not supported; ferry implements the default RoPE, 'llama3' and 'yarn' "
      "scaling",
      type, where);
}

void parse_rope(const Keys& keys, ModelConfig& c) {
  const double top_theta = keys.number("rope_theta", 10000.0);
  c.rope_scaling = RopeScaling{};
  double partial_rotary = keys.number("partial_rotary_factor", 1.0);
  if (keys.has("rope_parameters")) {
    // transformers 5 style: {"rope_type", "rope_theta", "factor", ...}. It wins over the legacy
    // keys; a missing rope_theta falls back to the top-level one, as transformers does.
    if (!keys.at("rope_parameters").is_object())
      keys.error("key 'rope_parameters' must be an object, got {}", Keys::show(keys.at("rope_parameters")));
    const Keys params = keys.nested("rope_parameters");
    if (!params.has("rope_type") && !params.has("type") && !params.has("rope_theta"))
      keys.error("rope_parameters {} hold no rope_type or rope_theta; per-layer-type RoPE is not supported",
                 Keys::show(keys.at("rope_parameters")));
    c.rope_theta = params.number("rope_theta", top_theta);
    partial_rotary = params.number("partial_rotary_factor", partial_rotary);
    parse_rope_type(params, "rope_parameters", params.string("rope_type", params.string("type", "default")),
                    c);
  } else {
    c.rope_theta = top_theta;
    if (keys.has("rope_scaling")) {
      if (!keys.at("rope_scaling").is_object())
        keys.error("key 'rope_scaling' must be an object or null, got {}",
                   Keys::show(keys.at("rope_scaling")));
      const Keys scaling = keys.nested("rope_scaling");
      // transformers reads "rope_type" and falls back to the older "type".
      const std::string type = scaling.string("rope_type", scaling.string("type", ""));
      if (type.empty())
        keys.error("rope_scaling has no 'rope_type' (or 'type'); set it or make rope_scaling null");
      parse_rope_type(scaling, "rope_scaling", type, c);
    }
  }
  if (!(c.rope_theta > 0)) keys.error("rope_theta must be positive, got {}", c.rope_theta);
  if (partial_rotary != 1.0)
    keys.error("partial_rotary_factor {} is not supported; ferry rotates the whole head (1.0)",
               partial_rotary);
}

void parse_biases(const Keys& keys, ModelConfig& c) {
  switch (c.arch) {
    case Architecture::Llama:
      c.qkv_bias = c.o_bias = keys.boolean("attention_bias", false);
      c.mlp_bias = keys.boolean("mlp_bias", false);
      break;
    case Architecture::Mistral:
      break;  // MistralAttention and MistralMLP have no biases
    case Architecture::Qwen2:
      c.qkv_bias = true;  // Qwen2Attention: q, k, v biased whatever the config says; o never
      break;
    case Architecture::Qwen3:
      c.qkv_bias = c.o_bias = keys.boolean("attention_bias", false);
      c.qk_norm = true;
      break;
  }
  // These keys exist in other architectures' configs; transformers ignores them here, and so do we.
  if (c.arch != Architecture::Llama && keys.boolean("mlp_bias", false))
    log_warn("{}: mlp_bias is ignored for {}, as transformers ignores it", keys.source(),
             c.architecture_name);
}

// The window of sliding-window attention, when every layer uses the same one.
void parse_sliding_window(const Keys& keys, ModelConfig& c) {
  c.sliding_window.reset();
  if (c.arch == Architecture::Llama) return;  // LlamaAttention has no window
  if (c.arch == Architecture::Mistral) {
    if (keys.has("sliding_window")) c.sliding_window = keys.positive("sliding_window");
    return;
  }
  // Qwen2/Qwen3: the window applies only with use_sliding_window, and only to the layers that
  // layer_types marks as sliding (by default those at index >= max_window_layers).
  const bool use = keys.boolean("use_sliding_window", false);
  std::optional<int64_t> window;
  // Absent means Qwen2Config's default of 4096; an explicit null means no window at all.
  const bool null_window = keys.has_null("sliding_window");
  if (use && !null_window) window = keys.positive("sliding_window", 4096);
  std::vector<bool> sliding(static_cast<size_t>(c.num_layers));
  if (keys.has("layer_types")) {
    const json& types = keys.at("layer_types");
    if (!types.is_array() || static_cast<int64_t>(types.size()) != c.num_layers)
      keys.error("key 'layer_types' must list one type per layer ({}), got {}", c.num_layers,
                 Keys::show(types));
    for (size_t i = 0; i < types.size(); ++i) {
      const std::string t = types[i].is_string() ? types[i].get<std::string>() : "";
      if (t != "full_attention" && t != "sliding_attention")
        keys.error("layer_types[{}] is {}; ferry supports \"full_attention\" and \"sliding_attention\"", i,
                   Keys::show(types[i]));
      sliding[i] = t == "sliding_attention";
    }
  } else {
    const int64_t max_window_layers = keys.integer("max_window_layers", 28);
    for (int64_t i = 0; i < c.num_layers; ++i) sliding[static_cast<size_t>(i)] = i >= max_window_layers;
  }
  if (!window) return;
  size_t sliding_layers = 0;
  for (bool s : sliding) sliding_layers += s;
  if (sliding_layers == 0) return;
  if (sliding_layers != sliding.size())
    keys.error(
        "use_sliding_window is true and {} of {} layers use a window (max_window_layers / layer_types); "
        "ferry supports the same attention on every layer — set use_sliding_window to false",
        sliding_layers, sliding.size());
  c.sliding_window = window;
}

// Keys that change the math when set to something other than their neutral value.
void reject_unsupported(const Keys& keys) {
  const std::string act = keys.string("hidden_act", "silu");
  if (act != "silu") keys.error("hidden_act '{}' is not supported; these architectures use \"silu\"", act);
  if (keys.integer("pretraining_tp", 1) > 1)
    keys.error("pretraining_tp {} is not supported; set it to 1 (it only splits the same matmuls)",
               keys.integer("pretraining_tp", 1));
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar"})
    if (keys.has(key))
      keys.error("key '{}' is set ({}); ferry does not implement it", key, Keys::show(keys.at(key)));
  if (keys.number("attention_dropout", 0.0) != 0.0)
    keys.error("attention_dropout {} is not supported; set it to 0.0", keys.number("attention_dropout", 0.0));
  if (keys.boolean("use_mrope", false))
    keys.error("use_mrope is true; multimodal RoPE (Qwen2-VL) is not supported");
}

DType parse_dtype_key(const Keys& keys) {
  const char* key = keys.has("dtype") ? "dtype" : "torch_dtype";  // transformers >= 4.56 writes "dtype"
  const std::string name = keys.string(key, "float32");
  DType dtype;
  if (!parse_torch_dtype(name, &dtype) ||
      (dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16))
    keys.error("{} '{}' is not supported; use \"bfloat16\", \"float16\" or \"float32\"", key, name);
  return dtype;
}

}  // namespace

ModelConfig parse_model_config(const json& config, const std::string& source) {
  if (!config.is_object()) fail("config", "{}: must be a JSON object, got {}", source, Keys::show(config));
  const Keys keys(config, source);
  ModelConfig c;
  parse_architecture(keys, c);
  parse_shape(keys, c);
  parse_rope(keys, c);
  parse_biases(keys, c);
  parse_sliding_window(keys, c);
  reject_unsupported(keys);
  c.tie_word_embeddings = keys.boolean("tie_word_embeddings", false);
  const int64_t parameters = approximate_parameters(c);
  if (parameters > kLimits.parameters)
    keys.error(
        "the sizes describe a model of about {:.3g} parameters, more than ferry's limit of {:.3g}; the "
        "config.json is corrupt or was edited by mistake",
        static_cast<double>(parameters), static_cast<double>(kLimits.parameters));
  c.dtype = parse_dtype_key(keys);
  c.raw = config;
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& model_dir) {
  const std::filesystem::path path =
      std::filesystem::is_regular_file(model_dir) ? model_dir : model_dir / "config.json";
  return parse_model_config(
      parse_json(read_text_file(path, "config", "a Hugging Face model directory holds config.json"), "config",
                 path.string(), "fix or re-download it"),
      path.string());
}

json model_config_to_json(const ModelConfig& c) {
  const ArchInfo& info = arch_info(c.arch);
  const char* where = "config";
  FERRY_CHECK(c.num_kv_heads > 0 && c.num_heads % c.num_kv_heads == 0 && c.head_dim > 0, where,
              "model_config_to_json: inconsistent head counts ({} heads, {} kv heads, head_dim {})",
              c.num_heads, c.num_kv_heads, c.head_dim);
  json j = json::object();
  j["architectures"] = {info.architecture_name};
  j["model_type"] = info.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_scaling.type == RopeScaling::Type::Llama3) {
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", c.rope_scaling.factor},
        {"low_freq_factor", c.rope_scaling.low_freq_factor},
        {"high_freq_factor", c.rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["hidden_act"] = "silu";
  j["initializer_range"] = c.initializer_range;
  j["attention_dropout"] = 0.0;
  j["torch_dtype"] = std::string(torch_dtype_name(c.dtype));
  j["use_cache"] = true;
  // Token ids are the tokenizer's business; repeat them when the source config had them.
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (c.raw.is_object() && c.raw.contains(key)) j[key] = c.raw[key];

  // The features each architecture can express; anything else cannot be written faithfully.
  switch (c.arch) {
    case Architecture::Llama:
      FERRY_CHECK(
          c.qkv_bias == c.o_bias && !c.qk_norm && !c.sliding_window, where,
          "model_config_to_json: LlamaForCausalLM has one attention_bias for q, k, v and o, no q/k norm and "
          "no sliding window");
      j["attention_bias"] = c.qkv_bias;
      j["mlp_bias"] = c.mlp_bias;
      j["pretraining_tp"] = 1;
      break;
    case Architecture::Mistral:
      FERRY_CHECK(!c.qkv_bias && !c.o_bias && !c.mlp_bias && !c.qk_norm, where,
                  "model_config_to_json: MistralForCausalLM has no biases and no q/k norm");
      j["sliding_window"] = c.sliding_window ? json(*c.sliding_window) : json(nullptr);
      break;
    case Architecture::Qwen2:
    case Architecture::Qwen3:
      if (c.arch == Architecture::Qwen2) {
        FERRY_CHECK(c.qkv_bias && !c.o_bias && !c.mlp_bias && !c.qk_norm, where,
                    "model_config_to_json: Qwen2ForCausalLM has q/k/v biases only and no q/k norm");
      } else {
        FERRY_CHECK(
            c.qkv_bias == c.o_bias && !c.mlp_bias && c.qk_norm, where,
            "model_config_to_json: Qwen3ForCausalLM has q/k norm and one attention_bias for q, k, v and o");
        j["attention_bias"] = c.qkv_bias;
      }
      // max_window_layers 0: every layer uses the window (Qwen2Config's layer rule).
      j["use_sliding_window"] = c.sliding_window.has_value();
      j["sliding_window"] = c.sliding_window ? json(*c.sliding_window) : json(nullptr);
      j["max_window_layers"] = c.sliding_window ? 0 : c.num_layers;
      break;
  }
  return j;
}

// torch rounds after every multiply and add; a fused multiply-add would change the last bit, so
// contraction is off here whatever flags the build adds (-march=native, -ffp-contract=fast).
#if defined(__clang__)
#define FERRY_NO_FP_CONTRACT
#elif defined(__GNUC__)
#define FERRY_NO_FP_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define FERRY_NO_FP_CONTRACT
#endif

namespace {

// transformers' _compute_yarn_parameters, each tensor step a separate fp32 operation as there:
// `extrapolation` are the plain frequencies (1 / base^(2i/dim)); the interpolated ones are
// 1 / (factor * base^(2i/dim)); a linear ramp over the dimensions between the correction range
// [low, high] (Python doubles, rounded out to whole dimensions) blends them.
FERRY_NO_FP_CONTRACT std::vector<float> yarn_inv_freq(const ModelConfig& c,
                                                      const std::vector<float>& extrapolation) {
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
  const RopeScaling& s = c.rope_scaling;
  const int64_t dim = c.head_dim;
  const double base = c.rope_theta;
  const auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) *
            std::log(static_cast<double>(s.original_max_position_embeddings) / (rotations * 2 * M_PI))) /
           (2 * std::log(base));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // as there: no division by zero
  const float factor = static_cast<float>(s.factor);
  const float low32 = static_cast<float>(low), span32 = static_cast<float>(high - low);
  std::vector<float> inv_freq(extrapolation.size());
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float pos_freq =
        std::pow(static_cast<float>(base), static_cast<float>(2 * i) / static_cast<float>(dim));
    const float interpolation = 1.0f / (factor * pos_freq);
    const float ramp = std::clamp((static_cast<float>(i) - low32) / span32, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    const float a = interpolation * (1.0f - extrapolation_factor);
    const float b = extrapolation[i] * extrapolation_factor;
    inv_freq[i] = a + b;
  }
  return inv_freq;
}

}  // namespace

float attention_scale(const ModelConfig& c) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (c.rope_scaling.type != RopeScaling::Type::Yarn || c.rope_scaling.attention_factor == 1.0) return scale;
  return scale * static_cast<float>(c.rope_scaling.attention_factor * c.rope_scaling.attention_factor);
}

FERRY_NO_FP_CONTRACT std::vector<float> rope_inv_freq(const ModelConfig& c) {
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
  // transformers: 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)),
  // every step in fp32 (a Python scalar meets a float32 tensor as float32). The steps below are
  // separate float operations in the same order. Checked against transformers 5.17 / torch 2.11 on
  // the CPU: bit-equal for Llama 3.1/3.2 (llama3 scaling) and Mistral; for theta 1e6 and 5e6 one
  // value in 64 is 1 ulp away, because torch's vectorized powf (SLEEF, 1-ulp bound) is not
  // correctly rounded where glibc's powf is.
  const int64_t dim = c.head_dim;
  const float base = static_cast<float>(c.rope_theta);
  std::vector<float> inv_freq(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv_freq[static_cast<size_t>(i)] = 1.0f / std::pow(base, exponent);
  }
  if (c.rope_scaling.type == RopeScaling::Type::Yarn) return yarn_inv_freq(c, inv_freq);
  if (c.rope_scaling.type != RopeScaling::Type::Llama3) return inv_freq;

  // transformers' _compute_llama3_parameters: long wavelengths are divided by `factor`, short ones
  // kept, and those in between interpolated smoothly.
  const RopeScaling& s = c.rope_scaling;
  const float factor = static_cast<float>(s.factor);
  const float low = static_cast<float>(s.low_freq_factor);
  const float old_context = static_cast<float>(s.original_max_position_embeddings);
  // These two are Python floats (double) there; they only meet fp32 tensors in comparisons,
  // where torch rounds them to fp32.
  const float low_freq_wavelen =
      static_cast<float>(static_cast<double>(s.original_max_position_embeddings) / s.low_freq_factor);
  const float high_freq_wavelen =
      static_cast<float>(static_cast<double>(s.original_max_position_embeddings) / s.high_freq_factor);
  const float two_pi = static_cast<float>(2.0 * M_PI);
  const float high_minus_low = static_cast<float>(s.high_freq_factor - s.low_freq_factor);
  for (float& f : inv_freq) {
    // `scalar / tensor` in torch is tensor.reciprocal() * scalar: two roundings, kept here.
    const float wavelen = (1.0f / f) * two_pi;
    const float scaled = wavelen > low_freq_wavelen ? f / factor : f;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (medium) {
      const float smooth = ((1.0f / wavelen) * old_context - low) / high_minus_low;
      const float a = (1.0f - smooth) * scaled / factor;
      const float b = smooth * scaled;
      f = a + b;
    } else {
      f = scaled;
    }
  }
  return inv_freq;
}

}  // namespace ferry
