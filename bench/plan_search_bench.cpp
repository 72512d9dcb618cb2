// How long the plan search takes (planner/search.h: under a second for an 8B shape), and what it
// chooses, for the shapes and budgets the GPU check uses: Llama-3.2-1B, -3B, Llama-3.1-8B at 12,
// 24 and 48 GiB, seq_len 8192 x 8 sequences, with the nominal rates of the lent H200 machine (or a
// measured profile: --profile FILE, for one shape). Each search is timed as the median of 5 runs,
// once over the default space and once with every axis on (micro-batch auto, per-unit GPU
// optimizer, convert-on-upload, no clipping: both update schedules).
//
//   build-*/bench/plan_search_bench [--profile FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/unit_layout.h"
#include "planner/nominal_profile.h"
#include "planner/search.h"
#include "train/model_init.h"

namespace {

using namespace ferry;

struct Timed {
  SearchResult result;
  double seconds = 0;
};

Timed timed_search(const ModelConfig& config, const ModelLayout& layout, const MachineProfile& profile,
                   const PlanRequest& request) {
  std::vector<double> times;
  Timed t;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    t.result = search_plans(config, layout, profile, request);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  t.seconds = times[times.size() / 2];
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  std::string profile_path;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--profile") == 0) profile_path = argv[i + 1];
  constexpr int64_t kSeq = 8192, kGlobal = 8;
  const char* presets[] = {"llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b"};
  std::printf("%-14s %6s  %-9s %8s %9s %11s  %s\n", "shape", "budget", "space", "plans", "search",
              "step (pred)", "chosen plan");
  for (const char* preset : presets) {
    const ModelConfig config = preset_config("llama", preset);
    const ModelLayout layout = build_model_layout(config);
    MachineProfile profile = nominal_profile(config, kSeq, DType::BF16);
    if (!profile_path.empty()) {
      profile = load_profile(profile_path);
      if (profile.shape_key != model_shape_key(config, profile.seq_len, profile.weight_dtype)) continue;
    }
    for (size_t gib : {12, 24, 48}) {
      for (bool everything : {false, true}) {
        PlanRequest r;
        r.seq_len = kSeq;
        r.global_batch = kGlobal;
        r.micro_batch = everything ? std::nullopt : std::optional<int64_t>(1);
        r.device_budget = gib << 30;
        r.host_budget = size_t{400} << 30;
        r.allow_optimizer_on_gpu = true;
        r.clipping = !everything;
        r.space.per_unit_gpu_optimizer = everything;
        r.space.convert_on_upload = everything;
        try {
          const Timed t = timed_search(config, layout, profile, r);
          std::printf("%-14s %4zuGiB  %-9s %8zu %7.1fms %9.3f s  %s\n", preset, gib,
                      everything ? "all axes" : "default", t.result.simulated, t.seconds * 1e3,
                      t.result.best.prediction.step_seconds, t.result.best.plan.describe().c_str());
        } catch (const Error& e) {
          std::printf("%-14s %4zuGiB  %-9s  %s\n", preset, gib, everything ? "all axes" : "default",
                      e.what());
        }
      }
    }
  }
  return 0;
}
