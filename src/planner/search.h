// The plan search (DESIGN.md §3, planner/: profile → cost model → search → Plan): every plan the
// engine can run, within the device and host budgets and the options the user forced, ranked by
// the cost model's predicted step time. Pure function of numbers: the model's shape (config.json),
// the batch geometry, the budgets and a machine profile.
//
// The space, and why each axis is searched the way it is:
//   * micro-batch: the divisors of global_batch (or the one the config gives). Larger chunks cut
//     the fixed cost per chunk and grow the working memory (scratch, attention and logits).
//   * GPU slots for streamed units: 2..4 (SearchSpace::slot_counts). Slots are sized to the
//     largest streamed unit; more slots prefetch further ahead.
//   * embedding and head: streamed, resident, or resident with their optimizer on the GPU. They
//     are searched separately from the layers because they are the largest units (a 128k
//     vocabulary makes them 2.4x a Llama-8B layer): streaming either sizes every slot to it.
//   * resident layers, from the last one down: the last layers are used twice in a row around the
//     head (forward, then backward at once), so residency there removes uploads that nothing could
//     hide. Layers with their optimizer on the GPU are also tried from the first one up, with
//     updates after the backward: the next forward then starts on layers that wait for no CPU
//     update, while the CPU works ahead on the rest (the cost model weighs that against the
//     uploads). All resident layers have one kind (params, or params + GPU AdamW), unless the
//     config forces how many of them keep their optimizer on the GPU (the last ones).
//   * boundary activations: kept on the GPU for the last k layers, offloaded for the others. For
//     each choice above, k is the largest that fits: keeping one more never costs time (it only
//     removes a d2h and an h2d copy), so the search spends memory on residency or activations by
//     enumerating the resident count, and lets k take what is left.
//   * recompute or keep: once every boundary is on the GPU, memory still left keeps the last
//     layers' forward intermediates too (ActivationPlacement::KeepWithInternals), and their
//     backward skips the recompute. Like k, the count is the largest that fits: each such layer
//     saves the same compute, and resident layers and activations were enumerated first. Then
//     boundaries traded for internals: for each larger count of such layers, the same plan with
//     the fewest first boundaries offloaded that makes room (a layer's internals weigh about ten
//     boundaries), which the cost model weighs (the copies, their share of host DRAM) against the
//     recompute saved. Last, internals on the host: in each family's best plan, some of the
//     layers that still recompute (from the first one up, every one to every fourth one, counts
//     up to what the host budget holds) send their internals to pinned host memory after their
//     forward and fetch them back before their backward (OffloadWithInternals), which needs a
//     ring of one or two layers' internals on the GPU, made where needed by offloading the first
//     boundaries kept on the GPU, then by un-keeping the first layers' GPU internals; the cost
//     model weighs the copies (a layer's internals are ten boundaries) against the recompute.
//     Every plan that keeps internals is also weighed with the norms' outputs kept beside them
//     (Plan::kept_internals: 17-19% more per kept layer) where that still fits: two memory-bound
//     passes fewer in each such backward, which pays where memory is left over. The best plan
//     then keeps the activation as well (~30% more again) where it has the room as it stands,
//     and takes the head's weight gradient over several logits chunks
//     (Plan::head_weight_grad_chunks) where it still has the room for their logits.
//   * every K-th boundary kept, the others recomputed in the backward (planner/boundary_groups.h):
//     K is a family axis like the sequence tile, tried for long sequences (keep_every_candidates),
//     and for short ones where keeping every boundary costs the host's RAM: the best plan with
//     every boundary kept needs the disk tier, or none fits (search_plans searches again).
//     The kept boundaries are placed as above (the last ones on the GPU while they fit); the
//     recomputed ones cost K - 1 buffers on the GPU and K - 1 more layer forwards per K layers (and
//     the uploads the slots cannot save), and free host or GPU memory of L - L/K boundaries, which
//     long sequences need: at 128K tokens an 8B's boundaries are 1 GiB each. No layer keeps its
//     internals in such a plan.
//   * sweeps (Plan::sweeps): where the whole model can be resident, the step's micro-chunks also
//     run in 2 or more sweeps (every divisor of their count), each a forward and a backward of every
//     unit, the gradients summed on the GPU. The activations then hold one sweep's micro-chunks, so
//     the memory a whole step's would take keeps more layers' internals (no recompute) and the
//     layers' optimizer state: only the first sweep's forward can hide the CPU's update, so the
//     first layers keep their optimizer on the GPU (every count is tried) and the CPU updates the
//     others, whose forward comes later.
//   * update schedule: after the backward (overlapped with the next forward) always; during the
//     backward only without clipping (the global norm must be known before any update: exactness
//     first).
//   * weight upload: bf16 host shadow, or fp32 masters converted on upload (SearchSpace flag),
//     tried only where the shadow does not fit the host budget: for the same device memory it
//     moves 4 bytes per parameter instead of 2, so it is never faster.
//   * everything on the GPU (fp32 masters, AdamW state, GPU AdamW) when the device can and it fits.
//   * optimizer state on disk (PlanRequest::disk_budget): a plan that misses the host budget gets
//     the fewest layers' state on disk that brings it under, within the disk budget
//     (planner/disk_spill.h); the cost model charges the disk's time and its share of DRAM.
// What the engine does not do, the search does not offer: convert-on-upload stays out of the space
// until SearchSpace turns it on (the engine refuses it). The per-unit GPU optimizer is searched
// where the device has a GPU AdamW (train/plan_selection.cpp).
//
// Ranking: predicted step time, then less device memory. Since the candidates do not depend on the
// budgets (only which of them fit does), more budget never gives a slower plan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/unit_layout.h"
#include "planner/cost_model.h"
#include "planner/plan.h"
#include "planner/profile.h"

namespace ferry {

struct SearchSpace {
  std::vector<int64_t> slot_counts = {2, 3, 4};
  // Units whose fp32 state and AdamW live on the GPU while the others stream (ResidentWithOptimizer).
  bool per_unit_gpu_optimizer = false;
  // WeightUpload::ConvertOnUpload: fp32 masters pinned and uploaded, no bf16 shadow: less host
  // memory (without clipping) for twice the upload bytes; chosen only where the shadow does not
  // fit the host budget.
  bool convert_on_upload = true;
  // ActivationPlacement::KeepWithInternals for the last layers where memory is left.
  bool keep_internals = true;
  // The most Plan::kept_internals may keep where the memory holds it beside the products' outputs
  // (config keep_norm_outputs, keep_activation).
  KeptInternals most_kept_internals = KeptInternals::WithActivation;
  // Plan::head_weight_grad_chunks above 1 on the best plan where its device has the room (config
  // group_head_weight_grad).
  bool group_head_weight_grad = true;
  // ActivationPlacement::OffloadWithInternals for some of the other layers where the host has room.
  // Off unless asked for (config internals_on_host): on the H200 the plans it chose ran 2.8-3.6%
  // slower than without it, where the cost model predicted them up to 1.6% faster
  // (docs/performance.md, calls 15a-15b).
  bool internals_on_host = false;
  // Plan::sweeps above 1 where the whole model can be resident.
  bool sweeps = true;
  // UnitPlacement::ResidentWithStreamedOptimizer for some host-updated layers of a plan in sweeps
  // (config streamed_optimizer).
  bool streamed_optimizer = true;
};

struct PlanRequest {
  int64_t seq_len = 2048;
  int64_t global_batch = 8;            // sequences per step
  std::optional<int64_t> micro_batch;  // forced; unset: the search picks a divisor of global_batch
  // Devices sharing the step (Plan::devices): global_batch above is then each one's share.
  int64_t devices = 1;
  // Forced tokens per sequence tile (Plan::seq_tile; 0: untiled); unset: the search tries
  // planner/sequence_tile.h's candidates.
  std::optional<int64_t> seq_tile;
  // Forced: one boundary activation in this many kept, the others recomputed (1: all kept); unset:
  // the search tries keep_every_candidates.
  std::optional<int64_t> keep_every;
  // Forced groups of KV heads attention runs in (Plan::head_groups; 1: all heads at once); unset:
  // the search tries planner/head_groups.h's candidates.
  std::optional<int64_t> head_groups;
  // Forced sweeps of a step's micro-chunks (Plan::sweeps; 1: none); unset: the search tries every
  // divisor of the step's micro-chunks where the whole model can be resident.
  std::optional<int64_t> sweeps;
  size_t device_budget = 0;  // bytes the engine may allocate on the device
  double headroom = 0.05;    // fraction of the device budget left free
  size_t host_budget = 0;    // bytes of host memory (HostBytes::total); 0: no limit
  // Where host_budget comes from, for the refusal: "host_memory", or the default's source.
  std::string host_budget_source = "host_memory";
  // Host memory the process holds beside the engine's buffers (its runtime and libraries, the
  // tokenized data, what checkpoints are written through): in every plan's host total.
  size_t host_beside_engine = 0;
  // Bytes the disk tier may take (disk_memory, bounded by the free space under disk_dir); 0: no
  // disk tier.
  size_t disk_budget = 0;
  // Where disk_budget comes from, for the refusal: "disk_memory", or the free space that bounds it.
  std::string disk_budget_source = "disk_memory";
  // Forced: this many layers' optimizer state on disk (spread as planner/disk_spill.h spreads
  // them), whatever the host budget; unset: as few as the host budget needs.
  std::optional<int64_t> disk_layers;
  // The device's memory is host memory (the simulated device): a plan's device bytes count on the
  // host too.
  bool device_memory_on_host = false;
  DType weight_dtype = DType::BF16;
  DType grad_dtype = DType::BF16;
  bool clipping = true;
  std::optional<int64_t> slots;             // forced number of slots
  std::optional<bool> offload_activations;  // forced: all on the host (true) or all on the GPU (false)
  std::optional<int64_t> resident_layers;   // forced number of resident layers (from the last)
  // Forced: of the resident layers, this many (from the last) keep their optimizer on the GPU
  // (ResidentWithOptimizer), the others only their weights.
  std::optional<int64_t> gpu_optimizer_layers;
  std::optional<WeightUpload> weight_upload;  // forced weight upload
  std::optional<UpdateSchedule> update;       // forced update schedule (DuringBackward needs !clipping)
  bool allow_optimizer_on_gpu = false;        // the device can run AdamW (CUDA)
  // The host's optimizer state format (Plan::optimizer_state): a lean one leaves the GPU AdamW and
  // ConvertOnUpload out of the space.
  OptimizerStateFormat optimizer_state = OptimizerStateFormat::Fp32;
  SearchSpace space;
};

struct Candidate {
  Plan plan;
  StepShape shape;
  Prediction prediction;
  std::string explanation;  // what bounds it (Prediction::explain), and for an alternative how it differs
};

struct SearchResult {
  Candidate best;
  // The best plan of each other family (slots, micro-batch, update schedule, upload, where the
  // embedding, head and resident layers keep their optimizer, everything on the GPU), fastest first.
  std::vector<Candidate> alternatives;
  size_t simulated = 0;  // candidates that fit and were simulated
};

// Throws ferry::Error when no plan fits, naming the smallest device budget (gpu_memory) and host
// budget (host_memory) with which one does, and the disk budget (disk_memory) that would lower the
// host's. The profile must describe this model shape (the caller
// checks: train/profile_cache.h).
SearchResult search_plans(const ModelConfig& config, const ModelLayout& layout, const MachineProfile& profile,
                          const PlanRequest& request, size_t alternatives = 4);

// The best plan for `request`, or nothing where none fits its budgets: a what-if beside the plan
// chosen (planner/idle_advice.h, planner/disk_batch.h, a config's fixed micro-batch).
std::optional<Candidate> best_plan_if_any(const ModelConfig& config, const ModelLayout& layout,
                                          const MachineProfile& profile, const PlanRequest& request);

// Throws search_plans' refusal when not even the leanest plan fits the device budget. Needs no
// profile: a caller checks this before measuring one (which needs device memory of its own).
void check_device_budget(const ModelConfig& config, const ModelLayout& layout, const PlanRequest& request);

// The host memory a plan may use by default on a machine known only by its physical RAM (a
// profile of another machine): RAM less what the system and its other processes need -- 10% of
// it, at least 4 GiB. 512 GiB → 460.8 GiB; 64 GiB → 57.6 GiB; 16 GiB → 12 GiB; never 0 (which
// means no limit): 2 GiB → 1 byte, a budget no plan fits.
size_t default_host_budget(double physical_bytes);
// The same on this machine, from what it can give the run now (core/host_memory.h: MemAvailable,
// a cgroup's limit, and what the process holds): less a margin for what grows beside the run
// (the page cache of the files it writes, the kernel, other processes) -- 5% of it, at least
// 2 GiB. 120 GiB → 114 GiB; 24 GiB → 22 GiB; never 0.
size_t default_host_budget_available(size_t available_bytes);

// The K the search tries (one boundary in K kept): 1, and for sequences longer than
// kTiledFromSeqLen tokens (as sequence tiles; there one sequence's boundary weighs 64 MiB at 8B),
// or for any length where the host is the bound (`host_bound`), 2, 3, 4 and 8 (at most the layers).
std::vector<int64_t> keep_every_candidates(int64_t seq_len, int64_t layers, bool host_bound = false);

// "3 slots instead of 2, 20 resident layers instead of 24" (what `plan` changes from `reference`).
std::string plan_difference(const Plan& plan, const Plan& reference);

}  // namespace ferry
