#include "planner/profile.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/json_text.h"
#include "io/atomic_file.h"
#include "optim/state_format.h"

namespace ferry {

namespace {

// Bounds of the whole numbers a profile holds: counts that are int32 or int where they are used
// (sequence length, tokens, threads, devices, method), and byte counts (4 EiB, past any machine).
constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxBytes = int64_t{1} << 62;

nlohmann::json linear_json(const LinearTime& t) {
  return {{"fixed_s", t.fixed_s}, {"per_token_s", t.per_token_s}};
}

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  const nlohmann::json& object(const nlohmann::json& j, const char* key) const {
    FERRY_CHECK(json_has(j, key, &nlohmann::json::is_object), "profile",
                "{}: \"{}\" is missing or not an object; measure the profile again (ferry profile)", source_,
                key);
    return j.at(key);
  }
  // A finite number >= 0 (rates may be 0 where something was not measured).
  double number(const nlohmann::json& j, const char* key) const {
    FERRY_CHECK(json_has(j, key, &nlohmann::json::is_number), "profile",
                "{}: \"{}\" is missing or not a number; measure the profile again (ferry profile)", source_,
                key);
    const double v = j.at(key).get<double>();
    FERRY_CHECK(v >= 0.0 && v < 1e300, "profile", "{}: \"{}\" = {} is not a finite non-negative number",
                source_, key, v);
    return v;
  }
  double positive(const nlohmann::json& j, const char* key) const {
    const double v = number(j, key);
    FERRY_CHECK(v > 0.0, "profile", "{}: \"{}\" must be positive", source_, key);
    return v;
  }
  // A whole number in [min, max] (files write some as 2048.0): a fraction, or a value beyond what
  // the integer it becomes holds (1e299 bytes became 1, method 4294967296 became 0), is refused
  // rather than cast. `max` is at most 2^62, which a double holds exactly.
  int64_t whole(const nlohmann::json& j, const char* key, int64_t min, int64_t max) const {
    FERRY_ASSERT(min >= 0 && max <= kMaxBytes);
    const double v = number(j, key);
    FERRY_CHECK(v == std::trunc(v) && v >= static_cast<double>(min) && v <= static_cast<double>(max),
                "profile",
                "{}: \"{}\" = {} must be a whole number from {} to {}; measure the profile again (ferry "
                "profile)",
                source_, key, v, min, max);
    return static_cast<int64_t>(v);
  }
  // A size in bytes, kept as a double as the cost model takes it.
  double bytes(const nlohmann::json& j, const char* key) const {
    return static_cast<double>(whole(j, key, 1, kMaxBytes));
  }
  // A share of a rate: in (0, 1].
  double fraction(const nlohmann::json& j, const char* key) const {
    const double v = number(j, key);
    FERRY_CHECK(v > 0.0 && v <= 1.0, "profile", "{}: \"{}\" = {} must be in (0, 1]", source_, key, v);
    return v;
  }
  bool boolean(const nlohmann::json& j, const char* key) const {
    FERRY_CHECK(json_has(j, key, &nlohmann::json::is_boolean), "profile",
                "{}: \"{}\" is missing or not true or false", source_, key);
    return j.at(key).get<bool>();
  }
  std::string string(const nlohmann::json& j, const char* key) const {
    FERRY_CHECK(json_has(j, key, &nlohmann::json::is_string), "profile",
                "{}: \"{}\" is missing or not a string", source_, key);
    return j.at(key).get<std::string>();
  }
  LinearTime linear(const nlohmann::json& j, const char* key) const {
    const auto& o = object(j, key);
    return {number(o, "fixed_s"), number(o, "per_token_s")};
  }

 private:
  std::string source_;
};

}  // namespace

std::string model_shape_key(const ModelConfig& c, int64_t seq_len, DType weight_dtype) {
  return fmt::format("{}-h{}-i{}-L{}-q{}x{}-kv{}-v{}{}{}{}-s{}-{}", c.model_type, c.hidden_size,
                     c.intermediate_size, c.num_layers, c.num_heads, c.head_dim, c.num_kv_heads, c.vocab_size,
                     c.qkv_bias ? "-qkvb" : "", c.qk_norm ? "-qkn" : "", c.tie_word_embeddings ? "-tied" : "",
                     seq_len, dtype_name(weight_dtype));
}

nlohmann::json profile_to_json(const MachineProfile& p) {
  nlohmann::json j = {
      // A profile without the sharing measurement is saved in the format that has none.
      {"version", p.host.memory_sharing_measured ? MachineProfile::kVersion : 2},
      {"device_name", p.device_name},
      {"device_memory_bytes", p.device_memory_bytes},
      {"shape_key", p.shape_key},
      {"seq_len", p.seq_len},
      {"weight_dtype", std::string(dtype_name(p.weight_dtype))},
      {"kernels", p.kernels},
      {"method", p.method},
      {"compute",
       {{"embedding_forward", linear_json(p.compute.embedding_forward)},
        {"embedding_backward", linear_json(p.compute.embedding_backward)},
        {"layer_forward", linear_json(p.compute.layer_forward)},
        {"layer_backward", linear_json(p.compute.layer_backward)},
        {"layer_backward_kept", linear_json(p.compute.layer_backward_kept)},
        {"layer_backward_kept_all", linear_json(p.compute.layer_backward_kept_all)},
        {"layer_tile_tokens", p.compute.layer_tile_tokens},
        {"layer_head_groups", p.compute.layer_head_groups},
        {"own_attention_forward", p.compute.own_attention_forward},
        {"own_attention_backward", p.compute.own_attention_backward},
        {"head", linear_json(p.compute.head)},
        {"head_f32_grads", linear_json(p.compute.head_f32_grads)},
        {"head_grouped", linear_json(p.compute.head_grouped)},
        {"head_f32_grads_grouped", linear_json(p.compute.head_f32_grads_grouped)},
        {"gpu_adamw_params_per_s", p.compute.gpu_adamw_params_per_s},
        {"grad_norm_params_per_s", p.compute.grad_norm_params_per_s}}},
      {"transfer",
       {{"h2d_bytes_per_s", p.transfer.h2d_bytes_per_s},
        {"d2h_bytes_per_s", p.transfer.d2h_bytes_per_s},
        {"duplex_h2d_bytes_per_s", p.transfer.duplex_h2d_bytes_per_s},
        {"duplex_d2h_bytes_per_s", p.transfer.duplex_d2h_bytes_per_s},
        {"latency_s", p.transfer.latency_s}}},
      {"host",
       {{"threads", p.host.threads},
        {"cpu_adamw_params_per_s", p.host.cpu_adamw_params_per_s},
        {"memory_bytes", p.host.memory_bytes},
        {"disk_read_bytes_per_s", p.host.disk_read_bytes_per_s},
        {"disk_write_bytes_per_s", p.host.disk_write_bytes_per_s}}},
  };
  for (const auto f : kLeanStateFormats) {
    const double rate = p.host.lean_adamw_params_per_s[static_cast<int>(f)];
    if (rate > 0) j["host"]["lean_adamw_params_per_s"][state_format_name(f)] = rate;
  }
  if (p.device_uncapped_memory_bytes > 0) j["device_uncapped_memory_bytes"] = p.device_uncapped_memory_bytes;
  if (p.collective.bus_bytes_per_s > 0)
    j["collective"] = {{"bus_bytes_per_s", p.collective.bus_bytes_per_s},
                       {"latency_s", p.collective.latency_s},
                       {"devices", p.collective.devices}};
  if (p.host.memory_sharing_measured) {
    const HostMemorySharing& s = p.host.memory_sharing;
    j["host"]["memory_sharing"] = {{"cpu_adamw_beside_copy", s.cpu_beside_copy},
                                   {"cpu_adamw_beside_duplex", s.cpu_beside_duplex},
                                   {"copy_beside_cpu_adamw", s.copy_beside_cpu},
                                   {"duplex_beside_cpu_adamw", s.duplex_beside_cpu}};
  }
  return j;
}

MachineProfile profile_from_json(const nlohmann::json& j, const std::string& source) {
  const Reader r(source);
  FERRY_CHECK(j.is_object(), "profile", "{}: not a JSON object", source);
  constexpr int kOldestReadable = 2;
  // As int64: get<int> would wrap 4294967298 to 2.
  const int64_t version =
      json_has(j, "version", &nlohmann::json::is_number_integer) ? j.at("version").get<int64_t>() : -1;
  FERRY_CHECK(version >= kOldestReadable && version <= MachineProfile::kVersion, "profile",
              "{}: profile format version {} to {} expected; measure the profile again (ferry profile)",
              source, kOldestReadable, MachineProfile::kVersion);
  MachineProfile p;
  p.device_name = r.string(j, "device_name");
  p.device_memory_bytes = r.bytes(j, "device_memory_bytes");
  if (j.contains("device_uncapped_memory_bytes"))
    p.device_uncapped_memory_bytes = r.bytes(j, "device_uncapped_memory_bytes");
  p.shape_key = r.string(j, "shape_key");
  if (j.contains("kernels")) p.kernels = r.string(j, "kernels");
  if (j.contains("method")) p.method = static_cast<int>(r.whole(j, "method", 0, kMaxInt));
  p.seq_len = r.whole(j, "seq_len", 1, kMaxInt);
  FERRY_CHECK(parse_dtype(r.string(j, "weight_dtype"), &p.weight_dtype), "profile",
              "{}: unknown weight_dtype", source);
  const auto& c = r.object(j, "compute");
  p.compute.embedding_forward = r.linear(c, "embedding_forward");
  p.compute.embedding_backward = r.linear(c, "embedding_backward");
  p.compute.layer_forward = r.linear(c, "layer_forward");
  p.compute.layer_backward = r.linear(c, "layer_backward");
  if (c.contains("layer_backward_kept")) p.compute.layer_backward_kept = r.linear(c, "layer_backward_kept");
  if (c.contains("layer_backward_kept_all"))
    p.compute.layer_backward_kept_all = r.linear(c, "layer_backward_kept_all");
  if (c.contains("layer_tile_tokens"))
    p.compute.layer_tile_tokens = r.whole(c, "layer_tile_tokens", 0, kMaxInt);
  if (c.contains("layer_head_groups"))
    p.compute.layer_head_groups = r.whole(c, "layer_head_groups", 1, kMaxInt);
  if (c.contains("own_attention_forward"))
    p.compute.own_attention_forward = r.boolean(c, "own_attention_forward");
  if (c.contains("own_attention_backward"))
    p.compute.own_attention_backward = r.boolean(c, "own_attention_backward");
  p.compute.head = r.linear(c, "head");
  p.compute.head_f32_grads = c.contains("head_f32_grads") ? r.linear(c, "head_f32_grads") : p.compute.head;
  p.compute.head_grouped = c.contains("head_grouped") ? r.linear(c, "head_grouped") : p.compute.head;
  p.compute.head_f32_grads_grouped =
      c.contains("head_f32_grads_grouped") ? r.linear(c, "head_f32_grads_grouped") : p.compute.head_f32_grads;
  p.compute.gpu_adamw_params_per_s = r.number(c, "gpu_adamw_params_per_s");
  p.compute.grad_norm_params_per_s = r.positive(c, "grad_norm_params_per_s");
  FERRY_CHECK(p.compute.layer_forward.per_token_s > 0 && p.compute.layer_backward.per_token_s > 0, "profile",
              "{}: the layer times must grow with the tokens (per_token_s > 0)", source);
  const auto& t = r.object(j, "transfer");
  p.transfer.h2d_bytes_per_s = r.positive(t, "h2d_bytes_per_s");
  p.transfer.d2h_bytes_per_s = r.positive(t, "d2h_bytes_per_s");
  p.transfer.duplex_h2d_bytes_per_s = r.positive(t, "duplex_h2d_bytes_per_s");
  p.transfer.duplex_d2h_bytes_per_s = r.positive(t, "duplex_d2h_bytes_per_s");
  p.transfer.latency_s = r.number(t, "latency_s");
  const auto& h = r.object(j, "host");
  p.host.threads = static_cast<int>(r.whole(h, "threads", 1, kMaxInt));
  p.host.cpu_adamw_params_per_s = r.positive(h, "cpu_adamw_params_per_s");
  p.host.memory_bytes = r.bytes(h, "memory_bytes");
  // Optional in every version: profiles measured before it lack it.
  if (h.contains("lean_adamw_params_per_s")) {
    const auto& lean = r.object(h, "lean_adamw_params_per_s");
    for (const auto f : kLeanStateFormats)
      if (lean.contains(state_format_name(f)))
        p.host.lean_adamw_params_per_s[static_cast<int>(f)] = r.positive(lean, state_format_name(f));
  }
  p.host.disk_read_bytes_per_s = r.number(h, "disk_read_bytes_per_s");
  p.host.disk_write_bytes_per_s = r.number(h, "disk_write_bytes_per_s");
  if (version >= 3) {
    const auto& m = r.object(h, "memory_sharing");
    HostMemorySharing& s = p.host.memory_sharing;
    s.cpu_beside_copy = r.fraction(m, "cpu_adamw_beside_copy");
    s.cpu_beside_duplex = r.fraction(m, "cpu_adamw_beside_duplex");
    s.copy_beside_cpu = r.fraction(m, "copy_beside_cpu_adamw");
    s.duplex_beside_cpu = r.fraction(m, "duplex_beside_cpu_adamw");
    p.host.memory_sharing_measured = true;
  }
  if (j.contains("collective")) {  // measured on machines of several GPUs only
    const auto& c = r.object(j, "collective");
    p.collective.bus_bytes_per_s = r.positive(c, "bus_bytes_per_s");
    p.collective.latency_s = r.number(c, "latency_s");
    p.collective.devices = static_cast<int>(r.whole(c, "devices", 1, kMaxInt));
  }
  return p;
}

void save_profile(const std::filesystem::path& path, const MachineProfile& profile) {
  write_file_atomic(path, profile_to_json(profile).dump(2) + "\n");
}

MachineProfile load_profile(const std::filesystem::path& path) {
  std::ifstream in(path);
  FERRY_CHECK(in.good(), "profile",
              "cannot read {}; give an existing profile file, or leave `profile` unset to "
              "measure this machine",
              path.string());
  std::stringstream text;
  text << in.rdbuf();
  return profile_from_json(
      parse_json(text.str(), "profile", path.string(), "measure the profile again (ferry profile)"),
      path.string());
}

}  // namespace ferry
