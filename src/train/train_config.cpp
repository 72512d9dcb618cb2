#include "train/train_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/text_file.h"
#include "data/record_formats.h"
#include "io/hub_cache.h"
#include "train/model_source.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "config";
// More CPU threads than any machine has cores: a larger count is a typo, and would make the thread
// pool try to start that many threads.
constexpr int64_t kMaxThreads = 4096;
// Sequences (global_batch, micro_batch, gradient_accumulation_steps) and tokens (seq_len): 2^31 - 1
// at most, far past any real step (a row's positions are int32). The bound keeps the product of two
// of them, such as a step's tokens (global_batch x seq_len), inside int64.
constexpr int64_t kMaxCount = std::numeric_limits<int32_t>::max();
static_assert(kMaxCount <= std::numeric_limits<int64_t>::max() / kMaxCount);
// Devices that train together share one host (8 GPUs in a usual server, 16 in the largest): more is
// a typo, and would make the sim device group create that many devices.
constexpr int64_t kMaxDevices = 1024;
// A GPU slot holds one streamed unit's weights, and the planner searches 2 to 4 of them (more
// prefetch no further usefully; keeping a layer on the GPU is resident_layers' job). The schedule's
// cost grows with the slots: a billion of them kept `ferry plan` busy for minutes.
constexpr int64_t kMaxGpuSlots = 64;
// Passes over the data: more than a million is a typo. The trainer turns epochs x rows into a step
// count, which must stay a finite int64.
constexpr double kMaxEpochs = 1e6;

template <typename T>
T scalar_as(const YAML::Node& node, const std::string& key, const char* kind) {
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    FERRY_CHECK(!node.IsNull(), kWhere, "'{}' has no value; give {}, or remove the line", key, kind);
    fail(kWhere, "'{}' must be {}, got {}", key, kind,
         node.IsScalar() ? "'" + node.Scalar() + "'"
                         : std::string(node.IsSequence() ? "a list" : "a mapping") +
                               " (in YAML, one value is written "
                               "after the colon)");
  }
}

bool parse_bool(const YAML::Node& node, const std::string& key) {
  return scalar_as<bool>(node, key, "true or false");
}
int64_t parse_int(const YAML::Node& node, const std::string& key) {
  // Accept 1e3-style integers written by people ("max_steps: 1e3").
  if (node.IsScalar()) {
    const std::string& s = node.Scalar();
    if (s.find_first_of("eE.") != std::string::npos) {
      const double d = scalar_as<double>(node, key, "an integer");
      // Range first: converting a double beyond int64 is undefined.
      FERRY_CHECK(std::fabs(d) < 0x1p63 && d == std::trunc(d), kWhere, "'{}' must be an integer, got '{}'",
                  key, s);
      return static_cast<int64_t>(d);
    }
  }
  return scalar_as<int64_t>(node, key, "an integer");
}
double parse_double(const YAML::Node& node, const std::string& key) {
  return scalar_as<double>(node, key, "a number");
}
std::string parse_string(const YAML::Node& node, const std::string& key) {
  FERRY_CHECK(node.IsScalar(), kWhere, "'{}' must be a string", key);
  return node.Scalar();
}

// A list of integers: a YAML sequence, one integer, or "3,10" (which also works on the command line).
std::vector<int64_t> parse_int_list(const YAML::Node& node, const std::string& key) {
  std::vector<int64_t> values;
  if (node.IsSequence()) {
    for (const auto& item : node) values.push_back(parse_int(item, key));
    return values;
  }
  std::stringstream ss(parse_string(node, key));
  std::string part;
  while (std::getline(ss, part, ',')) {
    std::erase(part, ' ');
    if (!part.empty()) values.push_back(parse_int(YAML::Node(part), key));
  }
  return values;
}

// One of a fixed set of names, as its enum value.
template <typename T>
T parse_choice(const YAML::Node& node, const std::string& key,
               std::initializer_list<std::pair<const char*, T>> choices) {
  const std::string name = parse_string(node, key);
  std::string names;
  for (const auto& [n, value] : choices) {
    if (name == n) return value;
    names += (names.empty() ? "" : ", ") + std::string(n);
  }
  fail(kWhere, "'{}' must be one of {}; got '{}'", key, names, name);
}

// A byte size, or auto (empty) for the default.
std::optional<int64_t> parse_optional_size(const YAML::Node& node, const std::string& key) {
  const std::string text = parse_string(node, key);
  if (text.empty() || text == "auto") return std::nullopt;
  return parse_byte_size(text, key);
}

// A YAML value as JSON, for values handed on as they are (template variables): true/false are
// booleans, numbers are numbers, anything else is a string.
nlohmann::ordered_json yaml_to_json(const YAML::Node& node) {
  if (node.IsMap()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const auto& item : node) out[item.first.Scalar()] = yaml_to_json(item.second);
    return out;
  }
  if (node.IsSequence()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& item : node) out.push_back(yaml_to_json(item));
    return out;
  }
  if (!node.IsScalar()) return nullptr;
  const std::string& s = node.Scalar();
  if (node.Tag() == "!") return s;  // quoted: a string whatever it looks like
  if (s == "true" || s == "True") return true;
  if (s == "false" || s == "False") return false;
  if (s == "null" || s == "~") return nullptr;
  int64_t i = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), i);
  if (ec == std::errc() && end == s.data() + s.size()) return i;
  double d = 0;
  if (YAML::convert<double>::decode(node, d) && s.find_first_of("0123456789") != std::string::npos) return d;
  return s;
}

// Files: a YAML sequence, or a comma-separated list (which also works on the command line:
// data=a.jsonl,b.jsonl).
std::vector<std::filesystem::path> parse_path_list(const YAML::Node& node, const std::string& key) {
  std::vector<std::filesystem::path> paths;
  if (node.IsSequence()) {
    for (const auto& item : node) paths.emplace_back(parse_string(item, key));
    return paths;
  }
  std::stringstream ss(parse_string(node, key));
  std::string part;
  while (std::getline(ss, part, ','))
    if (!part.empty()) paths.emplace_back(part);
  return paths;
}

using Setter = std::function<void(TrainConfig&, const YAML::Node&, const std::string&)>;

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> table = {
      {"model", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.model = parse_string(n, k); }},
      {"data", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.data = parse_path_list(n, k); }},
      {"data_format",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         const std::string name = parse_string(n, k);
         const auto format = parse_data_format(name);
         FERRY_CHECK(format.has_value(), kWhere, "'{}' must be one of {}; got '{}'", k, data_format_names(), name);
         c.data_format = *format;
       }},
      {"output_dir", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.output_dir = parse_string(n, k); }},
      {"skip_malformed", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.skip_malformed = parse_bool(n, k); }},
      {"train_on_prompt", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.train_on_prompt = parse_bool(n, k); }},
      {"tokenizer", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.tokenizer = parse_string(n, k); }},
      {"chat_template", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.chat_template = parse_string(n, k); }},
      {"chat_template_kwargs",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         // Empty on the command line (chat_template_kwargs=) clears it.
         if (n.IsScalar() && n.Scalar().empty()) {
           c.chat_template_kwargs = nlohmann::ordered_json::object();
           return;
         }
         FERRY_CHECK(n.IsMap(), kWhere, "'{}' must be a mapping of template variables, like {{enable_thinking: false}}", k);
         c.chat_template_kwargs = yaml_to_json(n);
       }},
      {"cache_dir", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.cache_dir = parse_string(n, k); }},
      {"eval_data",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.eval_data = parse_path_list(n, k); }},
      {"val_split", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.val_split = parse_double(n, k); }},
      {"eval_steps", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.eval_steps = parse_int(n, k); }},
      {"save_best", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.save_best = parse_bool(n, k); }},
      {"early_stopping_patience",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.early_stopping_patience = parse_int(n, k); }},
      {"seq_len", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.seq_len = parse_int(n, k); }},
      {"global_batch", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.global_batch = parse_int(n, k); }},
      {"micro_batch",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         c.micro_batch = n.IsScalar() && n.Scalar() == "auto" ? 0 : parse_int(n, k);
       }},
      {"seq_tile",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         const std::string word = n.IsScalar() ? n.Scalar() : std::string();
         c.seq_tile = word == "auto" ? -1 : word == "off" ? 0 : parse_int(n, k);
       }},
      {"keep_every",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         c.keep_every = n.IsScalar() && n.Scalar() == "auto" ? -1 : parse_int(n, k);
       }},
      {"sweeps",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         c.sweeps = n.IsScalar() && n.Scalar() == "auto" ? -1 : parse_int(n, k);
       }},
      {"head_groups",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         c.head_groups = n.IsScalar() && n.Scalar() == "auto" ? -1 : parse_int(n, k);
       }},
      {"gradient_accumulation_steps",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.gradient_accumulation_steps = parse_int(n, k); }},
      {"packing", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.packing = parse_bool(n, k); }},
      {"packing_strategy",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         // TRL's names (bfd, wrapped) too.
         c.packing_strategy = parse_choice<PackingStrategy>(
             n, k, {{"auto", PackingStrategy::Auto}, {"best_fit", PackingStrategy::BestFit}, {"bfd", PackingStrategy::BestFit},
                    {"split", PackingStrategy::Split}, {"wrapped", PackingStrategy::Split}});
       }},
      {"shuffle", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.shuffle = parse_bool(n, k); }},
      {"max_steps", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.max_steps = parse_int(n, k); }},
      {"epochs", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.epochs = parse_double(n, k); }},
      {"learning_rate", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.learning_rate = parse_double(n, k); }},
      {"lr_scheduler_type",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.lr_scheduler_type = parse_lr_schedule(parse_string(n, k)); }},
      {"warmup_steps", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.warmup_steps = parse_int(n, k); }},
      {"warmup_ratio", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.warmup_ratio = parse_double(n, k); }},
      {"min_lr_ratio", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.min_lr_ratio = parse_double(n, k); }},
      {"weight_decay", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.weight_decay = parse_double(n, k); }},
      {"adam_beta1", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.adam_beta1 = parse_double(n, k); }},
      {"adam_beta2", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.adam_beta2 = parse_double(n, k); }},
      {"adam_epsilon", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.adam_epsilon = parse_double(n, k); }},
      {"max_grad_norm", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.max_grad_norm = parse_double(n, k); }},
      {"decay_norms_and_biases",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.decay_norms_and_biases = parse_bool(n, k); }},
      {"seed",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         const int64_t seed = parse_int(n, k);
         FERRY_CHECK(seed >= 0, kWhere, "'seed' must be a non-negative integer, got {}", seed);
         c.seed = static_cast<uint64_t>(seed);
       }},
      {"logging_steps", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.logging_steps = parse_int(n, k); }},
      {"report_to",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         c.report_to = parse_choice<ReportTo>(n, k, {{"none", ReportTo::None}, {"tensorboard", ReportTo::TensorBoard}});
       }},
      {"save_steps", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.save_steps = parse_int(n, k); }},
      {"save_total_limit", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.save_total_limit = parse_int(n, k); }},
      {"resume", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.resume = parse_bool(n, k); }},
      {"overwrite_output_dir",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.overwrite_output_dir = parse_bool(n, k); }},
      {"save_dtype",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         c.save_dtype = parse_choice<std::optional<DType>>(
             n, k, {{"auto", std::nullopt}, {"float32", DType::F32}, {"bfloat16", DType::BF16}, {"float16", DType::F16}});
       }},
      {"max_shard_size",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.max_shard_bytes = parse_byte_size(parse_string(n, k), k); }},
      {"device",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         c.device = parse_choice<DeviceKind>(
             n, k, {{"auto", DeviceKind::Auto}, {"cpu", DeviceKind::Cpu}, {"sim", DeviceKind::Sim}, {"cuda", DeviceKind::Cuda}});
       }},
      {"gpu_memory", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.gpu_memory = parse_optional_size(n, k); }},
      {"gpus",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         c.gpus = n.IsScalar() && n.Scalar() == "auto" ? 0 : parse_int(n, k);
         FERRY_CHECK(c.gpus >= 0, kWhere, "gpus: {}: give the number of devices (1 or more) or auto", c.gpus);
       }},
      {"host_memory", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.host_memory = parse_optional_size(n, k); }},
      {"disk_memory",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         // 0 is the way to say "no disk tier" (the default), unlike the other sizes.
         c.disk_memory = parse_string(n, k) == "0" ? 0 : parse_optional_size(n, k).value_or(0);
       }},
      {"disk_layers", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.disk_layers = parse_int(n, k); }},
      {"disk_dir", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.disk_dir = parse_string(n, k); }},
      {"threads", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.threads = parse_int(n, k); }},
      {"gpu_slots", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.gpu_slots = parse_int(n, k); }},
      {"offload_activations",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         c.offload_activations = parse_choice<ActivationOffload>(
             n, k, {{"auto", ActivationOffload::Auto}, {"all", ActivationOffload::All}, {"none", ActivationOffload::None}});
       }},
      {"internals_on_host",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.internals_on_host = parse_bool(n, k); }},
      {"streamed_optimizer",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.streamed_optimizer = parse_bool(n, k); }},
      {"keep_norm_outputs",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.keep_norm_outputs = parse_bool(n, k); }},
      {"keep_activation",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.keep_activation = parse_bool(n, k); }},
      {"group_head_weight_grad",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         c.group_head_weight_grad = parse_bool(n, k);
       }},
      {"recompute",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         c.recompute = parse_choice<RecomputePolicy>(n, k, {{"auto", RecomputePolicy::Auto}, {"all", RecomputePolicy::All}});
       }},
      {"weight_upload",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         c.weight_upload = parse_choice<std::optional<WeightUpload>>(
             n, k, {{"auto", std::nullopt}, {"bf16-host-shadow", WeightUpload::HostShadow},
                    {"convert-on-upload", WeightUpload::ConvertOnUpload}});
       }},
      {"optimizer_state",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         c.optimizer_state = parse_choice<OptimizerStateFormat>(
             n, k, {{"fp32", OptimizerStateFormat::Fp32}, {"fp32_q8", OptimizerStateFormat::Fp32Q8},
                    {"bf16c8_q8", OptimizerStateFormat::Bf16C8Q8}, {"bf16sr_q8", OptimizerStateFormat::Bf16SrQ8}});
       }},
      {"update_schedule",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) {
         c.update_schedule = parse_choice<std::optional<UpdateSchedule>>(
             n, k, {{"auto", std::nullopt}, {"after-backward", UpdateSchedule::AfterBackward},
                    {"during-backward", UpdateSchedule::DuringBackward}});
       }},
      {"resident_layers",
       [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.resident_layers = parse_int(n, k); }},
      {"trace", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.trace = parse_string(n, k); }},
      {"trace_steps", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.trace_steps = parse_int_list(n, k); }},
      {"trace_memory", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.trace_memory = parse_optional_size(n, k).value_or(c.trace_memory); }},
      {"profile", [](TrainConfig& c, const YAML::Node& n, const std::string& k) { c.profile = parse_string(n, k); }},
  };
  return table;
}

// Other projects' spellings of the same keys, accepted so that configs port over.
const std::map<std::string, std::string>& aliases() {
  static const std::map<std::string, std::string> table = {
      {"lr", "learning_rate"},
      {"eval_dataset", "eval_data"},
      {"val_size", "val_split"},
      {"model_name_or_path", "model"},
      {"dataset", "data"},
      {"train_on_input", "train_on_prompt"},
      {"cutoff_len", "seq_len"},
      {"max_seq_len", "seq_len"},
      {"num_train_epochs", "epochs"},
      {"per_device_train_batch_size", "micro_batch"},
      {"sequence_tile", "seq_tile"},
      {"grad_clip", "max_grad_norm"},
      {"scheduler", "lr_scheduler_type"},
  };
  return table;
}

std::string known_keys() {
  std::string s;
  for (const auto& [k, _] : setters()) s += (s.empty() ? "" : ", ") + k;
  return s;
}

// Edits (insertions, deletions, substitutions) that turn a into b.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The key or alias closest to a mistyped one, when it is close enough to be the one meant (at most
// a third of its letters wrong); empty otherwise.
std::string nearest_key(const std::string& key) {
  std::string best;
  size_t best_distance = key.size() / 3 + 1;
  auto consider = [&](const std::string& candidate) {
    const size_t d = edit_distance(key, candidate);
    if (d < best_distance) best = candidate, best_distance = d;
  };
  for (const auto& [k, _] : setters()) consider(k);
  for (const auto& [k, _] : aliases()) consider(k);
  return best;
}

std::string canonical_key(const std::string& key) {
  auto a = aliases().find(key);
  return a == aliases().end() ? key : a->second;
}

// Sets one key. `where` names the place ("train.yaml:3" or "command line"), which errors from the
// value's parsing are given too.
// Returns the key it set (the canonical name).
std::string apply(TrainConfig& c, const std::string& key, const YAML::Node& value, const std::string& where) {
  auto it = setters().find(canonical_key(key));
  if (it == setters().end()) {
    const std::string near = nearest_key(key);
    if (!near.empty()) fail(kWhere, "{}: unknown key '{}'; did you mean '{}'?", where, key, near);
    fail(kWhere, "{}: unknown key '{}'; the keys are: {}", where, key, known_keys());
  }
  try {
    it->second(c, value, it->first);
  } catch (const Error& e) {
    const std::string what = e.what();
    const std::string prefix = fmt::format("[{}] ", kWhere);
    fail(kWhere, "{}: {}", where, what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what);
  }
  return it->first;
}

// The keys of the file by what they set: a key given twice, or under two of its names (lr and
// learning_rate), would otherwise let the last one win silently.
class KeysSeen {
 public:
  void add(const std::string& key, const std::string& where) {
    const auto [it, inserted] = seen_.try_emplace(canonical_key(key), key, where);
    if (inserted) return;
    const auto& [first_key, first_where] = it->second;
    if (first_key == key) fail(kWhere, "'{}' is given twice ({} and {}); keep one", key, first_where, where);
    fail(kWhere, "'{}' ({}) and '{}' ({}) both set {}; keep one", first_key, first_where, key, where,
         it->first);
  }

 private:
  std::map<std::string, std::pair<std::string, std::string>> seen_;  // setting -> (key, where)
};

}  // namespace

const char* device_kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::Auto:
      return "auto";
    case DeviceKind::Cpu:
      return "cpu";
    case DeviceKind::Sim:
      return "sim";
    case DeviceKind::Cuda:
      return "cuda";
  }
  return "?";
}

namespace {

using KeysGiven = std::set<std::string>;  // canonical keys the file or the command line set

void apply_file(TrainConfig& c, const std::string& yaml_text, const std::string& source, KeysGiven& given) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    fail(kWhere, "{}: not valid YAML: {}", source, e.what());
  }
  if (!root || root.IsNull()) return;
  FERRY_CHECK(root.IsMap(), kWhere, "{}: the config must be a mapping of key: value lines", source);
  KeysSeen seen;
  for (const auto& item : root) {
    const std::string where = fmt::format("{}:{}", source, item.first.Mark().line + 1);
    FERRY_CHECK(item.first.IsScalar(), kWhere, "{}: a key must be a name, not a list or a mapping", where);
    const std::string key = item.first.Scalar();
    seen.add(key, "line " + std::to_string(item.first.Mark().line + 1));
    given.insert(apply(c, key, item.second, where));
  }
}

// On the command line a later key=value wins, as the command line wins over the file: scripts
// append overrides to a base list.
void apply_overrides(TrainConfig& c, const std::vector<std::string>& overrides, KeysGiven& given) {
  for (const auto& o : overrides) {
    const size_t eq = o.find('=');
    FERRY_CHECK(eq != std::string::npos && eq > 0, kWhere, "override '{}' must look like key=value", o);
    YAML::Node value;
    try {
      value = YAML::Load(o.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      fail(kWhere, "override '{}': value is not valid YAML: {}", o, e.what());
    }
    if (!value || value.IsNull()) value = YAML::Node(std::string());
    given.insert(apply(c, o.substr(0, eq), value, "command line"));
  }
}

// Hugging Face's batch (per-device batch × accumulation steps) as global_batch. Both spellings given
// and disagreeing would leave one silently ignored: an error instead.
void resolve_batch(TrainConfig& c, const KeysGiven& given) {
  if (!given.contains("gradient_accumulation_steps") || c.gradient_accumulation_steps == 0) return;
  FERRY_CHECK(
      c.micro_batch >= 1, kWhere,
      "gradient_accumulation_steps multiplies per_device_train_batch_size (micro_batch), which is auto (the "
      "default: the planner picks it); set micro_batch to a number, or give global_batch instead");
  // Checked: two values near 2^62 would wrap to a small (or zero) batch.
  int64_t global = 0;
  FERRY_CHECK(
      !__builtin_mul_overflow(c.micro_batch, c.gradient_accumulation_steps, &global) && global <= kMaxCount,
      kWhere,
      "per_device_train_batch_size (micro_batch) {} × gradient_accumulation_steps {} is more than "
      "{} sequences a step; lower them",
      c.micro_batch, c.gradient_accumulation_steps, kMaxCount);
  FERRY_CHECK(
      !given.contains("global_batch") || c.global_batch == global, kWhere,
      "global_batch is {}, but per_device_train_batch_size (micro_batch) {} × gradient_accumulation_steps "
      "{} is {}; give either global_batch or gradient_accumulation_steps, or make them agree",
      c.global_batch, c.micro_batch, c.gradient_accumulation_steps, global);
  c.global_batch = global;
}

// Makes the config's relative paths relative to `base`.
void resolve_paths(TrainConfig& c, const std::filesystem::path& base) {
  if (base.empty()) return;
  auto resolve = [&](std::filesystem::path& p) {
    if (!p.empty() && p.is_relative()) p = base / p;
  };
  // `model: org/name` with no such folder beside the file names a Hugging Face model, found in the
  // hub cache (resolve_model_path).
  std::error_code ec;
  // `model: preset:ARCH/NAME` names no file at all (train/model_source.h).
  if (!(looks_like_hub_repo_id(c.model.string()) && !std::filesystem::exists(base / c.model, ec)) &&
      !is_preset_model(c.model))
    resolve(c.model);
  resolve(c.output_dir);
  resolve(c.tokenizer);
  resolve(c.chat_template);
  resolve(c.cache_dir);
  resolve(c.trace);
  resolve(c.profile);
  resolve(c.disk_dir);
  for (auto& d : c.data) resolve(d);
  for (auto& d : c.eval_data) resolve(d);
}

}  // namespace

TrainConfig parse_train_config(const std::string& yaml_text, const std::vector<std::string>& overrides,
                               const std::string& source) {
  TrainConfig c;
  KeysGiven given;
  apply_file(c, yaml_text, source, given);
  apply_overrides(c, overrides, given);
  resolve_batch(c, given);
  validate_train_config(c);
  return c;
}

TrainConfig load_train_config(const std::filesystem::path& yaml_path,
                              const std::vector<std::string>& overrides) {
  TrainConfig c;
  KeysGiven given;
  apply_file(c, read_text_file(yaml_path, kWhere, "check the path"), yaml_path.string(), given);
  // Relative paths in a config file are relative to the file, as people expect when they move a
  // project directory around; those given on the command line are relative to where the command
  // runs, as the shell completed them.
  resolve_paths(c, yaml_path.parent_path());
  apply_overrides(c, overrides, given);
  resolve_batch(c, given);
  c.model = resolve_model_path(c.model);
  validate_train_config(c);
  return c;
}

std::vector<std::string> train_config_keys() {
  std::vector<std::string> keys;
  for (const auto& [k, _] : setters()) keys.push_back(k);
  return keys;
}

namespace {

// The batch geometry: counts within their bounds first, so that the products checked after them
// cannot wrap (a wrapped micro_batch x gpus of 0 was a division by zero).
void validate_batch(const TrainConfig& c) {
  FERRY_CHECK(c.seq_len >= 2 && c.seq_len <= kMaxCount, kWhere,
              "seq_len must be between 2 and {} tokens, got {}", kMaxCount, c.seq_len);
  FERRY_CHECK(c.gradient_accumulation_steps >= 0 && c.gradient_accumulation_steps <= kMaxCount, kWhere,
              "gradient_accumulation_steps must be between 1 and {} (or 0: not given), got {}", kMaxCount,
              c.gradient_accumulation_steps);
  FERRY_CHECK(c.global_batch >= 1 && c.global_batch <= kMaxCount, kWhere,
              "global_batch must be between 1 and {} sequences, got {}", kMaxCount, c.global_batch);
  FERRY_CHECK(c.micro_batch >= 0 && c.micro_batch <= kMaxCount, kWhere,
              "micro_batch must be between 1 and {} sequences, or auto (the planner picks), got {}",
              kMaxCount, c.micro_batch);
  FERRY_CHECK(c.gpus >= 0 && c.gpus <= kMaxDevices, kWhere,
              "gpus must be between 1 and {} (the devices of one host), or auto, got {}", kMaxDevices,
              c.gpus);
  FERRY_CHECK(c.micro_batch == 0 || c.global_batch % c.micro_batch == 0, kWhere,
              "global_batch ({}) must be a multiple of micro_batch ({})", c.global_batch, c.micro_batch);
  int64_t per_round = 0;  // sequences of one micro-batch on every device
  const bool fits = !__builtin_mul_overflow(c.micro_batch, c.gpus, &per_round);
  FERRY_CHECK(c.gpus == 0 || c.micro_batch == 0 || (fits && c.global_batch % per_round == 0), kWhere,
              "global_batch ({}) must be a multiple of micro_batch x gpus ({} x {}): each device runs an "
              "equal share of a step's micro-batches",
              c.global_batch, c.micro_batch, c.gpus);
}

// How long the run is: epochs is finite, not negative and at most kMaxEpochs whether or not
// max_steps overrides it, so that a later max_steps: 0 never meets a bad one.
void validate_length(const TrainConfig& c) {
  FERRY_CHECK(c.max_steps >= 0, kWhere, "max_steps must be >= 0");
  FERRY_CHECK(std::isfinite(c.epochs) && c.epochs >= 0 && c.epochs <= kMaxEpochs, kWhere,
              "epochs must be a number of passes over the data between 0 and {:.0f}, got {}", kMaxEpochs,
              c.epochs);
  FERRY_CHECK(c.max_steps > 0 || c.epochs > 0, kWhere, "set max_steps or epochs to a positive value");
}

}  // namespace

void validate_train_config(const TrainConfig& c) {
  validate_batch(c);
  validate_length(c);
  FERRY_CHECK(c.chat_template_kwargs.is_object(), kWhere, "chat_template_kwargs must be a mapping");
  FERRY_CHECK(c.seq_tile >= -1, kWhere,
              "seq_tile must be a number of tokens, auto (the planner picks) or off (untiled), got {}",
              c.seq_tile);
  FERRY_CHECK(
      c.keep_every == -1 || c.keep_every >= 1, kWhere,
      "keep_every must be a number of layers (1: every boundary activation kept) or auto (the planner "
      "picks), got {}",
      c.keep_every);
  FERRY_CHECK(c.sweeps == -1 || c.sweeps >= 1, kWhere,
              "sweeps must be a number of sweeps of a step's micro-chunks (1: none, the whole step "
              "layer by layer) or auto (the planner picks), got {}",
              c.sweeps);
  FERRY_CHECK(c.head_groups == -1 || c.head_groups >= 1, kWhere,
              "head_groups must be a number of groups of KV heads (1: all heads at once; a divisor of the "
              "model's num_key_value_heads) or auto (the planner picks), got {}",
              c.head_groups);
  FERRY_CHECK(c.gpus == 1 || c.device != DeviceKind::Cpu, kWhere,
              "gpus: {} trains on several devices; device: cpu is the one-process reference (use device: "
              "sim or cuda)",
              c.gpus);
  FERRY_CHECK(c.learning_rate >= 0, kWhere, "learning_rate must be >= 0, got {}", c.learning_rate);
  FERRY_CHECK(c.warmup_steps >= 0, kWhere, "warmup_steps must be >= 0");
  FERRY_CHECK(c.warmup_ratio >= 0 && c.warmup_ratio <= 1, kWhere, "warmup_ratio must be in [0, 1]");
  FERRY_CHECK(c.min_lr_ratio >= 0 && c.min_lr_ratio <= 1, kWhere, "min_lr_ratio must be in [0, 1]");
  FERRY_CHECK(c.weight_decay >= 0, kWhere, "weight_decay must be >= 0");
  FERRY_CHECK(c.adam_beta1 >= 0 && c.adam_beta1 < 1, kWhere, "adam_beta1 must be in [0, 1), got {}",
              c.adam_beta1);
  FERRY_CHECK(c.adam_beta2 >= 0 && c.adam_beta2 < 1, kWhere, "adam_beta2 must be in [0, 1), got {}",
              c.adam_beta2);
  FERRY_CHECK(c.adam_epsilon >= 0, kWhere, "adam_epsilon must be >= 0");
  FERRY_CHECK(c.max_grad_norm >= 0, kWhere, "max_grad_norm must be >= 0 (0 disables clipping)");
  FERRY_CHECK(c.logging_steps >= 1, kWhere, "logging_steps must be at least 1");
  FERRY_CHECK(c.save_steps >= 0, kWhere, "save_steps must be >= 0");
  FERRY_CHECK(c.save_total_limit >= 0, kWhere, "save_total_limit must be >= 0");
  FERRY_CHECK(c.threads >= 0 && c.threads <= kMaxThreads, kWhere,
              "threads must be between 0 (one per core) and {} (it counts CPU threads), got {}", kMaxThreads,
              c.threads);
  FERRY_CHECK(c.max_shard_bytes > 0, kWhere, "max_shard_size must be a positive size such as 5GB");
  for (const auto& [name, value] : {std::pair<const char*, double>{"learning_rate", c.learning_rate},
                                    {"warmup_ratio", c.warmup_ratio},
                                    {"min_lr_ratio", c.min_lr_ratio},
                                    {"weight_decay", c.weight_decay},
                                    {"adam_beta1", c.adam_beta1},
                                    {"adam_beta2", c.adam_beta2},
                                    {"adam_epsilon", c.adam_epsilon},
                                    {"max_grad_norm", c.max_grad_norm}})
    FERRY_CHECK(std::isfinite(value), kWhere, "{} must be a finite number, got {}", name, value);
  FERRY_CHECK(
      !(c.resume && c.overwrite_output_dir), kWhere,
      "resume=true continues the run in output_dir and overwrite_output_dir=true discards it; set only one");
  FERRY_CHECK(
      c.gpu_slots >= 0 && c.gpu_slots <= kMaxGpuSlots, kWhere,
      "gpu_slots must be between 1 and {} (each holds one streamed layer's weights; to keep layers on "
      "the GPU set resident_layers), or 0: the planner chooses; got {}",
      kMaxGpuSlots, c.gpu_slots);
  FERRY_CHECK(c.resident_layers >= -1, kWhere,
              "resident_layers must be >= 0, or -1 for the planner's choice");
  FERRY_CHECK(
      c.update_schedule != UpdateSchedule::DuringBackward || c.max_grad_norm == 0, kWhere,
      "update_schedule: during-backward updates each unit before the global gradient norm is known, so it "
      "cannot clip; set max_grad_norm: 0, or use after-backward");
  FERRY_CHECK(c.val_split >= 0 && c.val_split <= 0.5, kWhere,
              "val_split is the share of the documents held out for evaluation, between 0 and 0.5; got {}",
              c.val_split);
  FERRY_CHECK(c.eval_data.empty() || c.val_split == 0, kWhere,
              "give eval_data (files to evaluate on) or val_split (a share of `data` held out), not both");
  FERRY_CHECK(c.eval_steps >= 0, kWhere, "eval_steps must be >= 0 (0: evaluate at the end only)");
  FERRY_CHECK(c.early_stopping_patience >= 0, kWhere,
              "early_stopping_patience must be >= 0 (0: never stop early)");
  const bool evaluates = !c.eval_data.empty() || c.val_split > 0;
  FERRY_CHECK(
      evaluates || (c.eval_steps == 0 && !c.save_best && c.early_stopping_patience == 0), kWhere,
      "eval_steps, save_best and early_stopping_patience need evaluation data: set eval_data (files) or "
      "val_split (a share of `data`, e.g. 0.05)");
  FERRY_CHECK(c.early_stopping_patience == 0 || c.eval_steps > 0, kWhere,
              "early_stopping_patience counts evaluations during training: set eval_steps too");
  FERRY_CHECK(c.disk_memory >= 0, kWhere, "disk_memory must be a size such as 100GiB, or 0 for no disk tier");
  FERRY_CHECK(c.disk_layers >= -1, kWhere, "disk_layers must be >= 0, or -1 for the planner's choice");
  FERRY_CHECK(
      c.disk_layers <= 0 || c.disk_memory > 0, kWhere,
      "disk_layers puts optimizer state on disk: set disk_memory (the most it may take) and disk_dir");
  FERRY_CHECK(c.disk_memory == 0 || !c.disk_dir.empty(), kWhere,
              "disk_memory puts optimizer state on disk, but disk_dir names no directory; set disk_dir to a "
              "directory on a fast local disk (NVMe), or disk_memory: 0");
  FERRY_CHECK(c.trace.empty() || !c.trace_steps.empty(), kWhere,
              "trace_steps must name at least one step to trace");
  for (int64_t s : c.trace_steps)
    FERRY_CHECK(s >= 1, kWhere, "trace_steps are optimizer steps, counted from 1; got {}", s);
  FERRY_CHECK(
      c.trace_memory >= static_cast<int64_t>(kMinTraceHostBytes), kWhere,
      "trace_memory: {} is less than the {} a trace needs for its file's writing and first spans; give "
      "more, such as the default {}",
      format_bytes(static_cast<size_t>(std::max<int64_t>(c.trace_memory, 0))),
      format_bytes(kMinTraceHostBytes), format_bytes(kTraceHostBytes));
}

}  // namespace ferry
