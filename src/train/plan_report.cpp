#include "train/plan_report.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/host_memory.h"
#include "device/device.h"
#include "device/memory_ledger.h"
#include "model/unit_layout.h"
#include "ops/device_ops.h"
#include "planner/boundary_groups.h"
#include "planner/collective_cost.h"
#include "planner/head_groups.h"
#include "planner/memory_model.h"
#include "planner/model_flops.h"
#include "planner/nominal_profile.h"
#include "planner/scaled_profile.h"
#include "train/device_choice.h"
#include "train/model_init.h"
#include "train/model_source.h"
#include "train/plan_selection.h"
#include "train/profile_cache.h"
#include "train/train_config.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "plan";

bool recomputes_any(const Plan& plan) {
  for (ActivationPlacement a : plan.activations)
    if (a == ActivationPlacement::Recompute) return true;
  return false;
}

// "0-7 offloaded to the host, 8-31 kept on the GPU": runs of equal values, by layer.
template <typename T, typename Name>
std::string runs(const std::vector<T>& values, Name name) {
  std::string out;
  for (size_t begin = 0; begin < values.size();) {
    size_t end = begin;
    while (end + 1 < values.size() && values[end + 1] == values[begin]) ++end;
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ",
                       begin == end ? fmt::format("{}", begin) : fmt::format("{}-{}", begin, end),
                       name(values[begin]));
    begin = end + 1;
  }
  return out;
}

const char* unit_words(UnitPlacement p) {
  switch (p) {
    case UnitPlacement::Streamed:
      return "streamed through the slots";
    case UnitPlacement::ResidentParams:
      return "resident";
    case UnitPlacement::ResidentWithOptimizer:
      return "resident with GPU AdamW";
    case UnitPlacement::ResidentWithStreamedOptimizer:
      return "resident with GPU AdamW over state streamed from the host";
  }
  return "?";
}

std::string share(size_t bytes, size_t budget) {
  return budget > 0 ? fmt::format("{:>10} of {:>10} ({:.0f}%)", format_bytes(bytes), format_bytes(budget),
                                  100.0 * static_cast<double>(bytes) / static_cast<double>(budget))
                    : fmt::format("{:>10}", format_bytes(bytes));
}

// How the updated weights reach the GPU, and, where the masters are uploaded, why: the search
// converts on upload only where the bf16 host shadow does not fit host_memory (unless forced).
void print_weight_upload(const ModelConfig& model, const ModelLayout& layout, const Candidate& c,
                         size_t host_budget) {
  const Plan& p = c.plan;
  if (p.weight_upload == WeightUpload::HostShadow) {
    std::printf("  weights uploaded from the bf16 copy the CPU AdamW writes into pinned memory\n");
    return;
  }
  const GradientLanding g = gradient_landing(layout, p);
  fmt::print(
      "  weights uploaded as the fp32 masters (pinned), converted to {} on the GPU; gradients land {}\n",
      dtype_name(p.weight_dtype),
      g.ring_buffers > 0 ? fmt::format("in a ring of {} layer-sized pinned buffers", g.ring_buffers)
                         : std::string("in a pinned buffer per unit"));
  Plan shadow = p;
  shadow.weight_upload = WeightUpload::HostShadow;
  const size_t shadow_host = host_bytes(model, layout, shadow, c.shape.chunk_tokens, c.shape.chunks).total();
  if (host_budget > 0 && shadow_host > host_budget)
    fmt::print("  (with the bf16 copy this plan would need {} of host memory, more than host_memory {})\n",
               format_bytes(shadow_host), format_bytes(host_budget));
}

// "0, 4, 8 offloaded to the host, 12-28 kept on the GPU": the kept boundaries of a plan that
// recomputes the others, in runs of equal placement.
std::string kept_boundary_runs(const std::vector<ActivationPlacement>& activations) {
  std::string out;
  std::vector<size_t> run;
  const auto flush = [&] {
    if (run.empty()) return;
    std::string layers;
    for (size_t b : run) layers += fmt::format("{}{}", layers.empty() ? "" : " ", b);
    out +=
        fmt::format("{}{} {}", out.empty() ? "" : "; ", layers,
                    boundary_on_host(activations[run.front()]) ? "offloaded to the host" : "kept on the GPU");
    run.clear();
  };
  for (size_t b = 0; b < activations.size(); ++b) {
    if (activations[b] == ActivationPlacement::Recompute) continue;
    if (!run.empty() && boundary_on_gpu(activations[run.front()]) != boundary_on_gpu(activations[b])) flush();
    run.push_back(b);
  }
  flush();
  return out;
}

// Why a plan recomputes boundaries: what keeping all of them (the recomputed ones offloaded like
// the kept ones, or kept on the GPU) would need against the budgets, and what the recompute costs.
void print_recompute_reason(const ModelConfig& model, const ModelLayout& layout, const Candidate& c,
                            const PlanRequest& request, const MachineProfile& profile) {
  const Plan& p = c.plan;
  const BoundaryGroups groups = boundary_groups(p.activations);
  int64_t recomputed = 0;
  for (bool r : groups.recomputed) recomputed += r;
  if (recomputed == 0) return;
  Plan all = p;
  for (ActivationPlacement& a : all.activations)
    if (a == ActivationPlacement::Recompute) a = ActivationPlacement::OffloadToHost;
  const HostBytes host = host_bytes(model, layout, all, c.shape.chunk_tokens, c.shape.chunks);
  const size_t host_total = host.total() + request.host_beside_engine +
                            (request.device_memory_on_host ? c.prediction.device.total() : 0);
  const size_t act =
      round_to_256(static_cast<size_t>(c.shape.tokens() * model.hidden_size) * dtype_size(p.weight_dtype));
  const double forward_s = static_cast<double>(c.shape.chunks) *
                           profile.compute.layer_forward.at(c.shape.chunk_tokens) *
                           static_cast<double>(recomputed);
  std::printf(
      "  why one boundary in %lld%s: each boundary is %s; keeping the %lld recomputed ones on the host would "
      "need %s of host memory (budget %s), on the GPU %s more; their recompute costs %lld layer forwards, "
      "~%.3g s of GPU compute per step (counted in the prediction)\n",
      static_cast<long long>(groups.recompute_buffers + 1), request.keep_every ? " (keep_every, forced)" : "",
      format_bytes(act).c_str(), static_cast<long long>(recomputed), format_bytes(host_total).c_str(),
      request.host_budget > 0 ? format_bytes(request.host_budget).c_str() : "unlimited",
      format_bytes(static_cast<size_t>(recomputed - groups.recompute_buffers) * act).c_str(),
      static_cast<long long>(recomputed), forward_s);
}

// Why a plan runs attention in groups of KV heads: what the layer scratch and the ops' workspace
// take with one group and with the plan's, what the plan would need of the GPU with one group,
// and what the backward's second pass over the q/k/v projections costs.
void print_head_groups_reason(const ModelConfig& model, const ModelLayout& layout, const Candidate& c,
                              const PlanRequest& request, const MachineProfile& profile) {
  const Plan& p = c.plan;
  if (p.head_groups <= 1) return;
  Plan one = p;
  one.head_groups = 1;
  const DeviceBytes grouped = device_bytes(model, layout, p, c.shape.chunk_tokens, c.shape.chunks);
  const DeviceBytes whole = device_bytes(model, layout, one, c.shape.chunk_tokens, c.shape.chunks);
  const double extra_s =
      head_groups_backward_extra_share(model, p.head_groups) * static_cast<double>(c.shape.chunks) *
      profile.compute.layer_forward.at(c.shape.chunk_tokens) * static_cast<double>(model.num_layers);
  std::printf(
      "  why %lld groups of KV heads%s: attention's q, k, v, their gradients and its workspace for %lld of "
      "%lld heads at a time: layer scratch and ops workspace %s instead of %s with all heads at once, "
      "which would need %s of GPU (budget %s); the backward computes %lld of %lld groups' q/k/v "
      "projections again, ~%.3g s of GPU compute per step (counted in the prediction)\n",
      static_cast<long long>(p.head_groups), request.head_groups ? " (head_groups, forced)" : "",
      static_cast<long long>(model.num_heads / p.head_groups), static_cast<long long>(model.num_heads),
      format_bytes(grouped.scratch + grouped.ops_workspace).c_str(),
      format_bytes(whole.scratch + whole.ops_workspace).c_str(), format_bytes(whole.total()).c_str(),
      format_bytes(request.device_budget).c_str(), static_cast<long long>(p.head_groups - 1),
      static_cast<long long>(p.head_groups), extra_s);
}

// "0-20 resident with GPU AdamW; 21-22, 24, 26 resident; 23, 25 resident with ...": each value's
// runs together, where some value has several runs (interleaved placements); else runs().
template <typename T, typename Name>
std::string grouped_runs(const std::vector<T>& values, Name name) {
  std::vector<T> order;
  std::vector<std::string> spans;
  bool interleaved = false;
  for (size_t begin = 0; begin < values.size();) {
    size_t end = begin;
    while (end + 1 < values.size() && values[end + 1] == values[begin]) ++end;
    const std::string span = begin == end ? fmt::format("{}", begin) : fmt::format("{}-{}", begin, end);
    const auto seen = std::find(order.begin(), order.end(), values[begin]);
    if (seen == order.end()) {
      order.push_back(values[begin]);
      spans.push_back(span);
    } else {
      interleaved = true;
      spans[static_cast<size_t>(seen - order.begin())] += ", " + span;
    }
    begin = end + 1;
  }
  if (!interleaved) return runs(values, name);
  std::string out;
  for (size_t k = 0; k < order.size(); ++k)
    out += fmt::format("{}{} {}", out.empty() ? "" : "; ", spans[k], name(order[k]));
  return out;
}

void print_candidate_summary(const ModelConfig& model, const ModelLayout& layout, const Candidate& c,
                             size_t host_budget) {
  const Plan& p = c.plan;
  std::printf("  %s\n", p.describe().c_str());
  if (p.optimizer_on_gpu()) return;
  print_weight_upload(model, layout, c, host_budget);
  std::vector<UnitPlacement> layers(p.units.begin() + 1, p.units.end() - 1);
  std::printf("  embedding %s; head %s\n", unit_words(p.units[layout.embedding_unit()]),
              unit_words(p.units[layout.head_unit()]));
  std::printf("  layers %s\n", grouped_runs(layers, unit_words).c_str());
  if (recomputes_any(p))
    std::printf(
        "  boundary activations: one in %lld kept, the others recomputed in the backward from the kept one "
        "below; kept: %s%s\n",
        static_cast<long long>(boundary_group_size(p.activations)), kept_boundary_runs(p.activations).c_str(),
        boundary_groups(p.activations, p.one_staging_buffer).staging_buffers == 1
            ? " (offloaded ones through one staging buffer on the GPU: each reload waits for the use reading "
              "it)"
            : "");
  else
    std::printf("  boundary activations of layers %s\n",
                runs(p.activations, [](ActivationPlacement a) {
                  switch (a) {
                    case ActivationPlacement::KeepOnGpu:
                      return "kept on the GPU";
                    case ActivationPlacement::OffloadToHost:
                      return "offloaded to the host";
                    case ActivationPlacement::KeepWithInternals:
                      return "kept on the GPU with their internals (no recompute)";
                    case ActivationPlacement::OffloadWithInternals:
                      return "offloaded to the host with their internals (no recompute)";
                    case ActivationPlacement::Recompute:
                      return "recomputed in the backward from the kept one below";
                  }
                  return "?";
                }).c_str());
  if (keeps_any_internals(p) && p.kept_internals == KeptInternals::WithNorms)
    std::printf(
        "  layers keeping their internals keep the norms' outputs too: their backward runs neither norm "
        "again (keep_norm_outputs)\n");
  if (keeps_any_internals(p) && p.kept_internals == KeptInternals::WithActivation)
    std::printf(
        "  layers keeping their internals keep the norms' outputs and the activation too: their backward "
        "runs nothing of the forward again (keep_norm_outputs, keep_activation)\n");
  std::printf("  micro-chunks of %lld tokens (micro-batch %lld), %lld per step\n",
              static_cast<long long>(c.shape.chunk_tokens), static_cast<long long>(p.micro_batch),
              static_cast<long long>(c.shape.chunks));
  if (p.sweeps > 1)
    std::printf(
        "  in %lld sweeps of %lld micro-chunk%s: each a forward and a backward of every unit, the "
        "gradients summed on the GPU, the optimizer after the last\n",
        static_cast<long long>(p.sweeps), static_cast<long long>(sweep_chunks(p, c.shape.chunks)),
        sweep_chunks(p, c.shape.chunks) == 1 ? "" : "s");
}

}  // namespace

void print_selection(const TrainConfig& config, const ModelConfig& model, const ModelLayout& layout,
                     const PlanTarget& target, const PlanSelection& s) {
  const Candidate& best = s.result.best;
  const Prediction& p = best.prediction;
  std::printf("model:     %s (%s, %lld layers, hidden %lld, %.2fB parameters)\n",
              config.model.string().c_str(), model.architecture_name.c_str(),
              static_cast<long long>(model.num_layers), static_cast<long long>(model.hidden_size),
              static_cast<double>(layout.parameter_count()) / 1e9);
  std::printf("batch:     %lld sequences of %lld tokens per step (%lld tokens)\n",
              static_cast<long long>(config.global_batch), static_cast<long long>(config.seq_len),
              static_cast<long long>(config.global_batch * config.seq_len));
  std::printf("device:    %s; profile: %s\n", target.device.c_str(), s.profile_source.c_str());
  // The profile's attention choice (ComputeProfile::own_attention_*), which a run on the machine it
  // measured takes; said only where it set the library's aside.
  const AttentionChoice attention{s.profile.compute.own_attention_forward,
                                  s.profile.compute.own_attention_backward};
  if (attention.any())
    std::printf("attention: %s on ferry's own kernels (the profile found them faster than the library's)\n",
                attention.own_directions());
  if (target.devices > 1)
    std::printf(
        "devices:   %lld, each running %lld sequences of every step with its own slots; one host state\n"
        "           %s\n",
        static_cast<long long>(target.devices), static_cast<long long>(config.global_batch / target.devices),
        describe_collectives(s.profile, target.devices).c_str());
  std::printf("budgets:   device %s (%s, %.0f%% kept free), host %s (%s)\n\n",
              format_bytes(s.request.device_budget).c_str(), target.device_budget_source.c_str(),
              100.0 * s.request.headroom,
              s.request.host_budget > 0 ? format_bytes(s.request.host_budget).c_str() : "unlimited",
              s.request.host_budget > 0 ? s.request.host_budget_source.c_str() : "no host_memory");

  std::printf("plan\n");
  print_candidate_summary(model, layout, best, s.request.host_budget);
  print_recompute_reason(model, layout, best, s.request, s.profile);
  print_head_groups_reason(model, layout, best, s.request, s.profile);
  std::printf("\npredicted step time %.4g s, %.0f tokens/s, GPU idle %.0f%%\n", p.step_seconds,
              p.tokens_per_second, 100.0 * p.gpu_idle_fraction);
  const double flops =
      training_flops_per_token(model, static_cast<double>(layout.parameter_count()), config.seq_len);
  std::printf(
      "model FLOPs utilisation %.1f%% of the H200's %.0f TFLOP/s dense bf16 peak (%.1f GFLOP per token: "
      "6 per parameter and causal attention, recomputes not counted)\n",
      100.0 * p.tokens_per_second * flops / kH200DenseBf16FlopsPerS, kH200DenseBf16FlopsPerS / 1e12,
      flops / 1e9);
  std::printf("bottleneck: %s\n  %s\n", lane_name(p.bottleneck), best.explanation.c_str());
  for (const std::string& line : describe_advice(s)) std::printf("%s\n", line.c_str());
  const std::string evaluation = describe_evaluation(config, s);
  if (!evaluation.empty()) std::printf("%s\n", evaluation.c_str());
  std::printf("\nmemory (peak)\n");
  std::printf(
      "  GPU       %s  slots %s, resident %s, activations %s, scratch %s, ops workspace %s, other %s\n",
      share(p.device.total(), s.request.device_budget).c_str(), format_bytes(p.device.slots).c_str(),
      format_bytes(p.device.resident).c_str(), format_bytes(p.device.activations).c_str(),
      format_bytes(p.device.scratch).c_str(), format_bytes(p.device.ops_workspace).c_str(),
      format_bytes(p.device.other).c_str());
  std::printf("  pinned    %s\n", share(p.host.pinned, 0).c_str());
  std::printf("  pageable  %s  (%s)\n", share(p.host.pageable, 0).c_str(),
              describe_state_format(best.plan.optimizer_state).c_str());
  std::printf(
      "  beside    %s  (the process beside the engine: runtime, data, an allowance%s)\n",
      share(p.host.beside, 0).c_str(),
      config.trace.empty()
          ? ""
          : fmt::format(", the trace's {}", format_bytes(static_cast<size_t>(config.trace_memory))).c_str());
  if (p.host.device > 0)
    std::printf("  device    %s  (the simulated device's memory is host memory)\n",
                share(p.host.device, 0).c_str());
  std::printf("  host      %s  (%s)\n", share(p.host.total(), s.request.host_budget).c_str(),
              s.request.host_budget_source.c_str());
  if (p.host.start() > p.host.total())
    std::printf(
        "  at start  %s  (the weights read one unit at a time into a %s fp32 buffer while the masters are "
        "written, before the moments: more than the steady total)\n",
        share(p.host.start(), s.request.host_budget).c_str(), format_bytes(p.host.loaded_weights).c_str());
  if (p.disk_bytes > 0)
    std::printf("  disk      %s  (optimizer state in disk_dir %s, of disk_memory %s)\n",
                share(p.disk_bytes, s.request.disk_budget).c_str(), config.disk_dir.string().c_str(),
                format_bytes(static_cast<size_t>(config.disk_memory)).c_str());
  else
    std::printf("  disk      none%s\n", config.disk_memory > 0 ? " (the host budget holds the state)"
                                                               : " (disk_memory: 0, no disk tier)");
  const std::vector<std::string> disk = describe_disk(s);
  if (!disk.empty()) std::printf("\ndisk tier\n");
  for (const std::string& line : disk) std::printf("  %s\n", line.c_str());

  if (!s.result.alternatives.empty()) std::printf("\nnext best alternatives\n");
  for (size_t i = 0; i < s.result.alternatives.size(); ++i) {
    const Candidate& c = s.result.alternatives[i];
    std::printf("%zu. step %.4g s, %.0f tokens/s, GPU %s, host %s\n", i + 1, c.prediction.step_seconds,
                c.prediction.tokens_per_second, format_bytes(c.prediction.device.total()).c_str(),
                format_bytes(c.prediction.host.total()).c_str());
    std::printf("   %s\n", c.explanation.c_str());
  }
  std::printf("\n%zu plans simulated\n", s.result.simulated);
}

// The profile to plan with: --nominal's rates, `profile: FILE`, else this machine's (cached, or
// measured now on the config's device).
MachineProfile plan_profile(const TrainConfig& config, const ModelConfig& model, const DeviceChoice& choice,
                            bool nominal, std::string* source, bool scale) {
  FERRY_CHECK(!scale || (!config.profile.empty() && !nominal), kWhere,
              "--scale-profile carries a profile file to another shape: give profile=FILE (bench/profiles/ "
              "holds the lent H200's), without --nominal");
  if (nominal) {
    MachineProfile p = nominal_profile(model, config.seq_len, choice.target.weight_dtype);
    *source = p.device_name;
    return p;
  }
  if (scale) {
    const MachineProfile measured = load_profile(config.profile);
    if (measured.shape_key != model_shape_key(model, measured.seq_len, measured.weight_dtype)) {
      const std::string name = preset_of_profile(measured, config.profile.string());
      MachineProfile p = scale_profile(measured, preset_model(name), model, name);
      *source = fmt::format("{}, compute scaled by FLOPs from {}", config.profile.string(), name);
      check_profile_matches_model(p, model, config.seq_len, config.profile.string());
      return p;
    }
  }
  if (!config.profile.empty()) {
    MachineProfile p = load_profile_file(config, model);
    *source = config.profile.string();
    return p;
  }
  if (choice.gpu_memory > 0) {  // refused before measuring, which needs device memory too
    PlanTarget sized = choice.target;
    sized.device_budget = choice.gpu_memory;
    check_device_budget(model, build_model_layout(model), plan_request(config, sized, 0.0));
  }
  const std::unique_ptr<Device> device = make_chosen_device(choice);
  const std::unique_ptr<Ops> ops = make_device_ops(*device);
  ProfileOrigin origin = ProfileOrigin::Measured;
  MachineProfile p = obtain_profile(config, model, *device, *ops, {}, &origin);
  *source = fmt::format("{}, {}", p.device_name, origin == ProfileOrigin::Cache ? "cached" : "measured now");
  return p;
}

std::string preset_of_profile(const MachineProfile& profile, const std::string& source) {
  for (const char* arch : {"llama", "mistral", "qwen2", "qwen3"})
    for (const ModelPreset& p : model_presets(arch))
      if (model_shape_key(preset_config(arch, p.name), profile.seq_len, profile.weight_dtype) ==
          profile.shape_key)
        return fmt::format("{}/{}", arch, p.name);
  fail(
      kWhere,
      "{} was measured for the shape {}, which is no preset's (ferry init --list), so it cannot be scaled to "
      "another shape; measure a profile of this model instead (ferry profile CONFIG.yaml --out FILE)",
      source, profile.shape_key);
}

// "llama/llama-3.1-8b" -> that preset's config.
ModelConfig preset_model(const std::string& spec) {
  const size_t slash = spec.find('/');
  FERRY_CHECK(slash != std::string::npos && slash > 0 && slash + 1 < spec.size(), kWhere,
              "--preset takes ARCH/NAME, like llama/llama-3.1-8b; ferry init --list shows them");
  return preset_config(spec.substr(0, slash), spec.substr(slash + 1));
}

}  // namespace ferry
