#include "train/model_init.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/normal_fill.h"
#include "core/thread_pool.h"
#include "io/atomic_file.h"
#include "model/unit_layout.h"
#include "train/output_dir.h"

namespace ferry {

namespace {

struct Shape {
  int64_t vocab, hidden, inter, layers, heads, kv_heads, head_dim;  // head_dim 0: hidden / heads
  int64_t max_pos;
  double theta, eps;
  bool tied;
};

struct PresetEntry {
  const char* arch;
  const char* name;
  const char* description;
  Shape shape;
  RopeScaling::Type scaling;
  double scaling_factor;
  DType dtype;
};

// Real shapes as published in each model's config.json.
const PresetEntry kPresets[] = {
    {"llama",
     "tiny",
     "2 layers, hidden 64, byte vocabulary (tests, demo)",
     {320, 64, 160, 2, 4, 2, 0, 2048, 10000.0, 1e-5, false},
     RopeScaling::Type::None,
     1.0,
     DType::F32},
    {"llama",
     "small",
     "4 layers, hidden 256",
     {2048, 256, 688, 4, 8, 4, 0, 4096, 500000.0, 1e-5, false},
     RopeScaling::Type::Llama3,
     8.0,
     DType::BF16},
    {"llama",
     "llama-3.2-1b",
     "Llama-3.2-1B shape",
     {128256, 2048, 8192, 16, 32, 8, 0, 131072, 500000.0, 1e-5, true},
     RopeScaling::Type::Llama3,
     32.0,
     DType::BF16},
    {"llama",
     "llama-3.2-3b",
     "Llama-3.2-3B shape",
     {128256, 3072, 8192, 28, 24, 8, 0, 131072, 500000.0, 1e-5, true},
     RopeScaling::Type::Llama3,
     32.0,
     DType::BF16},
    {"llama",
     "llama-3.1-8b",
     "Llama-3.1-8B shape",
     {128256, 4096, 14336, 32, 32, 8, 0, 131072, 500000.0, 1e-5, false},
     RopeScaling::Type::Llama3,
     8.0,
     DType::BF16},
    {"llama",
     "llama-3.3-70b",
     "Llama-3.3-70B shape",
     {128256, 8192, 28672, 80, 64, 8, 0, 131072, 500000.0, 1e-5, false},
     RopeScaling::Type::Llama3,
     8.0,
     DType::BF16},
    {"mistral",
     "tiny",
     "2 layers, hidden 64, byte vocabulary",
     {320, 64, 160, 2, 4, 2, 0, 2048, 10000.0, 1e-5, false},
     RopeScaling::Type::None,
     1.0,
     DType::F32},
    {"mistral",
     "mistral-7b",
     "Mistral-7B-v0.3 shape",
     {32768, 4096, 14336, 32, 32, 8, 0, 32768, 1000000.0, 1e-5, false},
     RopeScaling::Type::None,
     1.0,
     DType::BF16},
    {"mistral",
     "mistral-nemo-12b",
     "Mistral-Nemo-Base-2407 shape (12B, head_dim 128)",
     {131072, 5120, 14336, 40, 32, 8, 128, 1024000, 1000000.0, 1e-5, false},
     RopeScaling::Type::None,
     1.0,
     DType::BF16},
    {"mistral",
     "mistral-small-24b",
     "Mistral-Small-24B-Base-2501 shape",
     {131072, 5120, 32768, 40, 32, 8, 128, 32768, 100000000.0, 1e-5, false},
     RopeScaling::Type::None,
     1.0,
     DType::BF16},
    {"qwen2",
     "tiny",
     "2 layers, hidden 64, q/k/v bias",
     {320, 64, 160, 2, 4, 2, 0, 2048, 1000000.0, 1e-6, false},
     RopeScaling::Type::None,
     1.0,
     DType::F32},
    {"qwen2",
     "qwen2.5-7b",
     "Qwen2.5-7B shape",
     {152064, 3584, 18944, 28, 28, 4, 0, 32768, 1000000.0, 1e-6, false},
     RopeScaling::Type::None,
     1.0,
     DType::BF16},
    {"qwen2",
     "qwen2.5-14b",
     "Qwen2.5-14B shape",
     {152064, 5120, 13824, 48, 40, 8, 0, 131072, 1000000.0, 1e-5, false},
     RopeScaling::Type::None,
     1.0,
     DType::BF16},
    {"qwen3",
     "tiny",
     "2 layers, hidden 64, head_dim 32, q/k norm",
     {320, 64, 160, 2, 4, 2, 32, 2048, 1000000.0, 1e-6, false},
     RopeScaling::Type::None,
     1.0,
     DType::F32},
    {"qwen3",
     "qwen3-8b",
     "Qwen3-8B shape",
     {151936, 4096, 12288, 36, 32, 8, 128, 40960, 1000000.0, 1e-6, false},
     RopeScaling::Type::None,
     1.0,
     DType::BF16},
    {"qwen3",
     "qwen3-14b",
     "Qwen3-14B shape",
     {151936, 5120, 17408, 40, 40, 8, 128, 40960, 1000000.0, 1e-6, false},
     RopeScaling::Type::None,
     1.0,
     DType::BF16},
    {"qwen3",
     "qwen3-32b",
     "Qwen3-32B shape",
     {151936, 5120, 25600, 64, 64, 8, 128, 40960, 1000000.0, 1e-6, false},
     RopeScaling::Type::None,
     1.0,
     DType::BF16},
};

Architecture arch_of(const std::string& arch) {
  if (arch == "llama") return Architecture::Llama;
  if (arch == "mistral") return Architecture::Mistral;
  if (arch == "qwen2") return Architecture::Qwen2;
  if (arch == "qwen3") return Architecture::Qwen3;
  fail("init", "unknown architecture '{}'; choose llama, mistral, qwen2 or qwen3", arch);
}

}  // namespace

std::vector<ModelPreset> model_presets(const std::string& arch) {
  arch_of(arch);
  std::vector<ModelPreset> out;
  for (const auto& p : kPresets)
    if (arch == p.arch) out.push_back({p.name, p.description});
  return out;
}

ModelConfig preset_config(const std::string& arch, const std::string& preset) {
  const Architecture a = arch_of(arch);
  const PresetEntry* entry = nullptr;
  for (const auto& p : kPresets)
    if (arch == p.arch && preset == p.name) entry = &p;
  if (entry == nullptr) {
    std::string names;
    for (const auto& p : model_presets(arch)) names += (names.empty() ? "" : ", ") + p.name;
    fail("init", "no preset '{}' for {}; the presets are: {}", preset, arch, names);
  }
  static const char* const kClassNames[] = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                                            "Qwen3ForCausalLM"};
  const Shape& s = entry->shape;
  ModelConfig c;
  c.arch = a;
  c.architecture_name = kClassNames[static_cast<int>(a)];
  c.model_type = arch;
  c.vocab_size = s.vocab;
  c.hidden_size = s.hidden;
  c.intermediate_size = s.inter;
  c.num_layers = s.layers;
  c.num_heads = s.heads;
  c.num_kv_heads = s.kv_heads;
  c.head_dim = s.head_dim > 0 ? s.head_dim : s.hidden / s.heads;
  c.max_position_embeddings = s.max_pos;
  c.rope_theta = s.theta;
  c.rms_norm_eps = s.eps;
  c.tie_word_embeddings = s.tied;
  c.qkv_bias = a == Architecture::Qwen2;
  c.qk_norm = a == Architecture::Qwen3;
  c.dtype = entry->dtype;
  if (entry->scaling == RopeScaling::Type::Llama3) {
    c.rope_scaling.type = RopeScaling::Type::Llama3;
    c.rope_scaling.factor = entry->scaling_factor;
    c.rope_scaling.low_freq_factor = 1.0;
    c.rope_scaling.high_freq_factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 8192;
  }
  // Round-trip through config.json so that `raw` and every derived field are what a reader sees.
  return parse_model_config(model_config_to_json(c), "preset " + preset);
}

namespace {

// What a parameter starts as: normal values (weights), ones (norms) or zeros (biases, and the
// alignment between parameters).
enum class Fill { Normal, Ones, Zeros };

// A piece of one parameter's fill: where it goes, what the values are, and for normal values the
// parameter's stream (core/normal_fill.h) and the piece's first index in it.
struct InitJob {
  float* dst;
  int64_t count;
  Fill fill;
  uint64_t key;
  int64_t first;
};

// A fill is cut into pieces of this many values, so that one unit's few large parameters (an 8B's
// embedding is one of 525M values), or one piece a writer asks for, fill on every thread.
constexpr int64_t kInitPiece = int64_t{1} << 18;

// The jobs that write values [lo, hi) of unit u (of its parameters, and the zeros of their
// alignment) into dst[0, hi - lo). A parameter's normal values are the stream keyed by (seed, its
// index in the model), which gives the i-th value from i alone, so filling in pieces, in parallel,
// one unit or one range at a time gives the same values as filling in order.
void add_unit_jobs(const ModelLayout& layout, uint64_t seed, size_t u, int64_t lo, int64_t hi, float* dst,
                   std::vector<InitJob>& jobs) {
  // Values [a, b) of the unit, within [lo, hi): `fill`; normal ones are values a - origin on of
  // `key`'s stream (origin: the parameter's offset, so that its first value is the stream's first).
  const auto add = [&](int64_t a, int64_t b, Fill fill, uint64_t key, int64_t origin) {
    for (int64_t at = std::max(a, lo); at < std::min(b, hi); at += kInitPiece)
      jobs.push_back({dst + (at - lo), std::min({kInitPiece, b - at, hi - at}), fill, key, at - origin});
  };
  uint64_t index = 0;
  for (size_t e = 0; e < u; ++e) index += layout.units[e].params.size();
  const UnitLayout& unit = layout.units[u];
  for (size_t k = 0; k < unit.params.size(); ++k) {
    const ParamSlot& p = unit.params[k];
    const bool is_bias = p.name.size() >= 4 && p.name.compare(p.name.size() - 4, 4, "bias") == 0;
    const bool is_norm = p.name.find("norm") != std::string::npos;
    const uint64_t param_seed = seed * 0x9E3779B97F4A7C15ull + (++index);
    add(p.offset, p.offset + p.numel, is_bias ? Fill::Zeros : (is_norm ? Fill::Ones : Fill::Normal),
        param_seed, p.offset);
    const int64_t next = k + 1 < unit.params.size() ? unit.params[k + 1].offset : unit.numel;
    add(p.offset + p.numel, next, Fill::Zeros, 0, 0);
  }
}

// The jobs in parallel, one piece per task.
void run_jobs(const ModelConfig& config, const std::vector<InitJob>& jobs) {
  const float std_dev = static_cast<float>(config.initializer_range);
  ThreadPool::global().parallel_for(jobs.size(), [&](size_t begin, size_t end) {
    for (size_t j = begin; j < end; ++j) {
      const InitJob& job = jobs[j];
      if (job.fill == Fill::Normal)
        fill_normal(job.dst, job.count, job.key, std_dev, job.first);
      else
        std::fill(job.dst, job.dst + job.count, job.fill == Fill::Ones ? 1.0f : 0.0f);
    }
  });
}

}  // namespace

void init_random_weights(const ModelConfig& config, uint64_t seed, std::vector<std::vector<float>>& units) {
  const ModelLayout layout = build_model_layout(config);
  units.resize(layout.units.size());
  std::vector<InitJob> jobs;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    units[u].resize(static_cast<size_t>(layout.units[u].numel));
    add_unit_jobs(layout, seed, u, 0, layout.units[u].numel, units[u].data(), jobs);
  }
  run_jobs(config, jobs);
}

void init_random_unit(const ModelConfig& config, const ModelLayout& layout, uint64_t seed, size_t unit,
                      std::span<float> out) {
  FERRY_ASSERT(out.size() == static_cast<size_t>(layout.units[unit].numel));
  std::vector<InitJob> jobs;  // they write every value
  add_unit_jobs(layout, seed, unit, 0, layout.units[unit].numel, out.data(), jobs);
  run_jobs(config, jobs);
}

namespace {

void write_generation_config(const ModelConfig& config, const std::filesystem::path& out_dir) {
  nlohmann::json generation = {{"_from_model_config", true}, {"transformers_version", "4.46.0"}};
  if (config.raw.contains("bos_token_id")) generation["bos_token_id"] = config.raw["bos_token_id"];
  if (config.raw.contains("eos_token_id")) generation["eos_token_id"] = config.raw["eos_token_id"];
  write_file_atomic(out_dir / "generation_config.json", generation.dump(2) + "\n");
}

}  // namespace

void write_random_model(const ModelConfig& config, uint64_t seed, const std::filesystem::path& out_dir) {
  // Made a piece at a time as the writer converts and writes it: the memory of one piece, not of
  // the model in fp32 (an 8B's would be 32 GB).
  const ModelLayout layout = build_model_layout(config);
  std::vector<float> piece;
  std::vector<InitJob> jobs;
  const UnitFetch fetch = [&](size_t unit, size_t offset, size_t count) -> const float* {
    piece.resize(count);
    jobs.clear();
    add_unit_jobs(layout, seed, unit, static_cast<int64_t>(offset), static_cast<int64_t>(offset + count),
                  piece.data(), jobs);
    run_jobs(config, jobs);
    return piece.data();
  };
  write_hf_model_dir(out_dir, {}, config, layout, std::vector<const float*>(layout.units.size(), nullptr),
                     config.dtype, size_t{5} << 30, fetch);
  write_generation_config(config, out_dir);
}

void write_model_config_only(const ModelConfig& config, const std::filesystem::path& out_dir) {
  std::filesystem::create_directories(out_dir);
  write_file_atomic(out_dir / "config.json", config_json_text(config, config.dtype, {}));
  write_generation_config(config, out_dir);
}

}  // namespace ferry
