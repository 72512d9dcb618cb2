// The plan search on synthetic machines whose numbers make the right choice explainable: a machine
// with a fast CPU and a slow link, and one with a slow CPU and a fast link, must choose differently,
// each for the reason its numbers give. Also: more budget is never slower, forced options hold,
// and an impossible budget names the smallest one that works.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/cuda_ops_sizes.h"
#include "planner/boundary_groups.h"
#include "planner/memory_model.h"
#include "planner/search.h"
#include "planner_8b_search_fixture.h"

namespace ferry {
namespace {

using test::kGiB;

// A device budget where the 8B's boundaries all fit but no layer's internals besides them.
constexpr size_t kTradeBudgetGiB = 48;

class SearchTest : public test::Llama8BSearchTest {
 protected:
  // Both machines compute the same (the fixture's 5.9 s per step) with the same GPU AdamW.
  // Fast CPU, slow link: AdamW at 20 G params/s (0.4 s for the 8 G params), PCIe 4 GB/s (a layer's
  // 436 MB of bf16 weights takes 0.11 s, longer than its 60 ms forward).
  MachineProfile fast_cpu_slow_link() const { return machine(4e9, 20e9); }
  // Slow CPU, fast link: AdamW at 0.5 G params/s (16 s for the 8 G params), PCIe 55 GB/s.
  MachineProfile slow_cpu_fast_link() const { return machine(55e9, 0.5e9); }
  double params_with_gpu_optimizer(const Plan& plan) const {
    double n = 0;
    for (size_t u = 0; u < plan.units.size(); ++u)
      if (plan.units[u] == UnitPlacement::ResidentWithOptimizer)
        n += static_cast<double>(layout_.units[u].numel);
    return n;
  }
  double all_params() const {
    double n = 0;
    for (const auto& u : layout_.units) n += static_cast<double>(u.numel);
    return n;
  }
  Prediction predict_on(const Candidate& c, const MachineProfile& machine) const {
    return predict(config_, layout_, c.plan, machine, c.shape);
  }
  // The planner's micro-batch on a device of `device_gib`, and an H200-like machine.
  PlanRequest any_micro_batch(size_t device_gib) const {
    PlanRequest r = request(device_gib);
    r.micro_batch.reset();
    return r;
  }
  MachineProfile h200_like() const { return machine(55e9, 4.5e9); }
};

TEST_F(SearchTest, FastCpuSlowLinkAndSlowCpuFastLinkChooseDifferently) {
  const MachineProfile link_bound = fast_cpu_slow_link(), cpu_bound = slow_cpu_fast_link();
  const SearchResult a = search_plans(config_, layout_, link_bound, request(24));
  const SearchResult b = search_plans(config_, layout_, cpu_bound, request(24));

  // The slow-CPU machine spends GPU memory on GPU AdamW state (18 bytes per parameter: bf16
  // weight, fp32 gradient, master, m, v), because every parameter updated there takes 1/0.5e9 s
  // of CPU work off its bottleneck (the gradient norms are on the GPU either way).
  EXPECT_EQ(b.best.prediction.bottleneck, Lane::Cpu) << b.best.explanation;
  const double moved = params_with_gpu_optimizer(b.best.plan);
  EXPECT_GT(moved, 0.0) << b.best.plan.describe();
  const double cpu_s_per_param = 1 / 0.5e9;
  EXPECT_NEAR(b.best.prediction.busy[static_cast<int>(Lane::Cpu)], (all_params() - moved) * cpu_s_per_param,
              1e-6 * all_params() * cpu_s_per_param);
  EXPECT_NE(b.best.explanation.find("bound by CPU optimizer"), std::string::npos) << b.best.explanation;

  // The fast-CPU machine's CPU work (0.44 s) hides under its compute: the GPU optimizer would buy
  // nothing. Its link is the bottleneck, so it spends the memory on what saves PCIe bytes.
  EXPECT_EQ(params_with_gpu_optimizer(a.best.plan), 0.0) << a.best.plan.describe();
  EXPECT_EQ(a.best.prediction.bottleneck, Lane::HostToDevice) << a.best.explanation;
  EXPECT_NE(a.best.explanation.find("bound by h2d copies"), std::string::npos) << a.best.explanation;

  // Each choice is the faster one on its own machine, and by the numbers that bound it there.
  const Prediction b_on_link = predict_on(b.best, link_bound), a_on_cpu = predict_on(a.best, cpu_bound);
  EXPECT_LT(a.best.prediction.step_seconds, b_on_link.step_seconds);
  EXPECT_LT(a.best.prediction.busy[static_cast<int>(Lane::HostToDevice)],
            b_on_link.busy[static_cast<int>(Lane::HostToDevice)]);  // fewer bytes over the slow link
  EXPECT_LT(b.best.prediction.step_seconds, a_on_cpu.step_seconds);
  // On the CPU-bound machine the difference is the CPU work the GPU optimizer took over.
  EXPECT_NEAR(a_on_cpu.step_seconds - b.best.prediction.step_seconds, moved * cpu_s_per_param,
              0.05 * moved * cpu_s_per_param);
}

// Keeping a boundary activation on the GPU saves 2 x 512 MiB of PCIe traffic (offload and reload)
// for 512 MiB of device memory; a resident layer saves one 436 MB upload for 872 MB (weights and
// gradient). On the slow link, activations come first.
TEST_F(SearchTest, OnASlowLinkKeptActivationsBeatResidentLayers) {
  const SearchResult a = search_plans(config_, layout_, fast_cpu_slow_link(), request(24));
  int64_t kept = 0, resident_layers = 0;
  for (auto p : a.best.plan.activations) kept += p == ActivationPlacement::KeepOnGpu;
  for (int64_t l = 0; l < config_.num_layers; ++l)
    resident_layers += a.best.plan.units[layout_.layer_unit(l)] != UnitPlacement::Streamed;
  EXPECT_GT(kept, resident_layers) << a.best.plan.describe();
}

TEST_F(SearchTest, MoreBudgetIsNeverSlower) {
  for (const MachineProfile& machine : {fast_cpu_slow_link(), slow_cpu_fast_link()}) {
    double previous = INFINITY;
    for (size_t gib : {10, 12, 16, 20, 24, 32, 48, 64, 96, 140}) {
      const SearchResult r = search_plans(config_, layout_, machine, request(gib));
      EXPECT_LE(r.best.prediction.step_seconds, previous) << gib << " GiB: " << r.best.plan.describe();
      EXPECT_LE(r.best.prediction.device.total(),
                static_cast<size_t>(0.95 * static_cast<double>(gib * kGiB)));
      previous = r.best.prediction.step_seconds;
    }
  }
}

TEST_F(SearchTest, ForcedOptionsAreConstraints) {
  PlanRequest r = request(48);
  r.slots = 3;
  r.resident_layers = 2;
  r.offload_activations = true;
  r.micro_batch = 2;
  r.space.per_unit_gpu_optimizer = false;
  const SearchResult result = search_plans(config_, layout_, fast_cpu_slow_link(), r);
  const Plan& p = result.best.plan;
  EXPECT_EQ(p.gpu_slots, 3);
  EXPECT_EQ(p.micro_batch, 2);
  EXPECT_EQ(result.best.shape.chunk_tokens, 2 * kSeq);
  EXPECT_EQ(result.best.shape.chunks, kGlobal / 2);
  for (auto a : p.activations) EXPECT_EQ(a, ActivationPlacement::OffloadToHost);
  for (int64_t l = 0; l < config_.num_layers; ++l)
    EXPECT_EQ(p.units[layout_.layer_unit(l)] != UnitPlacement::Streamed, l >= config_.num_layers - 2) << l;
  for (const Candidate& c : result.alternatives) {
    EXPECT_EQ(c.plan.gpu_slots, 3);
    EXPECT_EQ(c.plan.micro_batch, 2);
  }

  r = request(24);
  r.offload_activations = false;  // 32 x 512 MiB of activations cannot stay on a 24 GiB GPU
  r.keep_every = 1;
  EXPECT_THROW(search_plans(config_, layout_, fast_cpu_slow_link(), r), Error);
  // Unless some are recomputed: one boundary in K kept, all of them on the GPU.
  r.keep_every.reset();
  const Plan kept_on_gpu = search_plans(config_, layout_, fast_cpu_slow_link(), r).best.plan;
  EXPECT_GT(boundary_group_size(kept_on_gpu.activations), 1) << kept_on_gpu.describe();
  for (auto a : kept_on_gpu.activations) EXPECT_NE(a, ActivationPlacement::OffloadToHost);
}

TEST_F(SearchTest, ClippingKeepsTheUpdatesAfterTheBackward) {
  PlanRequest r = request(24);
  const SearchResult clipped = search_plans(config_, layout_, slow_cpu_fast_link(), r);
  EXPECT_EQ(clipped.best.plan.update, UpdateSchedule::AfterBackward);
  for (const Candidate& c : clipped.alternatives) EXPECT_EQ(c.plan.update, UpdateSchedule::AfterBackward);
  // Without clipping, the slow CPU starts updating as the gradients land, during the backward.
  r.clipping = false;
  const SearchResult unclipped = search_plans(config_, layout_, slow_cpu_fast_link(), r);
  EXPECT_EQ(unclipped.best.plan.update, UpdateSchedule::DuringBackward) << unclipped.best.explanation;
  EXPECT_LT(unclipped.best.prediction.step_seconds, clipped.best.prediction.step_seconds);
  // Forced schedules are constraints: after the backward even where during would be faster; during
  // the backward refused with clipping, since no update may run before the global norm is known.
  r.update = UpdateSchedule::AfterBackward;
  const SearchResult forced = search_plans(config_, layout_, slow_cpu_fast_link(), r);
  EXPECT_EQ(forced.best.plan.update, UpdateSchedule::AfterBackward);
  EXPECT_NEAR(forced.best.prediction.step_seconds, clipped.best.prediction.step_seconds,
              1e-9 * clipped.best.prediction.step_seconds);
  r.update = UpdateSchedule::DuringBackward;
  r.clipping = true;
  EXPECT_THROW(search_plans(config_, layout_, slow_cpu_fast_link(), r), Error);
}

// With clipping the next forward follows the CPU updates layer by layer, and on a slow CPU it
// waits for them. Layers whose optimizer is on the GPU need no CPU update, so placed first they
// let the forward run while the CPU works ahead: the search puts them there, and the same plan
// with them last is predicted slower.
TEST_F(SearchTest, WithClippingTheGpuOptimizerLayersComeFirst) {
  const MachineProfile cpu_bound = slow_cpu_fast_link();
  const SearchResult r = search_plans(config_, layout_, cpu_bound, request(24));
  const Plan& best = r.best.plan;
  ASSERT_EQ(best.update, UpdateSchedule::AfterBackward);
  const int64_t L = config_.num_layers;
  int64_t on_gpu = 0;
  for (int64_t l = 0; l < L; ++l)
    on_gpu += best.units[layout_.layer_unit(l)] == UnitPlacement::ResidentWithOptimizer;
  ASSERT_GT(on_gpu, 0) << best.describe();
  ASSERT_LT(on_gpu, L) << best.describe();
  for (int64_t l = 0; l < L; ++l)
    EXPECT_EQ(best.units[layout_.layer_unit(l)] == UnitPlacement::ResidentWithOptimizer, l < on_gpu) << l;
  Plan last = best;
  for (int64_t l = 0; l < L; ++l)
    last.units[layout_.layer_unit(l)] =
        l >= L - on_gpu ? UnitPlacement::ResidentWithOptimizer : UnitPlacement::Streamed;
  const Prediction mirrored = predict(config_, layout_, last, cpu_bound, r.best.shape);
  EXPECT_LT(r.best.prediction.step_seconds, mirrored.step_seconds);
  EXPECT_LT(r.best.prediction.gpu_idle_fraction, mirrored.gpu_idle_fraction);
}

// Memory left once every boundary is on the GPU goes to layers' internals, from the last layer
// down, as many as fit; each is a recompute the step no longer does. Turned off, the same budget
// gives a plan that recomputes every layer, and a slower one.
TEST_F(SearchTest, SpareMemoryKeepsTheLastLayersInternals) {
  PlanRequest r = request(400);
  const SearchResult with = search_plans(config_, layout_, slow_cpu_fast_link(), r);
  int64_t kept = 0;
  for (auto a : with.best.plan.activations) kept += a == ActivationPlacement::KeepWithInternals;
  EXPECT_GT(kept, 0) << with.best.plan.describe();
  for (int64_t l = 0; l < config_.num_layers; ++l)
    EXPECT_EQ(with.best.plan.activations[static_cast<size_t>(l)] == ActivationPlacement::KeepWithInternals,
              l >= config_.num_layers - kept)
        << l;
  r.space.keep_internals = false;
  const SearchResult without = search_plans(config_, layout_, slow_cpu_fast_link(), r);
  for (auto a : without.best.plan.activations) EXPECT_NE(a, ActivationPlacement::KeepWithInternals);
  EXPECT_LT(with.best.prediction.step_seconds, without.best.prediction.step_seconds);
  // One more kept layer would not fit the budget.
  Plan more = with.best.plan;
  if (kept < config_.num_layers) {
    more.activations[static_cast<size_t>(config_.num_layers - kept - 1)] =
        ActivationPlacement::KeepWithInternals;
    const DeviceBytes d =
        device_bytes(config_, layout_, more, with.best.shape.chunk_tokens, with.best.shape.chunks);
    EXPECT_GT(d.total(), static_cast<size_t>((1.0 - r.headroom) * static_cast<double>(r.device_budget)));
  }
}

// Where memory is left over after the internals, the norms' outputs and the activation are kept
// beside them: memory-bound passes fewer in each such backward (at the GPU AdamW's memory rate),
// the activation on the best plan as it stands. Turned off in turn (config keep_activation: false,
// then keep_norm_outputs: false), the same budget runs them again, each predicted slower, and the
// plan says which it does.
TEST_F(SearchTest, MemoryLeftOverKeepsTheNormOutputsWithTheInternals) {
  PlanRequest r = request(1000);  // room after everything resident with its optimizer
  const SearchResult all = search_plans(config_, layout_, slow_cpu_fast_link(), r);
  ASSERT_TRUE(keeps_any_internals(all.best.plan)) << all.best.plan.describe();
  EXPECT_EQ(all.best.plan.kept_internals, KeptInternals::WithActivation) << all.best.plan.describe();
  EXPECT_NE(all.best.plan.describe().find("with the norms' outputs and the activation"), std::string::npos);
  r.space.most_kept_internals = KeptInternals::WithNorms;
  const SearchResult norms = search_plans(config_, layout_, slow_cpu_fast_link(), r);
  EXPECT_EQ(norms.best.plan.kept_internals, KeptInternals::WithNorms) << norms.best.plan.describe();
  EXPECT_NE(norms.best.plan.describe().find("with the norms' outputs"), std::string::npos);
  EXPECT_EQ(norms.best.plan.describe().find("and the activation"), std::string::npos);
  EXPECT_LT(all.best.prediction.step_seconds, norms.best.prediction.step_seconds);
  Plan as_it_stood = all.best.plan;
  as_it_stood.kept_internals = KeptInternals::WithNorms;
  EXPECT_EQ(plan_difference(as_it_stood, norms.best.plan), "the same plan");
  EXPECT_EQ(norms.best.plan.micro_batch, all.best.plan.micro_batch);
  EXPECT_EQ(norms.best.plan.sweeps, all.best.plan.sweeps);
  ASSERT_FALSE(all.alternatives.empty());
  EXPECT_EQ(plan_difference(all.alternatives.front().plan, norms.best.plan), "the same plan");
  // Where the best plan has no room left for the activation (400 GiB: every byte of it taken by
  // units updated on the GPU), it is not reshaped to make some, though a plan of another shape
  // keeping it fits there: such plans measured slower than predicted.
  const SearchResult filled = search_plans(config_, layout_, slow_cpu_fast_link(), request(400));
  EXPECT_EQ(filled.best.plan.kept_internals, KeptInternals::WithNorms) << filled.best.plan.describe();
  r.space.most_kept_internals = KeptInternals::Products;
  const SearchResult without = search_plans(config_, layout_, slow_cpu_fast_link(), r);
  EXPECT_EQ(without.best.plan.kept_internals, KeptInternals::Products);
  EXPECT_EQ(without.best.plan.describe().find("norms"), std::string::npos);
  EXPECT_LT(norms.best.prediction.step_seconds, without.best.prediction.step_seconds);
  // Where the internals take the whole budget, keeping more would not fit: not chosen.
  for (const KeptInternals kept : {KeptInternals::WithNorms, KeptInternals::WithActivation}) {
    Plan full = without.best.plan;
    const size_t limit =
        device_bytes(config_, layout_, full, without.best.shape.chunk_tokens, without.best.shape.chunks)
            .total();
    full.kept_internals = kept;
    EXPECT_GT(device_bytes(config_, layout_, full, without.best.shape.chunk_tokens, without.best.shape.chunks)
                  .total(),
              limit);
  }
}

// Where the profile times the head faster with its weight gradient over several logits chunks, the
// best plan takes it so where its device has the room for those chunks' logits as it stands
// (never reshaped for it), and says so; the plan without it is the first alternative, predicted
// slower. Not where the profile times it no faster (a file that did not measure it), and not when
// turned off (config group_head_weight_grad: false).
TEST_F(SearchTest, TheHeadsWeightGradientGoesOverSeveralChunksWhereTheBestPlanHasTheRoom) {
  MachineProfile faster = slow_cpu_fast_link();
  const auto quicker = [](const LinearTime& t) { return LinearTime{t.fixed_s, 0.9 * t.per_token_s}; };
  faster.compute.head_grouped = quicker(faster.compute.head);
  faster.compute.head_f32_grads_grouped = quicker(faster.compute.head_f32_grads);
  PlanRequest r = request(1000);
  const SearchResult grouped = search_plans(config_, layout_, faster, r);
  const Plan& best = grouped.best.plan;
  EXPECT_EQ(best.head_weight_grad_chunks, kHeadWeightGradChunks) << best.describe();
  EXPECT_NE(best.describe().find("the head's weight gradient over 4 logits chunks at once"),
            std::string::npos)
      << best.describe();
  ASSERT_FALSE(grouped.alternatives.empty());
  EXPECT_EQ(
      plan_difference(grouped.alternatives.front().plan, best),
      "the head's weight gradient one product per logits chunk instead of over 4 logits chunks at once");
  EXPECT_LT(grouped.best.prediction.step_seconds, grouped.alternatives.front().prediction.step_seconds);
  // It costs the device the chunks' logits, as the memory model counts them.
  const auto device = [&](const Plan& p, const StepShape& shape) {
    return device_bytes(config_, layout_, p, shape.chunk_tokens, shape.chunks);
  };
  EXPECT_EQ(device(best, grouped.best.shape).ops_workspace,
            cuda_ops_workspace_bytes(config_, grouped.best.shape.chunk_tokens,
                                     best.optimizer_on_gpu() ? DType::F32 : best.grad_dtype, best.head_groups,
                                     kHeadWeightGradChunks));
  // No faster by the profile (as a file of an older method loads): one product per chunk.
  const SearchResult same = search_plans(config_, layout_, slow_cpu_fast_link(), r);
  EXPECT_EQ(same.best.plan.head_weight_grad_chunks, 1) << same.best.plan.describe();
  EXPECT_EQ(same.best.plan.describe().find("logits chunks"), std::string::npos);
  r.space.group_head_weight_grad = false;
  const SearchResult off = search_plans(config_, layout_, faster, r);
  EXPECT_EQ(off.best.plan.head_weight_grad_chunks, 1) << off.best.plan.describe();
  EXPECT_EQ(plan_difference(off.best.plan, grouped.alternatives.front().plan), "the same plan");
  // Over budgets from a tight one up: the best plan takes the chunks exactly where they fit it as it
  // stands, and some budget leaves no room for them.
  int without_room = 0;
  for (size_t gib : {16, 20, 24, 32, 48, 1000}) {
    const SearchResult result = search_plans(config_, layout_, faster, request(gib));
    Plan p = result.best.plan;
    const size_t limit = static_cast<size_t>(0.95 * static_cast<double>(gib * kGiB));
    p.head_weight_grad_chunks = kHeadWeightGradChunks;
    const bool fits = device(p, result.best.shape).total() <= limit;
    EXPECT_EQ(result.best.plan.head_weight_grad_chunks, fits ? kHeadWeightGradChunks : 1)
        << gib << " GiB: " << result.best.plan.describe();
    without_room += !fits;
  }
  EXPECT_GT(without_room, 0);
}

// Where every boundary fits the GPU but no layer's internals do, a fast link makes offloading the
// first boundaries cheap, and the memory they free keeps the last layers' internals: the search
// trades them, offloading no more boundaries than the kept layers need, and the plan is predicted
// faster than the same plan recomputing those layers.
TEST_F(SearchTest, BoundariesAreTradedForInternalsWhenTheLinkIsFast) {
  // (The whole model resident, the step in sweeps holds one sequence's internals per layer and beats
  // both here: AWholeModelThatFitsRunsTheStepInSweeps.)
  PlanRequest r = request(kTradeBudgetGiB);
  r.space.sweeps = false;
  const MachineProfile compute_bound = machine(55e9, 20e9);
  const SearchResult result = search_plans(config_, layout_, compute_bound, r);
  const Plan& best = result.best.plan;
  const int64_t L = config_.num_layers;
  int64_t kept = 0, offloaded = 0;
  for (auto a : best.activations) {
    kept += a == ActivationPlacement::KeepWithInternals;
    offloaded += a == ActivationPlacement::OffloadToHost;
  }
  ASSERT_GT(kept, 0) << best.describe();
  ASSERT_GT(offloaded, 0) << best.describe();
  for (int64_t l = 0; l < L; ++l) {
    const ActivationPlacement a = best.activations[static_cast<size_t>(l)];
    EXPECT_EQ(a == ActivationPlacement::KeepWithInternals, l >= L - kept) << l;
    EXPECT_EQ(a == ActivationPlacement::OffloadToHost, l < offloaded) << l;
  }
  const size_t limit = static_cast<size_t>((1.0 - r.headroom) * static_cast<double>(r.device_budget));
  const auto device = [&](const Plan& p) {
    return device_bytes(config_, layout_, p, result.best.shape.chunk_tokens, result.best.shape.chunks)
        .total();
  };
  Plan fewer_offloaded = best;
  fewer_offloaded.activations[static_cast<size_t>(offloaded - 1)] = ActivationPlacement::KeepOnGpu;
  EXPECT_GT(device(fewer_offloaded), limit);
  Plan recomputing = best;
  for (auto& a : recomputing.activations)
    if (a == ActivationPlacement::KeepWithInternals) a = ActivationPlacement::KeepOnGpu;
  ASSERT_LE(device(recomputing), limit);
  EXPECT_LT(result.best.prediction.step_seconds,
            predict(config_, layout_, recomputing, compute_bound, result.best.shape).step_seconds);
}

// Asked for (it is off by default), with host memory to spare and a fast link, some of the layers
// that recompute send their internals to the host instead (the first ones, whose reloads have the most time),
// predicted faster than the same search without that choice; a host budget without room for one layer's
// internals keeps them all off the host.
TEST_F(SearchTest, SpareHostMemoryTakesLayersInternals) {
  PlanRequest r = request(kTradeBudgetGiB);
  r.space.per_unit_gpu_optimizer = false;
  r.space.internals_on_host = true;
  const MachineProfile compute_bound = machine(55e9, 20e9);
  const SearchResult with = search_plans(config_, layout_, compute_bound, r);
  const auto on_host = [](const Plan& p) {
    return std::count(p.activations.begin(), p.activations.end(), ActivationPlacement::OffloadWithInternals);
  };
  ASSERT_GT(on_host(with.best.plan), 0) << with.best.plan.describe();
  EXPECT_EQ(with.best.plan.activations[0], ActivationPlacement::OffloadWithInternals);
  r.space.internals_on_host = false;
  const SearchResult without = search_plans(config_, layout_, compute_bound, r);
  EXPECT_EQ(on_host(without.best.plan), 0);
  EXPECT_LT(with.best.prediction.step_seconds, without.best.prediction.step_seconds);
  r.space.internals_on_host = true;
  r.host_budget = without.best.prediction.host.total() + 1 * kGiB;
  const SearchResult tight = search_plans(config_, layout_, compute_bound, r);
  EXPECT_EQ(on_host(tight.best.plan), 0) << tight.best.plan.describe();
}

// Where the whole model fits the device but a whole step's internals beside it do not, the step
// runs in sweeps: every unit resident, the first layers with their optimizer on the GPU (the CPU
// updates the last ones, whose next forward comes latest), every boundary on the GPU, more layers
// keeping their internals than the best plan without sweeps, and predicted faster than it. A
// budget that cannot hold the whole model gets no sweeps.
TEST_F(SearchTest, AWholeModelThatFitsRunsTheStepInSweeps) {
  PlanRequest r = any_micro_batch(139);
  const SearchResult with = search_plans(config_, layout_, h200_like(), r);
  const Plan& best = with.best.plan;
  ASSERT_GT(best.sweeps, 1) << best.describe();
  EXPECT_EQ(with.best.shape.chunks % best.sweeps, 0);
  EXPECT_TRUE(sweeps_refusal(best).empty());
  int64_t on_gpu = 0;
  for (int64_t l = 0; l < config_.num_layers; ++l)
    on_gpu += best.units[layout_.layer_unit(l)] == UnitPlacement::ResidentWithOptimizer;
  EXPECT_GT(on_gpu, 0) << best.describe();
  for (int64_t l = 0; l < config_.num_layers; ++l)
    EXPECT_EQ(best.units[layout_.layer_unit(l)] == UnitPlacement::ResidentWithOptimizer, l < on_gpu) << l;
  const auto kept = [](const Plan& p) {
    return std::count_if(p.activations.begin(), p.activations.end(),
                         [](ActivationPlacement a) { return keeps_internals(a); });
  };
  r.space.sweeps = false;
  const SearchResult without = search_plans(config_, layout_, h200_like(), r);
  EXPECT_EQ(without.best.plan.sweeps, 1);
  EXPECT_GT(kept(best), kept(without.best.plan));
  EXPECT_LT(with.best.prediction.step_seconds, without.best.prediction.step_seconds);
  r.space.sweeps = true;
  r.device_budget = 24 * kGiB;
  EXPECT_EQ(search_plans(config_, layout_, h200_like(), r).best.plan.sweeps, 1);
}

// A plan in sweeps whose last layers the CPU updates: with clipping their update waits for the
// global norm and the next forward waits for it, so some of them are updated on the GPU over their
// state streamed from the host (the link's share beside the CPU's), spread among the CPU's, after
// the layers keeping their state on the GPU; predicted faster than without. A CPU that hides its
// pass keeps them all, and the search space's switch keeps them off.
TEST_F(SearchTest, SomeCpuLayersStreamTheirStateThroughTheGpuWhereTheNextForwardWaitsForThem) {
  PlanRequest r = any_micro_batch(120);
  const SearchResult with = search_plans(config_, layout_, h200_like(), r);
  const Plan& best = with.best.plan;
  ASSERT_GT(best.sweeps, 1) << best.describe();
  const int64_t streamed = best.streamed_optimizer_units();
  EXPECT_GT(streamed, 0) << best.describe();
  int64_t first_streamed = -1, last_gpu = -1, cpu_after = 0;
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    const UnitPlacement p = best.units[layout_.layer_unit(l)];
    if (p == UnitPlacement::ResidentWithOptimizer) last_gpu = l;
    if (p == UnitPlacement::ResidentWithStreamedOptimizer && first_streamed < 0) first_streamed = l;
    if (p == UnitPlacement::ResidentParams && first_streamed >= 0) ++cpu_after;
  }
  EXPECT_GT(first_streamed, last_gpu) << best.describe();
  EXPECT_GT(cpu_after, 0) << "the CPU's layers among the streamed ones: " << best.describe();
  r.space.streamed_optimizer = false;
  const SearchResult without = search_plans(config_, layout_, h200_like(), r);
  EXPECT_EQ(without.best.plan.streamed_optimizer_units(), 0);
  EXPECT_LT(with.best.prediction.step_seconds, without.best.prediction.step_seconds);
  // The CPU's busy time is what the link took off it.
  EXPECT_LT(with.best.prediction.busy[static_cast<int>(Lane::Cpu)],
            without.best.prediction.busy[static_cast<int>(Lane::Cpu)]);
  r.space.streamed_optimizer = true;
  const SearchResult fast_cpu = search_plans(config_, layout_, machine(55e9, 200e9), r);
  EXPECT_EQ(fast_cpu.best.plan.streamed_optimizer_units(), 0) << fast_cpu.best.plan.describe();
}

TEST_F(SearchTest, EverythingOnTheGpuWhenItFitsAndTheDeviceCan) {
  const ModelConfig toy = test::toy_shape();
  const ModelLayout layout = build_model_layout(toy);
  const MachineProfile toy_machine = test::round_profile(toy, 1024, 8192, 0.01, 20e9, 2e9, 100e9);
  PlanRequest r;
  r.seq_len = 1024;
  r.global_batch = 8;
  r.device_budget = 8 * kGiB;
  r.allow_optimizer_on_gpu = true;
  EXPECT_TRUE(search_plans(toy, layout, toy_machine, r).best.plan.optimizer_on_gpu());
  r.allow_optimizer_on_gpu = false;
  EXPECT_FALSE(search_plans(toy, layout, toy_machine, r).best.plan.optimizer_on_gpu());
}

// The smallest plan of the 8B shape streams everything through 2 slots sized to the 525 M-param
// embedding/head (2 x 525 M x (2 + 2) bytes = 3.9 GiB) and offloads every activation. The error
// names the budget that holds it with the 5% kept free, and that budget works.
TEST_F(SearchTest, AnImpossibleDeviceBudgetNamesTheSmallestThatWorks) {
  Plan lean;
  lean.gpu_slots = 2;
  lean.units.assign(layout_.units.size(), UnitPlacement::Streamed);
  lean.activations.assign(static_cast<size_t>(config_.num_layers), ActivationPlacement::OffloadToHost);
  const size_t minimum = device_bytes(config_, layout_, lean, kSeq, kGlobal).total();
  const size_t needed = static_cast<size_t>(std::ceil(static_cast<double>(minimum) / 0.95));
  PlanRequest r = request(1);
  try {
    search_plans(config_, layout_, fast_cpu_slow_link(), r);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("give gpu_memory of at least " + format_bytes(needed)), std::string::npos) << text;
  }
  EXPECT_THROW(check_device_budget(config_, layout_, r), Error);  // the same answer before any profile
  r.device_budget = needed;
  EXPECT_NO_THROW(search_plans(config_, layout_, fast_cpu_slow_link(), r));
  EXPECT_NO_THROW(check_device_budget(config_, layout_, r));
  r.device_budget = needed - 1;
  EXPECT_THROW(search_plans(config_, layout_, fast_cpu_slow_link(), r), Error);
}

// 8 G params of fp32 master, m and v are 96 GB of host memory before any pinned buffer.
TEST_F(SearchTest, AnImpossibleHostBudgetNamesTheSmallestThatWorks) {
  PlanRequest r = request(24);
  r.host_budget = 64 * kGiB;
  std::string text;
  try {
    search_plans(config_, layout_, fast_cpu_slow_link(), r);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    text = e.what();
  }
  const std::string key = "give host_memory of at least ";
  ASSERT_NE(text.find(key), std::string::npos) << text;
  EXPECT_EQ(text.find("gpu_memory of at least"), std::string::npos) << text;  // the device budget is fine
  // Host memory grows with the tokens of a step, not of a micro-chunk.
  EXPECT_NE(text.find("or lower global_batch or seq_len"), std::string::npos) << text;
  // The named budget is the least any plan that fits the device needs: every fitting plan needs at
  // least the optimizer state, and the search succeeds with the named amount.
  EXPECT_GT(static_cast<double>(
                host_bytes(config_, layout_,
                           search_plans(config_, layout_, fast_cpu_slow_link(), request(24)).best.plan, kSeq,
                           kGlobal)
                    .pageable),
            64.0 * static_cast<double>(kGiB));
}

// The bf16 host shadow costs 2 bytes/param of host memory and halves the upload bytes: taken
// whenever it fits. When only uploading the fp32 masters fits the host (the 8B's 14 bytes/param are
// 104.7 GiB, its 12 bytes/param 89.8 GiB), the search converts on upload, with the updates during
// the backward (with clipping it saves nothing, and the budget is refused).
TEST_F(SearchTest, ConvertsOnUploadOnlyWhereTheHostShadowDoesNotFit) {
  PlanRequest r = request(24);
  r.clipping = false;
  EXPECT_EQ(search_plans(config_, layout_, slow_cpu_fast_link(), r).best.plan.weight_upload,
            WeightUpload::HostShadow);
  r.host_budget = 100 * kGiB;
  const SearchResult tight = search_plans(config_, layout_, slow_cpu_fast_link(), r);
  EXPECT_EQ(tight.best.plan.weight_upload, WeightUpload::ConvertOnUpload) << tight.best.plan.describe();
  EXPECT_EQ(tight.best.plan.update, UpdateSchedule::DuringBackward);
  EXPECT_LE(host_bytes(config_, layout_, tight.best.plan, kSeq, kGlobal).total(), r.host_budget);
  Plan shadow = tight.best.plan;
  shadow.weight_upload = WeightUpload::HostShadow;
  EXPECT_GT(host_bytes(config_, layout_, shadow, kSeq, kGlobal).total(), r.host_budget);

  // With clipping every gradient waits for the norm: the budget is refused, and the refusal says
  // that training without clipping would fit.
  r.clipping = true;
  try {
    search_plans(config_, layout_, slow_cpu_fast_link(), r);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("give host_memory of at least"), std::string::npos) << e.what();
    EXPECT_NE(
        std::string(e.what()).find("or train without gradient clipping (max_grad_norm: 0), whose plans need"),
        std::string::npos)
        << e.what();
  }
  r.clipping = false;
  r.weight_upload = WeightUpload::HostShadow;  // a forced option is a constraint
  EXPECT_THROW(search_plans(config_, layout_, slow_cpu_fast_link(), r), Error);
}

TEST_F(SearchTest, AlternativesAreOtherPlansAndExplainTheDifference) {
  const SearchResult r = search_plans(config_, layout_, fast_cpu_slow_link(), request(24), 4);
  ASSERT_EQ(r.alternatives.size(), 4u);
  for (const Candidate& c : r.alternatives) {
    EXPECT_GE(c.prediction.step_seconds, r.best.prediction.step_seconds);
    EXPECT_NE(plan_difference(c.plan, r.best.plan), "the same plan");
    EXPECT_NE(c.explanation.find("instead of"), std::string::npos) << c.explanation;
    EXPECT_NE(c.explanation.find("bound by"), std::string::npos) << c.explanation;
  }
  EXPECT_GT(r.simulated, 100u);
}

TEST(DefaultHostBudget, LeavesTenPercentAtLeastFourGiB) {
  EXPECT_EQ(default_host_budget(512.0 * kGiB), static_cast<size_t>(0.9 * 512.0 * kGiB));
  EXPECT_EQ(default_host_budget(16.0 * kGiB), 12 * kGiB);
  EXPECT_EQ(default_host_budget(2.0 * kGiB), 1u);  // 0 would mean no limit
}

TEST(DefaultHostBudget, LeavesFivePercentOfWhatIsAvailableAtLeastTwoGiB) {
  EXPECT_EQ(default_host_budget_available(120 * kGiB), 114 * kGiB);
  EXPECT_EQ(default_host_budget_available(24 * kGiB), 22 * kGiB);
  EXPECT_EQ(default_host_budget_available(1 * kGiB), 1u);
}

}  // namespace
}  // namespace ferry
