#include "train/profile_cache.h"

#include <cctype>
#include <cstdlib>
#include <optional>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "train/gemm_choice_cache.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "profile";

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// The cached profile if it can be used on this device; why not otherwise (logged by the caller).
std::optional<MachineProfile> read_cached(const std::filesystem::path& path, const Device& device,
                                          const std::string& shape_key, const std::string& kernels,
                                          std::string* why_not) {
  MachineProfile p;
  try {
    p = load_profile(path);
  } catch (const std::exception& e) {  // ferry::Error from validation, or a JSON type error
    *why_not = fmt::format("the cached profile cannot be used ({})", e.what());
    return std::nullopt;
  }
  if (p.method != kProfilerMethod) {
    *why_not =
        fmt::format("{} was measured by {} (method {}); this ferry measures with method {}", path.string(),
                    p.method == 0 ? "an older ferry" : "another ferry", p.method, kProfilerMethod);
    return std::nullopt;
  }
  if (p.device_name != device.name() || p.shape_key != shape_key) {
    *why_not = fmt::format("{} holds the profile of {} for {}, not of {} for {}", path.string(),
                           p.device_name, p.shape_key, device.name(), shape_key);
    return std::nullopt;
  }
  if (p.kernels != kernels) {
    *why_not = fmt::format("{} was measured with the kernels \"{}\"; this run has \"{}\"", path.string(),
                           p.kernels.empty() ? "(not recorded)" : p.kernels, kernels);
    return std::nullopt;
  }
  const int threads = static_cast<int>(ThreadPool::global().size());
  if (p.host.threads != threads) {
    *why_not = fmt::format("{} measured the CPU AdamW with {} threads; this run has {}", path.string(),
                           p.host.threads, threads);
    return std::nullopt;
  }
  // The memory budget is a setting of this run (gpu_memory), not a measurement: the current one holds.
  p.device_memory_bytes = static_cast<double>(device.memory().capacity);
  p.device_uncapped_memory_bytes = static_cast<double>(device.uncapped_memory());
  return p;
}

void save_to_cache(const std::filesystem::path& path, const MachineProfile& profile) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  try {
    FERRY_CHECK(!ec, kWhere, "cannot create {}: {}", path.parent_path().string(), ec.message());
    save_profile(path, profile);
    log_info("profile: saved {}", path.string());
  } catch (const Error& e) {
    log_warn("profile: not cached, so the next run measures again: {}", e.what());
  }
}

}  // namespace

std::filesystem::path default_cache_dir(const std::string& what) {
  if (const char* dir = env("FERRY_CACHE_DIR")) return std::filesystem::path(dir) / what;
  if (const char* dir = env("XDG_CACHE_HOME")) return std::filesystem::path(dir) / "ferry" / what;
  if (const char* home = env("HOME")) return std::filesystem::path(home) / ".cache" / "ferry" / what;
  return {};
}

std::string cache_file_name_part(const std::string& name) {
  std::string out;
  for (const char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '.')
      out += static_cast<char>(std::tolower(c));
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "device" : out;
}

std::filesystem::path default_profile_cache_dir() {
  return default_cache_dir("profiles");
}

std::filesystem::path profile_cache_path(const std::filesystem::path& dir, const std::string& device_name,
                                         const std::string& shape_key) {
  return dir / (cache_file_name_part(device_name) + "-" + shape_key + ".json");
}

void check_profile_matches_model(const MachineProfile& profile, const ModelConfig& model, int64_t seq_len,
                                 const std::string& source) {
  const std::string model_key = model_shape_key(model, profile.seq_len, profile.weight_dtype);
  FERRY_CHECK(
      profile.shape_key == model_key, kWhere,
      "{} was measured for the model shape {}, but this model is {}: its compute times belong to another "
      "network. Measure this model on that machine (ferry profile CONFIG.yaml --out FILE), or remove "
      "`profile` to plan with this machine's own profile",
      source, profile.shape_key, model_key);
  if (profile.seq_len != seq_len)
    log_warn(
        "profile: {} was measured at seq_len {}, this run uses {}; attention's cost per token grows with the "
        "sequence length, so the predicted step time is approximate (measure with seq_len={} for an exact "
        "one)",
        source, profile.seq_len, seq_len, seq_len);
}

MachineProfile load_profile_file(const TrainConfig& config, const ModelConfig& model) {
  MachineProfile p = load_profile(config.profile);
  check_profile_matches_model(p, model, config.seq_len, config.profile.string());
  if (p.method < kProfilerMethod)
    log_warn(
        "profile: {} was measured by an older ferry (method {}; this one measures with method {}), which "
        "timed the step's work less like a training step does; its predictions may be off by several "
        "percent. Measure it again on that machine (ferry profile CONFIG.yaml --out FILE)",
        config.profile.string(), p.method, kProfilerMethod);
  return p;
}

AttentionChoice attention_choice(const MachineProfile& profile, const Device& device, const Ops& ops) {
  if (!ops.has_library_attention() || profile.device_name != device.name() ||
      profile.kernels != ops.kernels())
    return {};
  return {profile.compute.own_attention_forward, profile.compute.own_attention_backward};
}

MachineProfile obtain_profile(const TrainConfig& config, const ModelConfig& model, Device& device, Ops& ops,
                              const ObtainProfileOptions& options, ProfileOrigin* origin) {
  if (!config.profile.empty()) {
    MachineProfile p = load_profile_file(config, model);
    log_info("profile: planning for {}{} with {}", p.device_name,
             p.kernels.empty() ? "" : " (" + p.kernels + ")", config.profile.string());
    if (origin != nullptr) *origin = ProfileOrigin::File;
    return p;
  }

  const std::string shape_key = model_shape_key(model, config.seq_len, engine_weight_dtype(device));
  std::filesystem::path path;
  if (!options.cache_dir.empty()) {
    path = profile_cache_path(options.cache_dir, device.name(), shape_key);
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) {
      std::string why_not;
      if (auto cached = read_cached(path, device, shape_key, ops.kernels(), &why_not)) {
        log_info("profile: {}", path.string());
        if (origin != nullptr) *origin = ProfileOrigin::Cache;
        return *cached;
      }
      log_warn("profile: {}; measuring again", why_not);
    } else {
      log_info("profile: none cached for {} and {}; measuring it once (seconds)", device.name(), shape_key);
    }
  } else {
    log_warn("profile: no cache directory (set FERRY_CACHE_DIR or HOME); measuring for this run only");
  }

  ProfileOptions measure = options.measure ? *options.measure : default_profile_options(device);
  if (measure.measure_disk && measure.disk_dir.empty()) measure.disk_dir = options.cache_dir;
  if (measure.disk_dir.empty()) measure.measure_disk = false;
  // The GEMM algorithms this machine's runs chose before are the ones timed, and any chosen now are
  // kept for the run's steps and the runs after.
  GemmChoiceCache gemm_choices;
  gemm_choices.lend(ops);
  MachineProfile p = measure_profile(device, ops, model, config.seq_len, measure);
  gemm_choices.keep(ops);
  if (!path.empty()) save_to_cache(path, p);
  if (origin != nullptr) *origin = ProfileOrigin::Measured;
  return p;
}

}  // namespace ferry
