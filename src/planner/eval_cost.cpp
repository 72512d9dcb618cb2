#include "planner/eval_cost.h"

#include <algorithm>
#include <vector>

#include "planner/boundary_groups.h"
#include "planner/memory_model.h"
#include "planner/slot_schedule.h"
#include "planner/stream_simulator.h"

namespace ferry {

namespace {

// The head's forward GEMM's share of its fused forward and backward (above).
constexpr double kHeadForwardShare = 1.0 / 3.0;

}  // namespace

double EvalPrediction::seconds_for(int64_t tokens) const {
  if (tokens <= 0 || batch_tokens <= 0) return 0.0;
  return static_cast<double>((tokens + batch_tokens - 1) / batch_tokens) * batch_seconds;
}

EvalPrediction predict_evaluation(const ModelConfig& config, const ModelLayout& layout, const Plan& plan,
                                  const MachineProfile& profile, const StepShape& shape) {
  const int64_t L = config.num_layers;
  const size_t E = layout.embedding_unit(), Hd = layout.head_unit();
  std::vector<bool> resident(layout.units.size());
  for (size_t u = 0; u < resident.size(); ++u) resident[u] = plan.units[u] != UnitPlacement::Streamed;
  // The step's schedule; an evaluation runs its forward uses, up to and including the head's.
  const std::vector<SlotUse> uses =
      schedule_slots(step_sequence(L, boundary_groups(plan.activations).recomputed).units, resident,
                     std::max<int64_t>(1, plan.gpu_slots));
  const size_t head_use = static_cast<size_t>(L) + 1;
  const double bytes_per_param = plan.weight_upload == WeightUpload::ConvertOnUpload
                                     ? static_cast<double>(sizeof(float))
                                     : static_cast<double>(dtype_size(plan.weight_dtype));
  const auto numel = [&](size_t u) { return static_cast<double>(layout.units[u].numel); };
  const auto chunks_of = [&](const LinearTime& t, double per_token_share = 1.0) {
    return static_cast<double>(shape.chunks) *
           (t.fixed_s + per_token_share * t.per_token_s * static_cast<double>(shape.chunk_tokens));
  };
  const ComputeProfile& compute = profile.compute;

  TaskGraph graph;
  graph.reserve(3 * uses.size() + 2);
  const int32_t tokens =
      graph.add(Lane::HostToDevice, TaskKind::TokenUpload, 0.0,
                static_cast<double>(kStepTokenArrays * shape.tokens()) * sizeof(int32_t), {});
  std::vector<int32_t> computed(head_use + 1, -1);  // per use: its forward on the compute stream
  std::vector<int32_t> loaded(head_use + 1, -1);
  std::vector<bool> resident_uploaded(layout.units.size(), false);
  const size_t ahead = static_cast<size_t>(std::max<int64_t>(1, plan.gpu_slots - 1));
  size_t next_load = 0;
  // Slot loads are issued in use order, each once its slot's previous use is issued (and then waits
  // for it to finish), at most `ahead` uses before its own.
  const auto issue_loads_up_to = [&](size_t limit) {
    for (; next_load <= std::min(limit, head_use); ++next_load) {
      const SlotUse& use = uses[next_load];
      if (!use.load) continue;
      const int32_t released = use.previous_use >= 0 ? computed[static_cast<size_t>(use.previous_use)] : -1;
      if (use.previous_use >= 0 && released < 0) return;
      const int32_t deps[] = {released};
      loaded[next_load] = graph.add(Lane::HostToDevice, TaskKind::WeightUpload, 0.0,
                                    numel(use.unit) * bytes_per_param, deps, static_cast<int32_t>(use.unit));
    }
  };
  const auto resident_upload = [&](size_t u) -> int32_t {
    if (!resident[u] || resident_uploaded[u] || updated_on_device(plan.units[u])) return -1;
    resident_uploaded[u] = true;
    return graph.add(Lane::HostToDevice, TaskKind::ResidentUpload, 0.0, numel(u) * bytes_per_param, {},
                     static_cast<int32_t>(u));
  };

  for (size_t i = 0; i <= head_use; ++i) {
    issue_loads_up_to(i + ahead - 1);
    const SlotUse& use = uses[i];
    const size_t u = use.unit;
    std::vector<int32_t> deps = {tokens};
    if (use.slot >= 0) {
      for (size_t j = i + 1; j-- > 0;) {  // the load that put u in this slot
        if (uses[j].slot == use.slot && uses[j].load) {
          deps.push_back(loaded[j]);
          break;
        }
      }
    }
    deps.push_back(resident_upload(u));
    if (layout.tied && u == Hd) deps.push_back(resident_upload(E));
    TaskKind kind = TaskKind::LayerForward;
    double seconds = 0.0;
    if (u == E) {
      kind = TaskKind::EmbeddingForward;
      seconds = chunks_of(compute.embedding_forward);
    } else if (u == Hd) {
      kind = TaskKind::Head;
      seconds = chunks_of(compute.head, kHeadForwardShare);
    } else {
      seconds = chunks_of(compute.layer_forward);
    }
    computed[i] = graph.add(Lane::Compute, kind, seconds, 0.0, deps, static_cast<int32_t>(u));
  }
  const int32_t after_head[] = {computed[head_use]};
  const int32_t loss = graph.add(Lane::DeviceToHost, TaskKind::LossReadback, 0.0, sizeof(float), after_head);

  const TransferProfile& t = profile.transfer;
  const CopyRates rates{t.h2d_bytes_per_s, t.d2h_bytes_per_s, t.duplex_h2d_bytes_per_s,
                        t.duplex_d2h_bytes_per_s, t.latency_s};
  const std::vector<TaskTiming> timing = simulate(graph, rates, profile.host.memory_sharing);
  EvalPrediction p;
  p.batch_tokens = shape.tokens();
  p.batch_seconds = timing[static_cast<size_t>(loss)].end;
  return p;
}

}  // namespace ferry
