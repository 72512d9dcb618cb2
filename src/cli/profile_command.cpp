// `ferry profile CONFIG.yaml [key=value ...]`: measures this machine's profile for the config's model
// shape and seq_len (ignoring the cache), prints it, and saves it to the cache and to --out.
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "device/memory_ledger.h"
#include "model/unit_layout.h"
#include "ops/device_ops.h"
#include "profiler/machine_profiler.h"
#include "train/device_choice.h"
#include "train/model_init.h"
#include "train/model_source.h"
#include "train/profile_cache.h"
#include "train/train_config.h"

namespace ferry::cli {

namespace {

constexpr const char* kWhere = "profile";

ModelConfig profiled_model(const TrainConfig& config, const std::string& preset) {
  if (!preset.empty()) {
    const size_t slash = preset.find('/');
    FERRY_CHECK(slash != std::string::npos, kWhere,
                "--preset must be ARCH/NAME, e.g. llama/llama-3.1-8b; got '{}'", preset);
    return preset_config(preset.substr(0, slash), preset.substr(slash + 1));
  }
  FERRY_CHECK(!config.model.empty(), kWhere,
              "no model given; set `model:` to a Hugging Face model directory (only its config.json is "
              "read), or give "
              "--preset ARCH/NAME");
  return model_source_config(config.model, config.seed);
}

std::string rate(double bytes_per_s) {
  return fmt::format("{:.1f} GB/s", bytes_per_s / 1e9);
}
std::string params_rate(double per_s) {
  return per_s > 0 ? fmt::format("{:.2f} G params/s", per_s / 1e9) : "-";
}

// "0.120 ms + 1.234 us/token  (at 2048 tokens: 2.647 ms)", and the model FLOP rate when given.
std::string linear(const LinearTime& t, int64_t tokens, double flops_per_token = 0.0) {
  std::string s = fmt::format("{:8.3f} ms + {:8.4f} us/token   at {} tokens: {:8.3f} ms", t.fixed_s * 1e3,
                              t.per_token_s * 1e6, tokens, t.at(tokens) * 1e3);
  if (flops_per_token > 0)
    s += fmt::format("  ({:.3g} TFLOP/s)",
                     flops_per_token * static_cast<double>(tokens) / t.at(tokens) / 1e12);
  return s;
}

void print_profile(const MachineProfile& p, const ModelConfig& model) {
  // FLOPs per token of one layer's forward: 2 per weight, plus causal attention's QK^T and PV
  // (2 * 2 * seq_len * q_dim, halved by the causal mask). The backward with its recompute: 3x.
  const ModelLayout layout = build_model_layout(model);
  const double layer_flops = 2.0 * static_cast<double>(layout.units[layout.layer_unit(0)].numel) +
                             2.0 * static_cast<double>(p.seq_len * model.q_dim());
  const double head_flops = 6.0 * static_cast<double>(model.vocab_size * model.hidden_size);
  const int64_t T = p.seq_len;
  std::printf("machine profile: %s, %s of device memory\n", p.device_name.c_str(),
              format_bytes(static_cast<size_t>(p.device_memory_bytes)).c_str());
  std::printf("model shape:     %s\n", p.shape_key.c_str());
  std::printf("measured by:     %s, method %d\n\n",
              p.kernels.empty() ? "(kernels not recorded)" : p.kernels.c_str(), p.method);
  std::printf("compute (one micro-chunk: fixed + per token)\n");
  std::printf("  layer forward       %s\n", linear(p.compute.layer_forward, T, layer_flops).c_str());
  std::printf("  layer backward      %s\n", linear(p.compute.layer_backward, T, 3 * layer_flops).c_str());
  std::printf("  head fwd+bwd        %s\n", linear(p.compute.head, T, head_flops).c_str());
  std::printf("  head, fp32 grads    %s\n", linear(p.compute.head_f32_grads, T, head_flops).c_str());
  std::printf("  embedding forward   %s\n", linear(p.compute.embedding_forward, T).c_str());
  std::printf("  embedding backward  %s\n", linear(p.compute.embedding_backward, T).c_str());
  std::printf("  device AdamW        %s\n", params_rate(p.compute.gpu_adamw_params_per_s).c_str());
  std::printf("  gradient norm       %s\n\n", params_rate(p.compute.grad_norm_params_per_s).c_str());
  std::printf("transfer (pinned)\n");
  std::printf("  h2d alone           %s\n", rate(p.transfer.h2d_bytes_per_s).c_str());
  std::printf("  d2h alone           %s\n", rate(p.transfer.d2h_bytes_per_s).c_str());
  std::printf("  both at once        h2d %s, d2h %s\n", rate(p.transfer.duplex_h2d_bytes_per_s).c_str(),
              rate(p.transfer.duplex_d2h_bytes_per_s).c_str());
  std::printf("  latency per copy    %.1f us\n\n", p.transfer.latency_s * 1e6);
  std::printf("host\n");
  std::printf("  CPU AdamW           %s on %d threads\n", params_rate(p.host.cpu_adamw_params_per_s).c_str(),
              p.host.threads);
  if (p.host.memory_sharing_measured) {
    const HostMemorySharing& m = p.host.memory_sharing;
    std::printf(
        "  beside copies       CPU AdamW at %.2f of its rate beside one direction, %.2f beside both; copies "
        "at %.2f alone, %.2f in duplex beside it (host DRAM shared)\n",
        m.cpu_beside_copy, m.cpu_beside_duplex, m.copy_beside_cpu, m.duplex_beside_cpu);
  }
  std::printf("  RAM                 %s\n", format_bytes(static_cast<size_t>(p.host.memory_bytes)).c_str());
  if (p.host.disk_write_bytes_per_s > 0)
    std::printf("  disk                write %s, read %s\n", rate(p.host.disk_write_bytes_per_s).c_str(),
                rate(p.host.disk_read_bytes_per_s).c_str());
  else
    std::printf("  disk                not measured\n");
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "profile",
      "Measure this machine for a model shape (compute, copies, CPU AdamW, disk); print and save it");
  struct Args {
    std::string config;
    std::vector<std::string> overrides;
    std::string out, preset, disk_dir;
    bool no_disk = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("config", a->config, "YAML config: model, seq_len, device, gpu_memory, threads are read")
      ->required();
  cmd->add_option("overrides", a->overrides, "key=value settings that override the file");
  cmd->add_option("--out", a->out, "also save the profile here (e.g. bench/profiles/h200-SHAPE.json)");
  cmd->add_option("--preset", a->preset,
                  "profile a preset's shape instead of `model:` (ARCH/NAME, see ferry init --list)");
  cmd->add_option("--disk-dir", a->disk_dir, "directory whose disk is measured (default: the profile cache)");
  cmd->add_flag("--no-disk", a->no_disk, "skip the disk measurement");
  cmd->callback([a] {
    const TrainConfig config = load_train_config(a->config, a->overrides);
    if (config.threads > 0) ThreadPool::set_global_threads(static_cast<size_t>(config.threads));
    const DeviceChoice choice = choose_device(config, DeviceUse::Profile);
    const ModelConfig model = profiled_model(config, a->preset);
    std::unique_ptr<Device> device = make_chosen_device(choice);
    std::unique_ptr<Ops> ops = make_device_ops(*device);

    const std::filesystem::path cache_dir = default_profile_cache_dir();
    ProfileOptions options = default_profile_options(*device);
    options.measure_disk = !a->no_disk;
    options.disk_dir = a->disk_dir.empty() ? cache_dir : std::filesystem::path(a->disk_dir);
    if (options.measure_disk && options.disk_dir.empty()) {
      log_warn(
          "profile: no directory for the disk measurement (set FERRY_CACHE_DIR or give --disk-dir); skipped");
      options.measure_disk = false;
    }
    const MachineProfile profile = measure_profile(*device, *ops, model, config.seq_len, options);
    print_profile(profile, model);
    // --out first: it is what was asked for; a cache that cannot be written only costs a later measurement.
    if (!a->out.empty()) {
      const std::filesystem::path out(a->out);
      if (out.has_parent_path()) std::filesystem::create_directories(out.parent_path());
      save_profile(out, profile);
      log_info("saved {}", out.string());
    }
    if (!cache_dir.empty()) {
      const auto path = profile_cache_path(cache_dir, profile.device_name, profile.shape_key);
      try {
        std::filesystem::create_directories(path.parent_path());
        save_profile(path, profile);
        log_info("saved {}", path.string());
      } catch (const std::exception& e) {
        log_warn("profile: not cached ({}); a training run on this machine will measure again", e.what());
      }
    }
  });
}

}  // namespace ferry::cli
