// The disk tier's start (engine/disk_state_tier.h): from the loaded weights to the state in the
// tier's file and every staging buffer written, as `ferry train` does before step 1, on this
// machine's disk, for a model whose decoder layers all keep their state on disk:
//   written: UnitUpdater::assign_masters per unit (DiskStateTier::page_new / store_new: each
//            unit's first state filled in a slot, its staging converted from it, written behind
//            while the next unit is filled; nothing read), then refresh_staging (skips them).
//   read back: the path before page_new, through the same public calls: per unit the region read
//            (page_in), filled, written and waited for (page_out); then refresh_staging reads each
//            unit again to convert its staging weights.
// Both print seconds (until every write has completed) and GB/s of state; the disk's own rate is what `ferry
// plan` measures (planner/disk_rate.h).
//
//   train_disk_tier_start_bench --dir=PATH [--hidden=2048] [--layers=8] [--slots=2] [--format=fp32]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/log.h"
#include "device/device.h"
#include "engine/unit_updater.h"
#include "optim/lean_adamw.h"
#include "optim/state_format.h"
#include "planner/disk_tier_layout.h"
#include "train/model_init.h"

namespace ferry {
namespace {

std::string arg(int argc, char** argv, const char* name, const std::string& fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  return fallback;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int run(int argc, char** argv) {
  const std::string dir = arg(argc, argv, "dir", "");
  if (dir.empty()) {
    std::fprintf(stderr,
                 "usage: train_disk_tier_start_bench --dir=PATH (a directory on the disk to measure)\n");
    return 2;
  }
  const int64_t hidden = std::stoll(arg(argc, argv, "hidden", "2048"));
  const int64_t layers = std::stoll(arg(argc, argv, "layers", "8"));
  nlohmann::json json = preset_config("llama", "tiny").raw;
  json["hidden_size"] = hidden;
  json["intermediate_size"] = 4 * hidden;
  json["num_hidden_layers"] = layers;
  json["num_attention_heads"] = hidden / 64;
  json["num_key_value_heads"] = hidden / 64;
  json["head_dim"] = 64;
  const ModelConfig config = parse_model_config(json, "bench");
  const ModelLayout layout = build_model_layout(config);

  Plan plan;
  plan.micro_batch = 1;
  plan.gpu_slots = 2;
  plan.weight_dtype = DType::BF16;
  plan.grad_dtype = DType::BF16;
  plan.units.assign(layout.units.size(), UnitPlacement::Streamed);
  plan.activations.assign(static_cast<size_t>(layers), ActivationPlacement::KeepOnGpu);
  plan.state_on_disk.assign(layout.units.size(), false);
  for (size_t u = 0; u < layout.units.size(); ++u)
    plan.state_on_disk[u] = layout.units[u].kind == UnitKind::Layer;
  plan.disk_slots = std::stoll(arg(argc, argv, "slots", "2"));
  plan.disk_dir = dir;
  if (!parse_state_format(arg(argc, argv, "format", "fp32"), &plan.optimizer_state)) {
    std::fprintf(stderr, "--format: fp32, fp32_q8, bf16c8_q8 or bf16sr_q8\n");
    return 2;
  }

  std::vector<std::vector<float>> init;
  init_random_weights(config, 9, init);
  auto device = make_sim_device({});
  for (const bool fresh : {false, true}) {
    UnitUpdater host(*device, layout, plan, false, 0, nullptr);
    const size_t file_bytes = host.disk()->layout().file_bytes;
    const auto start = std::chrono::steady_clock::now();
    for (size_t u = 0; u < layout.units.size(); ++u) {
      if (fresh || !host.on_disk(u)) {
        host.assign_masters(u, init[u]);
        continue;
      }
      const std::vector<std::span<std::byte>> arrays = host.disk_state(u);
      for (const std::span<std::byte>& a : arrays) std::memset(a.data(), 0, a.size());
      if (is_exact(plan.optimizer_state)) {
        std::memcpy(arrays[0].data(), init[u].data(), init[u].size() * sizeof(float));
      } else {
        std::vector<void*> bases;
        for (const auto& a : arrays) bases.push_back(a.data());
        lean_write_masters(lean_unit_view(plan.optimizer_state, init[u].size(), bases, 1), init[u].data(), 0,
                           init[u].size());
      }
      host.disk_state_written(u);
    }
    const double loaded = seconds_since(start);
    host.refresh_staging(0);
    const double ready = seconds_since(start);
    host.wait_disk_writes();
    const double written = seconds_since(start);
    std::printf(
        "%-9s %s, %.2f GB: loaded %.2f s, staging ready %.2f s, on disk %.2f s (%.2f GB/s), %zu reads\n",
        fresh ? "written" : "read back", state_format_name(plan.optimizer_state), file_bytes / 1e9, loaded,
        ready, written, file_bytes / 1e9 / written, host.disk()->region_reads());
  }
  return 0;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  return ferry::run(argc, argv);
}
