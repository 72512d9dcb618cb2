#include "planner/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "model/decoder_layer.h"
#include "ops/cuda_ops_sizes.h"
#include "planner/boundary_groups.h"
#include "planner/disk_spill.h"
#include "planner/disk_tier_layout.h"
#include "planner/head_groups.h"
#include "planner/memory_model.h"
#include "planner/sequence_tile.h"

namespace ferry {

size_t default_host_budget(double physical_bytes) {
  const double reserve = std::max(0.1 * physical_bytes, 4.0 * 1073741824.0);
  return std::max<size_t>(1, static_cast<size_t>(std::max(0.0, physical_bytes - reserve)));
}

size_t default_host_budget_available(size_t available_bytes) {
  const size_t margin = std::max(available_bytes / 20, size_t{2} << 30);
  return std::max<size_t>(1, available_bytes - std::min(available_bytes, margin));
}

namespace {

// Everything of a plan but the resident-layer count and the kept activations, which the search
// sizes to the budget inside a family.
struct Family {
  bool everything_on_gpu = false;
  int64_t micro_batch = 1;
  int64_t slots = 2;
  UpdateSchedule update = UpdateSchedule::AfterBackward;
  WeightUpload upload = WeightUpload::HostShadow;
  UnitPlacement embedding = UnitPlacement::Streamed;
  UnitPlacement head = UnitPlacement::Streamed;
  UnitPlacement layers = UnitPlacement::ResidentParams;  // the kind of the resident layers
  // The resident layers are the first ones instead of the last: with the optimizer on the GPU and
  // updates after the backward, their next forward needs no CPU update, which gives the CPU a head
  // start on the layers after them.
  bool first_layers = false;
  int64_t seq_tile = 0;            // Plan::seq_tile
  int64_t keep_every = 1;          // one boundary in this many kept, the others recomputed
  int64_t head_groups = 1;         // Plan::head_groups
  bool one_staging_buffer = true;  // Plan::one_staging_buffer
  // Plan::sweeps. Above 1 every layer is resident: the first ones with their optimizer on the GPU
  // (as many as the count the family enumerates), the others with their weights only.
  int64_t sweeps = 1;
};

// Layers may keep their internals only when untiled and in one head group (kept internals are
// whole chunks of every head).
bool tiled(const Plan& plan, const StepShape& shape) {
  return tile_count(shape.chunk_tokens, plan.seq_tile) > 1 || plan.head_groups > 1;
}

int64_t kept_activations(const Plan& plan) {
  int64_t kept = 0;
  for (auto a : plan.activations) kept += boundary_on_gpu(a);
  return kept;
}

int64_t kept_internals(const Plan& plan) {
  int64_t kept = 0;
  for (auto a : plan.activations) kept += keeps_internals(a);
  return kept;
}

// The counts of layers with internals on the host the search tries, up to `most`: every count up
// to 4, then steps of about a third (the step time changes smoothly with the count).
std::vector<int64_t> host_internals_counts(int64_t most) {
  std::vector<int64_t> counts;
  for (int64_t n = 1; n <= most; n = n < 4 ? n + 1 : n + std::max<int64_t>(1, n / 3)) counts.push_back(n);
  if (!counts.empty() && counts.back() != most) counts.push_back(most);
  return counts;
}

// Whether the plan's resident layers include layer 0 but not the last layer.
bool resident_from_the_first(const Plan& plan) {
  const size_t first = 1, last = plan.units.size() - 2;
  return plan.units[first] != UnitPlacement::Streamed && plan.units[last] == UnitPlacement::Streamed;
}

int64_t resident_layer_count(const Plan& plan, UnitPlacement* kind) {
  int64_t count = 0;
  for (size_t u = 1; u + 1 < plan.units.size(); ++u) {
    if (plan.units[u] == UnitPlacement::Streamed) continue;
    ++count;
    if (kind) *kind = plan.units[u];
  }
  return count;
}

bool same_plan(const Plan& a, const Plan& b) {
  return a.micro_batch == b.micro_batch && a.sweeps == b.sweeps && a.seq_tile == b.seq_tile &&
         a.head_groups == b.head_groups && a.one_staging_buffer == b.one_staging_buffer &&
         a.kept_internals == b.kept_internals && a.head_weight_grad_chunks == b.head_weight_grad_chunks &&
         a.gpu_slots == b.gpu_slots && a.units == b.units && a.activations == b.activations &&
         a.update == b.update && a.weight_upload == b.weight_upload && a.weight_dtype == b.weight_dtype &&
         a.grad_dtype == b.grad_dtype && a.state_on_disk == b.state_on_disk && a.disk_slots == b.disk_slots;
}

bool better(const Candidate& a, const Candidate& b) {
  if (a.prediction.step_seconds != b.prediction.step_seconds)
    return a.prediction.step_seconds < b.prediction.step_seconds;
  return a.prediction.device.total() < b.prediction.device.total();
}

class Searcher {
 public:
  // Without a profile the searcher only sizes plans (check_device_budget).
  // `host_bound`: the K of kept boundaries is searched for short sequences too
  // (keep_every_candidates).
  Searcher(const ModelConfig& config, const ModelLayout& layout, const MachineProfile* profile,
           const PlanRequest& r, bool host_bound = false)
      : config_(config),
        layout_(layout),
        profile_(profile),
        r_(r),
        L_(config.num_layers),
        host_bound_(host_bound) {
    device_limit_ = static_cast<size_t>(static_cast<double>(r.device_budget) * (1.0 - r.headroom));
  }

  void check_device() {
    for (const Family& f : families()) search_family(f);
    if (min_device_ > device_limit_) refuse();
  }

  // The least host memory of any plan that fits the device (sizing only, no profile needed).
  size_t smallest_fitting_host() {
    for (const Family& f : families()) search_family(f);
    return min_host_fitting_;
  }

  SearchResult run(size_t alternatives) {
    for (const Family& f : families()) search_family(f);
    if (bests_.empty()) refuse();
    std::sort(bests_.begin(), bests_.end(), better);
    keep_the_activation_on_the_best();
    group_the_head_weight_gradient_on_the_best();
    SearchResult result;
    result.simulated = simulated_;
    result.best = bests_.front();
    result.best.explanation = result.best.prediction.explain();
    for (size_t i = 1; i < bests_.size() && result.alternatives.size() < alternatives; ++i) {
      Candidate c = bests_[i];
      const auto listed = [&](const Candidate& other) { return same_plan(other.plan, c.plan); };
      if (listed(result.best) || std::any_of(result.alternatives.begin(), result.alternatives.end(), listed))
        continue;
      const double slower = c.prediction.step_seconds - result.best.prediction.step_seconds;
      c.explanation = fmt::format("{:+.4g} s ({:+.1f}%): {}; {}", slower,
                                  100.0 * slower / result.best.prediction.step_seconds,
                                  plan_difference(c.plan, result.best.plan), c.prediction.explain());
      result.alternatives.push_back(std::move(c));
    }
    return result;
  }

 private:
  std::vector<int64_t> micro_batches() const {
    if (r_.micro_batch) return {*r_.micro_batch};
    std::vector<int64_t> out;
    for (int64_t m = 1; m <= r_.global_batch; ++m)
      if (r_.global_batch % m == 0) out.push_back(m);
    return out;
  }

  // The sweeps (Plan::sweeps) tried for micro-batch `mb`: every divisor above 1 of the step's
  // micro-chunks, where the whole model can be resident (no forced resident layer count below the
  // model's, no offloaded activations, one device).
  std::vector<int64_t> sweep_counts(int64_t mb) const {
    std::vector<int64_t> out;
    if (!r_.space.sweeps || r_.resident_layers.value_or(L_) != L_ || r_.offload_activations.value_or(false) ||
        r_.devices > 1)
      return out;
    const int64_t chunks = r_.global_batch / mb;
    for (int64_t n = 2; n <= chunks; ++n)
      if (chunks % n == 0 && r_.sweeps.value_or(n) == n) out.push_back(n);
    return out;
  }

  std::vector<Family> families() const {
    std::vector<Family> out;
    const bool gpu_adamw =
        profile_ && profile_->compute.gpu_adamw_params_per_s > 0 && is_exact(r_.optimizer_state);
    const bool per_unit =
        (r_.space.per_unit_gpu_optimizer || r_.gpu_optimizer_layers.value_or(0) > 0) && gpu_adamw;
    std::vector<UnitPlacement> end_units = {UnitPlacement::Streamed, UnitPlacement::ResidentParams};
    if (per_unit) end_units.push_back(UnitPlacement::ResidentWithOptimizer);
    // The resident layers' kind; a forced count of GPU-optimizer layers fixes it per layer.
    std::vector<UnitPlacement> resident_kinds = {UnitPlacement::ResidentParams};
    if (per_unit && !r_.gpu_optimizer_layers) resident_kinds.push_back(UnitPlacement::ResidentWithOptimizer);
    std::vector<UpdateSchedule> updates = {UpdateSchedule::AfterBackward};
    if (!r_.clipping) updates.push_back(UpdateSchedule::DuringBackward);
    if (r_.update) updates = {*r_.update};
    std::vector<WeightUpload> uploads = {WeightUpload::HostShadow};
    if (r_.space.convert_on_upload && is_exact(r_.optimizer_state))
      uploads.push_back(WeightUpload::ConvertOnUpload);
    if (r_.weight_upload) uploads = {*r_.weight_upload};
    const std::vector<int64_t> slots = r_.slots ? std::vector<int64_t>{*r_.slots} : r_.space.slot_counts;

    for (int64_t mb : micro_batches()) {
      const size_t first = out.size();
      if (r_.allow_optimizer_on_gpu && gpu_adamw && r_.resident_layers.value_or(L_) == L_ &&
          r_.gpu_optimizer_layers.value_or(L_) == L_ && !r_.offload_activations.value_or(false)) {
        Family f;
        f.everything_on_gpu = true;
        f.micro_batch = mb;
        out.push_back(f);
      }
      for (int64_t s : slots)
        for (UpdateSchedule update : updates)
          for (WeightUpload upload : uploads)
            for (UnitPlacement e : end_units) {
              // Tied embeddings are read by the first and the last unit: the embedding stays resident.
              if (layout_.tied && e == UnitPlacement::Streamed) continue;
              for (UnitPlacement h : end_units) {
                // A tied head writes its lm_head gradient into the embedding's buffer: one dtype for
                // both (the GPU optimizer's units have fp32 gradients).
                const bool e_fp32 = e == UnitPlacement::ResidentWithOptimizer || r_.grad_dtype == DType::F32;
                const bool h_fp32 = h == UnitPlacement::ResidentWithOptimizer || r_.grad_dtype == DType::F32;
                if (layout_.tied && e_fp32 != h_fp32) continue;
                for (UnitPlacement kind : resident_kinds) {
                  out.push_back({false, mb, s, update, upload, e, h, kind});
                  if (kind == UnitPlacement::ResidentWithOptimizer &&
                      update == UpdateSchedule::AfterBackward && !r_.resident_layers)
                    out.push_back({false, mb, s, update, upload, e, h, kind, true});
                }
                // The whole model resident, the step in sweeps (one slot count stands for all:
                // nothing streams).
                if (e != UnitPlacement::Streamed && h != UnitPlacement::Streamed &&
                    s == families_slots_front())
                  for (int64_t sweeps : sweep_counts(mb)) {
                    Family f{false, mb, s, update, upload, e, h, resident_kinds.back(), true};
                    f.sweeps = sweeps;
                    out.push_back(f);
                  }
              }
            }
      for (int64_t sweeps : sweep_counts(mb))
        if (!out.empty() && out[first].everything_on_gpu && out[first].micro_batch == mb &&
            out[first].sweeps == 1) {
          Family f = out[first];
          f.sweeps = sweeps;
          out.push_back(f);
        }
      // Each family of this micro-batch once per sequence tile, per K of kept boundaries and per
      // count of head groups.
      const std::vector<int64_t> tiles =
          r_.seq_tile ? std::vector<int64_t>{*r_.seq_tile} : seq_tile_candidates(r_.seq_len, mb * r_.seq_len);
      const std::vector<int64_t> keeps = r_.keep_every ? std::vector<int64_t>{*r_.keep_every}
                                                       : keep_every_candidates(r_.seq_len, L_, host_bound_);
      const std::vector<int64_t> groups =
          r_.head_groups ? std::vector<int64_t>{*r_.head_groups} : head_group_candidates(config_, r_.seq_len);
      const std::vector<Family> untiled(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
      out.resize(first);
      // One staging buffer or two where K > 1 would let one serve (planner/boundary_groups.h): the
      // second saves the backward's reloads their wait, the first a boundary of GPU memory.
      for (int64_t tile : tiles)
        for (int64_t keep : keeps)
          for (int64_t group : groups)
            for (const bool one_staging : keep > 1 ? std::vector<bool>{true, false} : std::vector<bool>{true})
              for (Family f : untiled) {
                f.seq_tile = tile;
                f.keep_every = keep;
                f.head_groups = group;
                f.one_staging_buffer = one_staging;
                out.push_back(f);
              }
    }
    // Forced sweeps are a constraint like the other forced options.
    if (r_.sweeps)
      out.erase(
          std::remove_if(out.begin(), out.end(), [&](const Family& f) { return f.sweeps != *r_.sweeps; }),
          out.end());
    return out;
  }

  // `resident_layers`: of a family in sweeps, the first layers keeping their optimizer on the GPU
  // (a forced gpu_optimizer_layers count: the last ones), every layer being resident.
  Plan make_plan(const Family& f, int64_t resident_layers) const {
    Plan plan;
    plan.devices = r_.devices;
    plan.sweeps = f.sweeps;
    plan.micro_batch = f.micro_batch;
    plan.seq_tile = f.seq_tile;
    plan.head_groups = f.head_groups;
    plan.one_staging_buffer = f.one_staging_buffer;
    plan.weight_dtype = r_.weight_dtype;
    plan.grad_dtype = r_.grad_dtype;
    plan.optimizer_state = r_.optimizer_state;
    plan.activations = keep_every_kth(L_, f.keep_every, ActivationPlacement::OffloadToHost);
    if (f.everything_on_gpu) {
      plan.units.assign(layout_.units.size(), UnitPlacement::ResidentWithOptimizer);
      plan.activations = keep_every_kth(L_, f.keep_every, ActivationPlacement::KeepOnGpu);
      return plan;
    }
    plan.gpu_slots = f.slots;
    plan.update = f.update;
    plan.weight_upload = f.upload;
    plan.units.assign(layout_.units.size(), UnitPlacement::Streamed);
    plan.units[layout_.embedding_unit()] = f.embedding;
    plan.units[layout_.head_unit()] = f.head;
    const int64_t on_gpu = r_.gpu_optimizer_layers.value_or(0);
    if (f.sweeps > 1) {
      for (int64_t l = 0; l < L_; ++l) {
        const bool gpu = r_.gpu_optimizer_layers ? l >= L_ - on_gpu : l < resident_layers;
        plan.units[layout_.layer_unit(l)] =
            gpu ? UnitPlacement::ResidentWithOptimizer : UnitPlacement::ResidentParams;
      }
      plan.activations = keep_every_kth(L_, f.keep_every, ActivationPlacement::KeepOnGpu);
    } else if (f.first_layers) {
      for (int64_t l = 0; l < resident_layers; ++l) plan.units[layout_.layer_unit(l)] = f.layers;
    } else {
      for (int64_t l = L_ - 1; l >= L_ - resident_layers; --l)
        plan.units[layout_.layer_unit(l)] =
            r_.gpu_optimizer_layers
                ? (l >= L_ - on_gpu ? UnitPlacement::ResidentWithOptimizer : UnitPlacement::ResidentParams)
                : f.layers;
    }
    if (r_.offload_activations == false)
      plan.activations = keep_every_kth(L_, f.keep_every, ActivationPlacement::KeepOnGpu);
    return plan;
  }

  size_t device_total(const Plan& plan, const StepShape& shape) const {
    return device_bytes(config_, layout_, plan, shape.chunk_tokens, shape.chunks).total();
  }
  // The whole process's host memory under `plan`, as the budget counts it.
  HostBytes host_of(const Plan& plan, const StepShape& shape) const {
    HostBytes h = host_bytes(config_, layout_, plan, shape.chunk_tokens, shape.chunks);
    h.beside = r_.host_beside_engine;
    // Every simulated device's memory is host memory.
    if (r_.device_memory_on_host) h.device = device_total(plan, shape) * static_cast<size_t>(r_.devices);
    return h;
  }
  // What the host budget must hold: the steady total, or the start where the loaded weights weigh more.
  size_t host_total(const Plan& plan, const StepShape& shape) const { return host_of(plan, shape).peak(); }

  // Keeps the last layers' boundary activations on the GPU while they fit (the backward reads the
  // last ones first); recomputed boundaries stay so. Keeping all of them also frees the two
  // staging buffers; memory left after that keeps layers' internals too (keep_internals).
  void keep_activations(Plan& plan, const StepShape& shape) const {
    if (r_.offload_activations == true) return;
    if (r_.offload_activations == false) {
      keep_internals(plan, shape);
      return;
    }
    Plan all = plan;
    for (ActivationPlacement& a : all.activations)
      if (a != ActivationPlacement::Recompute) a = ActivationPlacement::KeepOnGpu;
    if (device_total(all, shape) <= device_limit_) {
      plan = all;
      keep_internals(plan, shape);
      return;
    }
    const size_t act = round_to_256(static_cast<size_t>(shape.tokens() * config_.hidden_size) *
                                    dtype_size(plan.weight_dtype));
    const size_t base = device_total(plan, shape);
    int64_t room = base <= device_limit_ ? static_cast<int64_t>((device_limit_ - base) / act) : 0;
    for (int64_t l = L_ - 1; l >= 0 && room > 0; --l) {
      ActivationPlacement& a = plan.activations[static_cast<size_t>(l)];
      if (a == ActivationPlacement::Recompute) continue;
      a = ActivationPlacement::KeepOnGpu;
      --room;
    }
  }

  // Every boundary on the GPU and memory to spare: the last layers keep their forward
  // intermediates as well, which saves each of them the backward's recompute (the cost model
  // credits it). Every layer saves the same, so the count is what fits.
  void keep_internals(Plan& plan, const StepShape& shape) const {
    if (!r_.space.keep_internals || tiled(plan, shape) || recomputes_boundaries(plan)) return;
    const size_t per_layer =
        static_cast<size_t>(sweep_chunks(plan, shape.chunks)) *
        layer_internals_bytes(config_, shape.chunk_tokens, plan.weight_dtype, plan.kept_internals);
    const size_t base = device_total(plan, shape);
    if (base > device_limit_) return;
    const int64_t room = static_cast<int64_t>((device_limit_ - base) / per_layer);
    for (int64_t l = L_ - 1; l >= std::max<int64_t>(0, L_ - room); --l)
      if (plan.activations[static_cast<size_t>(l)] == ActivationPlacement::KeepOnGpu)
        plan.activations[static_cast<size_t>(l)] = ActivationPlacement::KeepWithInternals;
  }

  void search_family(const Family& f) {
    const StepShape shape{f.micro_batch * r_.seq_len, r_.global_batch / f.micro_batch};
    std::vector<int64_t> counts;
    if (f.everything_on_gpu)
      counts = {L_};
    else if (f.sweeps > 1 && (r_.gpu_optimizer_layers || f.layers != UnitPlacement::ResidentWithOptimizer))
      counts = {0};  // the forced count, or none with the optimizer on the GPU
    else if (r_.resident_layers)
      counts = {std::min(*r_.resident_layers, L_)};
    else
      for (int64_t n = r_.gpu_optimizer_layers.value_or(0); n <= L_; ++n) counts.push_back(n);
    for (int64_t n : counts) {
      // No resident layer: the layers' kind means nothing, the params family stands for both.
      // (In sweeps every layer is resident: none with the GPU optimizer is a plan of its own.)
      if (n == 0 && f.layers == UnitPlacement::ResidentWithOptimizer && !f.everything_on_gpu && f.sweeps == 1)
        continue;
      Plan plan = make_plan(f, n);
      const bool streams = std::any_of(plan.units.begin(), plan.units.end(),
                                       [](UnitPlacement u) { return u == UnitPlacement::Streamed; });
      // Without streamed units the slot count means nothing: one family stands for all.
      if (!f.everything_on_gpu && !streams && f.slots != families_slots_front()) continue;
      const size_t lean_device = device_total(plan, shape);
      if (lean_device < min_device_) {
        min_device_ = lean_device;
        host_at_min_device_ = host_total(plan, shape);
      }
      if (lean_device > device_limit_) continue;
      if (plan.sweeps > 1) {  // every boundary is on the GPU already; internals where room is left
        keep_internals(plan, shape);
        consider(f, std::move(plan), shape);
        continue;
      }
      keep_activations(plan, shape);
      for (Plan& traded : internals_for_boundaries(plan, shape)) consider(f, std::move(traded), shape);
      consider(f, std::move(plan), shape);
    }
    if (family_best_) {
      const Plan best = family_best_->plan;
      for (Plan& p : internals_on_host(best, shape)) consider(f, std::move(p), shape);
      for (Plan& p : streamed_optimizer_plans(best, shape)) consider(f, std::move(p), shape);
    }
    if (family_best_) bests_.push_back(std::move(*family_best_));
    family_best_.reset();
  }

  // A plan that fits the device: kept if it fits the host too, predicted, and ranked in its family.
  void consider(const Family& f, Plan plan, const StepShape& shape) {
    if (r_.disk_layers) {
      if (static_cast<int64_t>(disk_eligible_units(layout_, plan).size()) < *r_.disk_layers) return;
      plan = with_state_on_disk(layout_, std::move(plan), *r_.disk_layers);
      if (disk_tier_layout(layout_, plan).file_bytes > r_.disk_budget) return;
    }
    size_t host = host_total(plan, shape);
    if (r_.host_budget > 0 && host > r_.host_budget && !r_.disk_layers) spill_to_disk(plan, host, shape);
    min_host_fitting_ = std::min(min_host_fitting_, host);
    if (r_.host_budget > 0 && host > r_.host_budget) return;
    if (f.upload == WeightUpload::ConvertOnUpload && !r_.weight_upload && shadow_fits_host(plan, shape))
      return;
    if (!profile_) return;
    std::optional<Plan> with_norms = with_norm_outputs(plan, shape);
    rank(std::move(plan), shape);
    if (with_norms) rank(std::move(*with_norms), shape);
  }

  // `plan`, whose layers keep the products' internals, with the norms' outputs kept beside them
  // where the device (and, for internals on the host, the host) has room for them and the search
  // space allows it; the cost model weighs the two norm passes each such layer's backward no
  // longer runs.
  std::optional<Plan> with_norm_outputs(const Plan& plan, const StepShape& shape) const {
    if (plan.kept_internals != KeptInternals::Products || !keeps_any_internals(plan)) return std::nullopt;
    return keeping(plan, KeptInternals::WithNorms, shape);
  }

  // `plan` keeping `kept` of its layers' internals, where the space allows it and it fits.
  std::optional<Plan> keeping(const Plan& plan, KeptInternals kept, const StepShape& shape) const {
    if (static_cast<int>(kept) > static_cast<int>(r_.space.most_kept_internals)) return std::nullopt;
    Plan p = plan;
    p.kept_internals = kept;
    if (!fits(p, shape)) return std::nullopt;
    return p;
  }

  // Whether `plan` fits the device's and the host's budgets.
  bool fits(const Plan& plan, const StepShape& shape) const {
    return device_total(plan, shape) <= device_limit_ &&
           (r_.host_budget == 0 || host_total(plan, shape) <= r_.host_budget);
  }

  // `plan`, the best plan with one thing more, put in front where it is predicted faster: the best
  // before becomes the first alternative.
  void prefer_on_the_best(Plan plan) {
    Candidate c = simulated(std::move(plan), bests_.front().shape);
    if (better(c, bests_.front())) bests_.insert(bests_.begin(), std::move(c));
  }

  // The activation kept too on the best plan as it stands, where it has the room and is predicted
  // faster; never a plan of another shape made to have the room: on an H100 the whole-GPU 1B's
  // plan in two sweeps that kept it ran ~1% slower than the one sweep without it, which the cost
  // model had put 0.5% behind, while on one plan the activation alone gained 1.1-1.3% (thirty-
  // seventh session).
  void keep_the_activation_on_the_best() {
    const Candidate& best = bests_.front();
    if (best.plan.kept_internals != KeptInternals::WithNorms || !keeps_any_internals(best.plan)) return;
    if (std::optional<Plan> p = keeping(best.plan, KeptInternals::WithActivation, best.shape))
      prefer_on_the_best(std::move(*p));
  }

  // The head's weight gradient taken over several logits chunks on the best plan as it stands
  // (after the activation), where the device has the room for those chunks' logits and the
  // profile times the head faster so; as with the activation, no plan is reshaped to make the room.
  void group_the_head_weight_gradient_on_the_best() {
    if (!r_.space.group_head_weight_grad) return;
    Plan p = bests_.front().plan;
    p.head_weight_grad_chunks = kHeadWeightGradChunks;
    if (fits(p, bests_.front().shape)) prefer_on_the_best(std::move(p));
  }

  void rank(Plan plan, const StepShape& shape) {
    Candidate c = simulated(std::move(plan), shape);
    if (!family_best_ || better(c, *family_best_)) family_best_ = std::move(c);
  }

  // `plan` with its predicted step and host bytes, counted among the plans simulated.
  Candidate simulated(Plan plan, const StepShape& shape) {
    Candidate c;
    c.plan = std::move(plan);
    c.shape = shape;
    c.prediction = predict(config_, layout_, c.plan, *profile_, shape);
    c.prediction.host = host_of(c.plan, shape);
    ++simulated_;
    return c;
  }

  // The fewest layers' state on disk that brings `plan` under the host budget, within the disk
  // budget (planner/disk_spill.h); `plan` and `host` become that plan and its host total, or, when
  // none fits, the leanest the disk budget allows. Also records what all of the eligible layers on
  // disk would need, for the refusal's advice.
  void spill_to_disk(Plan& plan, size_t& host, const StepShape& shape) {
    const int64_t eligible = static_cast<int64_t>(disk_eligible_units(layout_, plan).size());
    if (eligible == 0) return;
    const Plan all = with_state_on_disk(layout_, plan, eligible);
    const size_t all_host = host_total(all, shape), all_disk = disk_tier_layout(layout_, all).file_bytes;
    if (all_host < min_host_all_on_disk_) {
      min_host_all_on_disk_ = all_host;
      disk_for_min_host_ = all_disk;
    }
    if (all_host > r_.host_budget && r_.disk_budget == 0) return;
    for (int64_t k = 1; k <= eligible; ++k) {
      Plan p = with_state_on_disk(layout_, plan, k);
      const size_t disk = disk_tier_layout(layout_, p).file_bytes;
      const size_t h = host_total(p, shape);
      if (disk > r_.disk_budget) {
        // Past the disk budget: only what it would take, for the refusal.
        if (h <= r_.host_budget) {
          min_disk_for_host_ = std::min(min_disk_for_host_, disk);
          return;
        }
        continue;
      }
      if (h >= host) continue;  // the buffers outweigh one small layer's state
      plan = std::move(p);
      host = h;
      if (host <= r_.host_budget) return;
    }
  }

  // Boundaries traded for internals: offloading the first layers' boundaries (a d2h after their
  // forward and an h2d before their backward, on links a compute-bound step leaves mostly idle)
  // frees their device memory, and enough of it keeps one more of the last layers' internals
  // (a recompute saved). For each count of such layers beyond what `plan` keeps, the plan with the
  // fewest boundaries offloaded that fits; the cost model weighs the copies, and their share of
  // host DRAM beside the CPU AdamW, against the recompute.
  std::vector<Plan> internals_for_boundaries(const Plan& plan, const StepShape& shape) const {
    std::vector<Plan> traded;
    if (!r_.space.keep_internals || r_.offload_activations.has_value() || tiled(plan, shape) ||
        recomputes_boundaries(plan))
      return traded;
    const int64_t kept = kept_internals(plan);
    int64_t offloaded = 0;
    for (int64_t k = kept + 1; k <= L_; ++k) {
      Plan p = plan;
      for (int64_t l = 0; l < L_; ++l)
        p.activations[static_cast<size_t>(l)] = l >= L_ - k     ? ActivationPlacement::KeepWithInternals
                                                : l < offloaded ? ActivationPlacement::OffloadToHost
                                                                : ActivationPlacement::KeepOnGpu;
      // More kept layers never need fewer offloaded boundaries: the count only grows.
      while (device_total(p, shape) > device_limit_ && offloaded < L_ - k)
        p.activations[static_cast<size_t>(offloaded++)] = ActivationPlacement::OffloadToHost;
      if (device_total(p, shape) > device_limit_) break;
      traded.push_back(std::move(p));
    }
    return traded;
  }

  // Internals on the host (OffloadWithInternals): `plan` with some of its recomputing layers' internals
  // sent to the host after their forward and fetched back for their backward. The layers are taken
  // from the first up (their reloads come last in the backward, with the most time to arrive), every
  // one to every fourth one (the forward's d2h carries a layer's internals in two to three layers'
  // forwards on the H200, and the boundaries' offloads wait behind it), as many as the host budget
  // holds. Their staging ring takes device memory, made where needed by offloading the first
  // boundaries kept on the GPU, then by un-keeping the first GPU internals; the cost model weighs
  // what is left.
  // Of a family's best plan in sweeps with host-updated layers: k of those layers
  // (ResidentWithStreamedOptimizer, k = 1 .. all of them, spread evenly over them so that the CPU
  // and the link each take every other few in the update's order) updated on the device over their
  // state streamed from the host, the ring's device memory taken from the layers' kept internals;
  // and the same with its last GPU-optimizer layer turned host-updated first (its state's room for
  // the ring and the internals). The cost model weighs the link's share of the update, which runs
  // beside the CPU's, against the CPU's alone.
  std::vector<Plan> streamed_optimizer_plans(const Plan& plan, const StepShape& shape) const {
    std::vector<Plan> out;
    // As the GPU-optimizer layers: a device with a GPU AdamW, and the search space allowing it.
    const bool gpu_adamw = profile_ && profile_->compute.gpu_adamw_params_per_s > 0;
    if (!r_.space.streamed_optimizer || !r_.space.per_unit_gpu_optimizer || !gpu_adamw || plan.sweeps <= 1 ||
        !is_exact(plan.optimizer_state) || plan.devices > 1 || plan.optimizer_on_gpu())
      return out;
    for (const bool demote : {false, true}) {
      Plan base = plan;
      if (demote && r_.gpu_optimizer_layers) continue;  // a forced count of GPU-optimizer layers holds
      if (demote) {
        int64_t last = -1;
        for (int64_t l = 0; l < L_; ++l)
          if (base.units[layout_.layer_unit(l)] == UnitPlacement::ResidentWithOptimizer) last = l;
        if (last < 0) continue;
        base.units[layout_.layer_unit(last)] = UnitPlacement::ResidentParams;
      }
      std::vector<size_t> host_layers;
      for (int64_t l = 0; l < L_; ++l)
        if (base.units[layout_.layer_unit(l)] == UnitPlacement::ResidentParams)
          host_layers.push_back(layout_.layer_unit(l));
      const size_t m = host_layers.size();
      for (auto& a : base.activations)
        if (a == ActivationPlacement::KeepWithInternals) a = ActivationPlacement::KeepOnGpu;
      for (size_t k = 1; k <= m; ++k) {
        Plan p = base;
        for (size_t i = 0; i < m; ++i)
          if ((i + 1) * k / m > i * k / m)
            p.units[host_layers[i]] = UnitPlacement::ResidentWithStreamedOptimizer;
        if (device_total(p, shape) > device_limit_) continue;
        keep_internals(p, shape);
        out.push_back(std::move(p));
      }
    }
    return out;
  }

  std::vector<Plan> internals_on_host(const Plan& plan, const StepShape& shape) const {
    std::vector<Plan> out;
    if (!r_.space.internals_on_host || !r_.space.keep_internals || r_.offload_activations.has_value() ||
        tiled(plan, shape) || recomputes_boundaries(plan) || plan.disk_units() > 0 || plan.sweeps > 1)
      return out;
    std::vector<int64_t> candidates;
    for (int64_t l = 0; l < L_; ++l)
      if (!keeps_internals(plan.activations[static_cast<size_t>(l)])) candidates.push_back(l);
    const size_t per_layer =
        static_cast<size_t>(shape.chunks) *
        layer_internals_bytes(config_, shape.chunk_tokens, plan.weight_dtype, plan.kept_internals);
    int64_t most = static_cast<int64_t>(candidates.size());
    if (r_.host_budget > 0) {
      const size_t host = host_total(plan, shape);
      most = std::min<int64_t>(
          most, host < r_.host_budget ? static_cast<int64_t>((r_.host_budget - host) / per_layer) : 0);
    }
    for (const int64_t stride : {1, 2, 3, 4}) {
      const int64_t reachable = (static_cast<int64_t>(candidates.size()) + stride - 1) / stride;
      for (const int64_t n : host_internals_counts(std::min(most, reachable))) {
        Plan p = plan;
        for (int64_t k = 0; k < n; ++k)
          p.activations[static_cast<size_t>(candidates[static_cast<size_t>(k * stride)])] =
              ActivationPlacement::OffloadWithInternals;
        if (!make_device_room(p, shape)) break;  // more layers only need more room
        if (r_.host_budget > 0 && host_total(p, shape) > r_.host_budget) break;
        out.push_back(std::move(p));
      }
    }
    return out;
  }
  // Frees device memory until `plan` fits: the first boundaries kept on the GPU offloaded, then the
  // first layers keeping internals on the GPU keep only their boundary. false: it never fits.
  bool make_device_room(Plan& plan, const StepShape& shape) const {
    for (const ActivationPlacement from :
         {ActivationPlacement::KeepOnGpu, ActivationPlacement::KeepWithInternals}) {
      for (int64_t l = 0; l < L_ && device_total(plan, shape) > device_limit_; ++l) {
        ActivationPlacement& a = plan.activations[static_cast<size_t>(l)];
        if (a == from)
          a = from == ActivationPlacement::KeepOnGpu ? ActivationPlacement::OffloadToHost
                                                     : ActivationPlacement::KeepOnGpu;
      }
    }
    for (int64_t l = 0; l < L_ && device_total(plan, shape) > device_limit_; ++l) {
      ActivationPlacement& a = plan.activations[static_cast<size_t>(l)];
      if (a == ActivationPlacement::KeepOnGpu) a = ActivationPlacement::OffloadToHost;
    }
    return device_total(plan, shape) <= device_limit_;
  }

  // Converting on upload doubles the upload bytes, and the DMA then reads the masters from the same
  // DRAM the CPU AdamW streams through, which the cost model does not see: on the H200 the 3B with
  // clipping gained 1.3% from its shorter CPU pass at 24 GiB, while at 130 GiB the converting plan
  // the model preferred by a hair ran 7% below the shadow plan (docs/performance.md, calls U, W).
  // Unless forced, it is considered only where the bf16 host shadow does not fit the host budget
  // (without clipping it saves 2 bytes/param there, less three layers' gradients).
  bool shadow_fits_host(const Plan& plan, const StepShape& shape) const {
    Plan shadow = plan;
    shadow.weight_upload = WeightUpload::HostShadow;
    return r_.host_budget == 0 || host_total(shadow, shape) <= r_.host_budget;
  }

  int64_t families_slots_front() const { return r_.slots ? *r_.slots : r_.space.slot_counts.front(); }

  [[noreturn]] void refuse() const {
    const auto gib = [](size_t b) { return format_bytes(b); };
    std::string what, lower;
    if (min_device_ > device_limit_) {
      lower = "micro_batch or seq_len";
      const size_t need =
          static_cast<size_t>(std::ceil(static_cast<double>(min_device_) / (1.0 - r_.headroom)));
      what = fmt::format(
          "the smallest plan needs {} of device memory, more than the {} budget allows with {:.0f}% "
          "kept free; give gpu_memory of at least {}",
          gib(min_device_), gib(r_.device_budget), 100.0 * r_.headroom, gib(need));
      if (r_.host_budget > 0 && host_at_min_device_ > r_.host_budget)
        what += fmt::format(
            ", and host_memory of at least {} (that plan needs {} of host memory; the budget is {}, {})",
            gib(host_at_min_device_), gib(host_at_min_device_), gib(r_.host_budget), r_.host_budget_source);
    } else {
      // The boundary activations that leave the device grow with the tokens of a whole step.
      lower = "global_batch or seq_len";
      what = fmt::format(
          "every plan that fits the device needs at least {} of host memory (optimizer state, pinned "
          "buffers and the process beside them; at the start, one unit's weights in fp32 while they "
          "become the optimizer state), more "
          "than the {} host budget ({}); give host_memory of at least {}{}",
          gib(min_host_fitting_), gib(r_.host_budget), r_.host_budget_source, gib(min_host_fitting_),
          r_.host_budget_source == "host_memory" ? "" : " on a machine that can give it (free memory)");
      // The disk tier lowers the host's share when the disk budget is what limits it.
      const std::string disk_now =
          r_.disk_budget > 0
              ? fmt::format("; the disk budget is {}, {}", gib(r_.disk_budget), r_.disk_budget_source)
              : std::string();
      if (min_disk_for_host_ < std::numeric_limits<size_t>::max())
        what += fmt::format(
            ", or keep this host_memory and put optimizer state on disk: disk_memory of at least {} (and "
            "disk_dir on a disk with that much free{})",
            gib(min_disk_for_host_), disk_now);
      else if (min_host_all_on_disk_ < min_host_fitting_ && disk_for_min_host_ > r_.disk_budget)
        what += fmt::format(
            ", or put optimizer state on disk: with disk_memory of at least {} (and disk_dir on a disk "
            "with that much free{}), host_memory of at least {}",
            gib(disk_for_min_host_), disk_now, gib(min_host_all_on_disk_));
      // Without clipping, gradients need not wait for the global norm: converting on upload can
      // then pass them through a ring instead of keeping one per unit (2 bytes/param less).
      if (r_.clipping && !r_.update && !r_.weight_upload) {
        PlanRequest unclipped = r_;
        unclipped.clipping = false;
        const size_t host = Searcher(config_, layout_, nullptr, unclipped).smallest_fitting_host();
        if (host <= r_.host_budget)
          what += fmt::format(
              ", or train without gradient clipping (max_grad_norm: 0), whose plans need {}: its "
              "gradients need not wait for the global norm",
              gib(host));
      }
    }
    fail("plan", "no plan fits: {} -- or lower {}{}", what, lower,
         r_.slots || r_.resident_layers || r_.offload_activations || r_.sweeps.value_or(1) > 1
             ? ", or drop the forced gpu_slots / resident_layers / "
               "offload_activations / sweeps"
             : "");
  }

  const ModelConfig& config_;
  const ModelLayout& layout_;
  const MachineProfile* profile_;
  const PlanRequest& r_;
  const int64_t L_;
  const bool host_bound_;
  size_t device_limit_ = 0;
  std::vector<Candidate> bests_;
  std::optional<Candidate> family_best_;
  size_t simulated_ = 0;
  size_t min_device_ = std::numeric_limits<size_t>::max(), host_at_min_device_ = 0;
  size_t min_host_fitting_ = std::numeric_limits<size_t>::max();
  // With every eligible layer's state on disk, whatever the disk budget: the least host memory,
  // and the disk bytes that takes.
  size_t min_host_all_on_disk_ = std::numeric_limits<size_t>::max(), disk_for_min_host_ = 0;
  // The least disk with which a plan fits the host budget (past the disk budget).
  size_t min_disk_for_host_ = std::numeric_limits<size_t>::max();
};

const char* unit_choice(UnitPlacement p) {
  switch (p) {
    case UnitPlacement::Streamed:
      return "streamed";
    case UnitPlacement::ResidentParams:
      return "resident";
    case UnitPlacement::ResidentWithOptimizer:
      return "resident with GPU AdamW";
    case UnitPlacement::ResidentWithStreamedOptimizer:
      return "resident with GPU AdamW over streamed state";
  }
  return "?";
}

}  // namespace

SearchResult search_plans(const ModelConfig& config, const ModelLayout& layout, const MachineProfile& profile,
                          const PlanRequest& request, size_t alternatives) {
  FERRY_CHECK(request.global_batch >= 1 && request.seq_len >= 1, "plan",
              "global_batch and seq_len must be positive");
  FERRY_CHECK(
      !request.micro_batch || (*request.micro_batch >= 1 && request.global_batch % *request.micro_batch == 0),
      "plan", "micro_batch must divide global_batch ({})", request.global_batch);
  FERRY_CHECK(!request.slots || *request.slots >= 1, "plan", "gpu_slots must be at least 1");
  FERRY_CHECK(!request.keep_every || *request.keep_every >= 1, "plan",
              "keep_every must be at least 1 (every boundary activation kept), got {}",
              request.keep_every.value_or(0));
  // Beyond these the choice means what a smaller one does (one boundary kept, one tile): a typo for
  // another number, refused rather than planned as something the user did not write.
  FERRY_CHECK(
      !request.keep_every || *request.keep_every <= config.num_layers, "plan",
      "keep_every: {} keeps one boundary activation in {} layers, and the model has {}: give 1 to {}, "
      "or auto",
      request.keep_every.value_or(0), request.keep_every.value_or(0), config.num_layers, config.num_layers);
  // Tiles cut a micro-chunk (micro_batch x seq_len tokens; the whole step's at most).
  const int64_t most_chunk_tokens = request.micro_batch.value_or(request.global_batch) * request.seq_len;
  FERRY_CHECK(!request.seq_tile || *request.seq_tile < most_chunk_tokens, "plan",
              "seq_tile: {} tokens is no tile of a micro-chunk of {} tokens ({} x seq_len {}): give fewer "
              "tokens, off (untiled) or auto",
              request.seq_tile.value_or(0), most_chunk_tokens,
              request.micro_batch ? "micro_batch" : "global_batch", request.seq_len);
  if (request.head_groups) check_head_groups(config, *request.head_groups);
  if (request.sweeps) {
    FERRY_CHECK(*request.sweeps >= 1, "plan", "sweeps must be at least 1 (1: none), got {}", *request.sweeps);
    const int64_t chunks = request.global_batch / request.micro_batch.value_or(1);
    FERRY_CHECK(
        request.micro_batch ? chunks % *request.sweeps == 0 : request.global_batch % *request.sweeps == 0,
        "plan",
        "sweeps: {} must divide the step's micro-chunks (global_batch / micro_batch = {}): choose a "
        "divisor of it, or sweeps: auto",
        *request.sweeps, request.micro_batch ? chunks : request.global_batch);
    FERRY_CHECK(*request.sweeps == 1 || request.devices == 1, "plan",
                "sweeps run on one device; with gpus: {} use sweeps: 1 or auto", request.devices);
  }
  FERRY_CHECK(!request.resident_layers ||
                  (*request.resident_layers >= 0 && *request.resident_layers <= config.num_layers),
              "plan", "resident_layers must be between 0 and the model's {} layers", config.num_layers);
  FERRY_CHECK(!request.space.slot_counts.empty(), "plan", "the search needs at least one slot count");
  FERRY_CHECK(request.update != UpdateSchedule::DuringBackward || !request.clipping, "plan",
              "updates during the backward cannot clip: the global gradient norm is known only after it");
  FERRY_CHECK(!request.gpu_optimizer_layers ||
                  (*request.gpu_optimizer_layers >= 0 &&
                   *request.gpu_optimizer_layers <= request.resident_layers.value_or(config.num_layers)),
              "plan", "gpu_optimizer_layers ({}) must be between 0 and the resident layers ({})",
              request.gpu_optimizer_layers.value_or(0), request.resident_layers.value_or(config.num_layers));
  FERRY_CHECK(request.gpu_optimizer_layers.value_or(0) == 0 || profile.compute.gpu_adamw_params_per_s > 0,
              "plan", "gpu_optimizer_layers needs a device with a GPU AdamW; the profile of {} has none",
              profile.device_name);
  FERRY_CHECK(
      is_exact(request.optimizer_state) || request.gpu_optimizer_layers.value_or(0) == 0, "plan",
      "gpu_optimizer_layers keeps fp32 state on the GPU; with optimizer_state: {} every unit is updated "
      "on the host: drop gpu_optimizer_layers, or use optimizer_state: fp32",
      state_format_name(request.optimizer_state));
  FERRY_CHECK(
      is_exact(request.optimizer_state) || request.weight_upload != WeightUpload::ConvertOnUpload, "plan",
      "weight_upload: convert-on-upload uploads fp32 masters, which optimizer_state: {} does not keep: "
      "use weight_upload: auto or bf16-host-shadow, or optimizer_state: fp32",
      state_format_name(request.optimizer_state));
  FERRY_CHECK(
      !request.disk_layers || (*request.disk_layers >= 0 && *request.disk_layers <= config.num_layers),
      "plan", "disk_layers must be between 0 and the model's {} layers", config.num_layers);
  FERRY_CHECK(request.disk_layers.value_or(0) == 0 || request.disk_budget > 0, "plan",
              "disk_layers puts optimizer state on disk: set disk_memory (and disk_dir) too");
  if (request.keep_every || request.head_groups.value_or(1) > 1 || request.seq_len > kTiledFromSeqLen)
    return Searcher(config, layout, &profile, request).run(alternatives);
  // Short sequences keep every boundary unless that costs the host's RAM: where the best such plan
  // puts optimizer state on disk, or none fits, one boundary in K is tried too (a batch of short
  // rows has as many boundary bytes as one long row of its tokens). Searched only then, since the
  // K axis multiplies the search.
  std::optional<SearchResult> every_kept;
  try {
    every_kept = Searcher(config, layout, &profile, request).run(alternatives);
  } catch (const Error&) {
  }
  if (every_kept && every_kept->best.plan.disk_units() == 0) return *every_kept;
  return Searcher(config, layout, &profile, request, /*host_bound=*/true).run(alternatives);
}

std::optional<Candidate> best_plan_if_any(const ModelConfig& config, const ModelLayout& layout,
                                          const MachineProfile& profile, const PlanRequest& request) {
  try {
    return search_plans(config, layout, profile, request, 0).best;
  } catch (const Error&) {
    return std::nullopt;
  }
}

void check_device_budget(const ModelConfig& config, const ModelLayout& layout, const PlanRequest& request) {
  Searcher(config, layout, nullptr, request).check_device();
}

std::vector<int64_t> keep_every_candidates(int64_t seq_len, int64_t layers, bool host_bound) {
  std::vector<int64_t> out = {1};
  if (seq_len <= kTiledFromSeqLen && !host_bound) return out;
  for (int64_t k : {2, 3, 4, 8})
    if (k <= layers) out.push_back(k);
  return out;
}

std::string plan_difference(const Plan& plan, const Plan& reference) {
  std::vector<std::string> parts;
  if (plan.optimizer_on_gpu() != reference.optimizer_on_gpu()) {
    parts.push_back(plan.optimizer_on_gpu() ? "everything on the GPU"
                                            : "the sliding window instead of everything on "
                                              "the GPU");
    if (plan.micro_batch != reference.micro_batch)
      parts.push_back(fmt::format("micro-batch {} instead of {}", plan.micro_batch, reference.micro_batch));
    return fmt::format("{}", fmt::join(parts, ", "));
  }
  if (plan.micro_batch != reference.micro_batch)
    parts.push_back(fmt::format("micro-batch {} instead of {}", plan.micro_batch, reference.micro_batch));
  if (plan.sweeps != reference.sweeps)
    parts.push_back(fmt::format("{} sweeps instead of {}", plan.sweeps, reference.sweeps));
  if (plan.seq_tile != reference.seq_tile)
    parts.push_back(
        fmt::format("sequence tiles of {} instead of {}",
                    plan.seq_tile > 0 ? std::to_string(plan.seq_tile) : "the whole chunk",
                    reference.seq_tile > 0 ? std::to_string(reference.seq_tile) : "the whole chunk"));
  if (plan.one_staging_buffer != reference.one_staging_buffer)
    parts.push_back(plan.one_staging_buffer ? "one staging buffer for offloaded boundaries instead of two"
                                            : "two staging buffers for offloaded boundaries instead of one");
  if (plan.head_groups != reference.head_groups)
    parts.push_back(fmt::format("attention in {} groups of KV heads instead of {}", plan.head_groups,
                                reference.head_groups));
  if (plan.gpu_slots != reference.gpu_slots)
    parts.push_back(fmt::format("{} slots instead of {}", plan.gpu_slots, reference.gpu_slots));
  if (plan.update != reference.update)
    parts.push_back(
        fmt::format("updates {} instead of {}", update_name(plan.update), update_name(reference.update)));
  if (plan.weight_upload != reference.weight_upload)
    parts.push_back(fmt::format("weights {} instead of {}", weight_upload_name(plan.weight_upload),
                                weight_upload_name(reference.weight_upload)));
  const size_t e = 0, h = plan.units.size() - 1;
  if (plan.units[e] != reference.units[e])
    parts.push_back(fmt::format("embedding {} instead of {}", unit_choice(plan.units[e]),
                                unit_choice(reference.units[e])));
  if (plan.units[h] != reference.units[h])
    parts.push_back(
        fmt::format("head {} instead of {}", unit_choice(plan.units[h]), unit_choice(reference.units[h])));
  UnitPlacement kind = UnitPlacement::ResidentParams, reference_kind = UnitPlacement::ResidentParams;
  const int64_t layers = resident_layer_count(plan, &kind),
                reference_layers = resident_layer_count(reference, &reference_kind);
  if (layers != reference_layers || (layers > 0 && kind != reference_kind))
    parts.push_back(fmt::format("{} layers {} instead of {} {}", layers, unit_choice(kind), reference_layers,
                                unit_choice(reference_kind)));
  if (plan.streamed_optimizer_units() != reference.streamed_optimizer_units())
    parts.push_back(fmt::format("{} layers with their optimizer state streamed through the GPU instead of {}",
                                plan.streamed_optimizer_units(), reference.streamed_optimizer_units()));
  if (layers > 0 && layers == reference_layers &&
      resident_from_the_first(plan) != resident_from_the_first(reference))
    parts.push_back(resident_from_the_first(plan) ? "the first layers resident instead of the last"
                                                  : "the last layers resident instead of the first");
  const int64_t group = boundary_group_size(plan.activations),
                reference_group = boundary_group_size(reference.activations);
  if (group != reference_group)
    parts.push_back(fmt::format("one boundary in {} kept (the others recomputed) instead of one in {}", group,
                                reference_group));
  const int64_t kept = kept_activations(plan), reference_kept = kept_activations(reference);
  if (kept != reference_kept)
    parts.push_back(
        fmt::format("{} boundary activations kept on the GPU instead of {}", kept, reference_kept));
  if (plan.disk_units() != reference.disk_units())
    parts.push_back(fmt::format("{} layers' optimizer state on disk instead of {}", plan.disk_units(),
                                reference.disk_units()));
  const int64_t internals = kept_internals(plan), reference_internals = kept_internals(reference);
  if (internals != reference_internals)
    parts.push_back(fmt::format("{} layers not recomputed instead of {}", internals, reference_internals));
  if (internals > 0 && reference_internals > 0 && plan.kept_internals != reference.kept_internals)
    parts.push_back(fmt::format("internals kept {} instead of {}", kept_internals_manner(plan.kept_internals),
                                kept_internals_manner(reference.kept_internals)));
  const auto on_host = [](const Plan& p) {
    return std::count(p.activations.begin(), p.activations.end(), ActivationPlacement::OffloadWithInternals);
  };
  if (on_host(plan) != on_host(reference))
    parts.push_back(
        fmt::format("{} layers' internals on the host instead of {}", on_host(plan), on_host(reference)));
  if (plan.head_weight_grad_chunks != reference.head_weight_grad_chunks)
    parts.push_back(fmt::format("the head's weight gradient {} instead of {}",
                                head_weight_grad_manner(plan.head_weight_grad_chunks),
                                head_weight_grad_manner(reference.head_weight_grad_chunks)));
  if (parts.empty()) return "the same plan";
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace ferry
