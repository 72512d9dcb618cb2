#include "planner/step_program.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "optim/clip.h"
#include "planner/adamw_rate.h"
#include "planner/boundary_groups.h"
#include "planner/collective_cost.h"
#include "planner/disk_tier_layout.h"
#include "planner/head_groups.h"
#include "planner/memory_model.h"
#include "planner/sequence_tile.h"
#include "planner/slot_schedule.h"

namespace ferry {

namespace {

// The subject of a task that works on no unit (SimTask::subject -1).
constexpr size_t kNoSubject = static_cast<size_t>(-1);

// Mirrors SlidingEngine::step for several steps. Member names follow the engine's.
class ProgramBuilder {
 public:
  ProgramBuilder(const ModelConfig& config, const ModelLayout& layout, const Plan& plan,
                 const MachineProfile& profile, const StepShape& shape)
      : layout_(layout), plan_(plan), profile_(profile), shape_(shape), L_(config.num_layers) {
    devices_ = std::max<int64_t>(1, plan_.devices);
    collective_ = collective_rate(profile_);
    const size_t units = layout_.units.size();
    resident_.assign(units, false);
    gpu_optimizer_.assign(units, false);
    device_updated_.assign(units, false);
    streamed_state_.assign(units, false);
    for (size_t u = 0; u < units; ++u) {
      resident_[u] = plan_.units[u] != UnitPlacement::Streamed;
      gpu_optimizer_[u] = plan_.units[u] == UnitPlacement::ResidentWithOptimizer;
      device_updated_[u] = updated_on_device(plan_.units[u]);
      streamed_state_[u] = plan_.units[u] == UnitPlacement::ResidentWithStreamedOptimizer;
    }
    streamed_piece_ = static_cast<double>(gpu_optimizer_bytes(layout_, plan_).streamed_piece);
    all_on_gpu_ = plan_.optimizer_on_gpu();
    const double H = static_cast<double>(config.hidden_size),
                 F = static_cast<double>(config.intermediate_size);
    const double matrices =
        H * (2.0 * static_cast<double>(config.q_dim()) + 2.0 * static_cast<double>(config.kv_dim())) +
        3.0 * H * F;
    recompute_share_ = 1.0 - H * F / matrices;
    tiled_extra_share_ = tiled_backward_extra_share(config, shape_.chunk_tokens, plan_.seq_tile);
    grouped_extra_share_ = head_groups_backward_extra_share(config, plan_.head_groups);
    // What a layer that kept its internals still runs again (decoder_layer.h): two norms and the
    // activation, memory-bound passes moving (4H + 3F) values and two rstd per token, at the
    // device memory's rate as the GPU AdamW's shows it (it moves about 30 bytes per parameter).
    // Without a GPU AdamW rate they are taken as free (a few percent of the recompute they replace).
    // The norms' share (4H values and the two rstd) is what Plan::kept_internals WithNorms saves;
    // WithActivation saves the activation's write too (F values: the SwiGLU backward reads gate
    // and up either way, and writes the activation on its way unless it was kept).
    const double value = static_cast<double>(dtype_size(plan_.weight_dtype));
    const double norms_bytes = 4.0 * H * value + 8.0, activation_bytes = F * value;  // a token's
    kept_norms_share_ = norms_bytes / (norms_bytes + activation_bytes);
    if (profile_.compute.gpu_adamw_params_per_s > 0) {
      const double tokens = static_cast<double>(shape_.chunk_tokens);
      const double rate = kGpuAdamWBytesPerParam * profile_.compute.gpu_adamw_params_per_s;
      kept_norms_recompute_per_chunk_s_ = tokens * norms_bytes / rate;
      kept_activation_write_per_chunk_s_ = tokens * activation_bytes / rate;
      kept_layer_recompute_per_chunk_s_ = kept_norms_recompute_per_chunk_s_ + tokens * 3.0 * F * value / rate;
    }
    sweep_chunks_ = sweep_chunks(plan_, shape_.chunks);
    chunks_now_ = sweep_chunks_;
    groups_ = boundary_groups(plan_.activations, plan_.one_staging_buffer);
    const StepSequence sequence = step_sequence(L_, groups_.recomputed);
    uses_ = schedule_slots(sequence.units, resident_, std::max<int64_t>(1, plan_.gpu_slots));
    passes_ = sequence.passes;
    // What an offloaded boundary's and a layer's internals' copies move: one sweep's (a plan in
    // sweeps offloads none: sweeps_refusal).
    activation_bytes_ = static_cast<double>(sweep_chunks_ * shape_.chunk_tokens * config.hidden_size) *
                        static_cast<double>(dtype_size(plan_.weight_dtype));
    internals_bytes_ = static_cast<double>(sweep_chunks_) *
                       static_cast<double>(layer_internals_bytes(config, shape_.chunk_tokens,
                                                                 plan_.weight_dtype, plan_.kept_internals));
    reloads_ = internals_reloads(groups_.internals_on_host, uses_, passes_);
    upload_bytes_per_param_ = plan_.weight_upload == WeightUpload::ConvertOnUpload
                                  ? static_cast<double>(sizeof(float))
                                  : static_cast<double>(dtype_size(plan_.weight_dtype));
    cpu_adamw_rate_ = host_adamw_params_per_s(profile_.host, plan_);
    bool any_gpu_optimizer = false;
    for (bool g : device_updated_) any_gpu_optimizer |= g;
    FERRY_CHECK(
        !any_gpu_optimizer || profile_.compute.gpu_adamw_params_per_s > 0, "cost model",
        "the plan runs AdamW on the GPU but the profile of {} has no GPU AdamW rate (a device without one); "
        "plan with the optimizer on the CPU",
        profile_.device_name);
    // The disk tier (engine/disk_state_tier.h): each disk unit's update reads its state ahead and
    // writes it back behind, on the disk's one lane.
    disk_ = disk_tier_layout(layout_, plan_);
    if (!disk_.order.empty()) {
      FERRY_CHECK(profile_.host.disk_read_bytes_per_s > 0 && profile_.host.disk_write_bytes_per_s > 0,
                  "cost model",
                  "the plan keeps optimizer state on disk but the profile of {} has no disk rates; measure "
                  "them (ferry profile with disk_dir set) or plan without the disk tier (disk_memory: 0)",
                  profile_.device_name);
      disk_ahead_ = static_cast<int64_t>(std::min(disk_.slots, disk_.order.size()));
    }
    update_done_.assign(units, -1);
    last_read_.assign(units, -1);
    gradient_landing_ = gradient_landing(layout_, plan_);
    // The row-sparse embedding (unit_updater.h): the step's distinct token ids, expected for ids
    // drawn uniformly (real text repeats more, so this errs on the side of more rows).
    sparse_embedding_ = row_sparse_embedding(layout_, plan_);
    if (sparse_embedding_) {
      const double V = static_cast<double>(config.vocab_size);
      // The whole step's rows: every device's tokens (shape_ is one device's share).
      const double tokens = static_cast<double>(shape_.tokens() * devices_);
      const double rows = V * -std::expm1(tokens * std::log1p(-1.0 / V));
      embedding_row_params_ = rows * static_cast<double>(config.hidden_size);
    }
  }

  StepProgram build(int steps) {
    program_.graph.reserve(static_cast<size_t>(steps) * 12 * uses_.size());
    for (int s = 0; s < steps; ++s) step();
    return std::move(program_);
  }

 private:
  TaskGraph& graph() { return program_.graph; }
  double numel(size_t u) const { return static_cast<double>(layout_.units[u].numel); }
  // The profile's layer backward includes the recompute of the forward; a layer that kept its
  // internals skips most of it. Measured where the profile has it (layer_backward_kept); else the
  // forward less its last GEMM (down_proj, which the recompute does not run), that GEMM's share
  // taken as its share of the layer's weight-matrix FLOPs, and less the norms and activation it
  // runs again. Where it kept the norms' outputs (and the activation) as well, their passes (and
  // the activation's write) are taken off too.
  double layer_backward_seconds(int64_t layer) const {
    const ComputeProfile& compute = profile_.compute;
    const double backward = tiled_chunks_of(compute.layer_backward) +
                            (tiled_extra_share_ + grouped_extra_share_) * chunks_of(compute.layer_forward);
    if (!keeps_internals(plan_.activations[static_cast<size_t>(layer)])) return backward;
    const double chunks = static_cast<double>(chunks_now_);
    const double more_kept =
        (keeps_norm_outputs(plan_.kept_internals) ? chunks * kept_norms_recompute_per_chunk_s_ : 0.0) +
        (keeps_activation(plan_.kept_internals) ? chunks * kept_activation_write_per_chunk_s_ : 0.0);
    if (compute.layer_backward_kept.per_token_s > 0 && compute.layer_backward_kept_all.per_token_s > 0) {
      // Both ends measured: the passes between them shared out by the bytes each moves.
      const double kept = chunks_of(compute.layer_backward_kept),
                   all = chunks_of(compute.layer_backward_kept_all);
      const double share = keeps_activation(plan_.kept_internals)     ? 1.0
                           : keeps_norm_outputs(plan_.kept_internals) ? kept_norms_share_
                                                                      : 0.0;
      return std::max(0.0, kept - share * std::max(0.0, kept - all));
    }
    if (compute.layer_backward_kept.per_token_s > 0)
      return std::max(0.0, chunks_of(compute.layer_backward_kept) - more_kept);
    const double skipped = recompute_share_ * chunks_of(compute.layer_forward) -
                           chunks * kept_layer_recompute_per_chunk_s_ + more_kept;
    return std::max(0.0, backward - std::max(0.0, skipped));
  }
  // A use's compute over the micro-chunks of the sweep being built (the step's, in one sweep).
  double chunks_of(const LinearTime& t) const {
    return static_cast<double>(chunks_now_) * t.at(shape_.chunk_tokens);
  }
  // A layer's or the head's passes, run over the plan's sequence tiles (planner/sequence_tile.h).
  double tiled_chunks_of(const LinearTime& t) const {
    return static_cast<double>(chunks_now_) * tiled_seconds(t, shape_.chunk_tokens, plan_.seq_tile);
  }

  // Adds a task on `lane` after the stream waits issued on it and after the host's last block.
  // `subject`: the unit it works on, or an activation copy's boundary (SimTask::subject).
  int32_t add(Lane lane, TaskKind kind, size_t subject, double seconds, double bytes, int32_t dep = -1) {
    auto& waits = pending_[static_cast<int>(lane)];
    waits.push_back(dep);
    waits.push_back(host_last_);
    const int32_t id = graph().add(lane, kind, seconds, bytes, waits, static_cast<int32_t>(subject));
    waits.clear();
    if (lane == Lane::Compute) last_compute_ = id;
    return id;
  }
  void wait(Lane lane, int32_t event) {
    if (event >= 0) pending_[static_cast<int>(lane)].push_back(event);
  }
  void host_wait(int32_t event) {
    if (event < 0) return;
    const int32_t deps[] = {event, host_last_};
    host_last_ = graph().add(Lane::Host, TaskKind::HostWait, 0.0, 0.0, deps);
  }

  // The engine keeps fp32 gradients for units updated on the device (sliding_engine.h); the tied
  // head's weight gradient is the embedding's.
  bool head_has_f32_grads() const {
    const size_t E = layout_.embedding_unit(), Hd = layout_.head_unit();
    return all_on_gpu_ || gpu_optimizer_[Hd] || (layout_.tied && gpu_optimizer_[E]);
  }
  // The head's fused pass as the profile timed it for this plan's gradients and weight-gradient
  // product (Plan::head_weight_grad_chunks).
  const LinearTime& head_time() const {
    const ComputeProfile& c = profile_.compute;
    if (plan_.head_weight_grad_chunks > 1)
      return head_has_f32_grads() ? c.head_f32_grads_grouped : c.head_grouped;
    return head_has_f32_grads() ? c.head_f32_grads : c.head;
  }

  bool boundary_offloaded(int64_t b) const {
    return b < L_ && boundary_on_host(plan_.activations[static_cast<size_t>(b)]);
  }
  bool internals_on_host(int64_t l) const { return groups_.internals_staging[static_cast<size_t>(l)] >= 0; }
  size_t internals_staging_of(int64_t l) const {
    return static_cast<size_t>(groups_.internals_staging[static_cast<size_t>(l)]);
  }

  // The parameters a host unit's update at the step's end covers: the token rows alone for the
  // row-sparse embedding.
  double landed_update_params(size_t u) const {
    return sparse_embedding_ && u == layout_.embedding_unit() ? embedding_row_params_ : numel(u);
  }
  // After the step's upload of the row-sparse embedding, its rows without a gradient are updated.
  void weights_uploaded(size_t u, int32_t uploaded) {
    if (!sparse_embedding_ || u != layout_.embedding_unit()) return;
    add(Lane::Cpu, TaskKind::CpuAdamW, u, (numel(u) - embedding_row_params_) / cpu_adamw_rate_, 0.0,
        uploaded);
  }

  double devices_d() const { return static_cast<double>(devices_); }
  // Several devices: after a device's upload of its 1/N of unit u, the all-gather of the rest (on
  // the h2d stream, behind the upload); the task after which the slot holds the unit.
  int32_t gather_weights(size_t u, int32_t uploaded) {
    if (devices_ <= 1) return uploaded;
    return add(Lane::HostToDevice, TaskKind::WeightGather, u,
               all_gather_seconds(numel(u) * static_cast<double>(dtype_size(plan_.weight_dtype)), devices_,
                                  collective_),
               0.0);
  }

  void issue_load(size_t j) {
    const SlotUse& use = uses_[j];
    if (use.previous_use >= 0) wait(Lane::HostToDevice, released_[static_cast<size_t>(use.previous_use)]);
    const bool weights_read = use_reads_weights(uses_, j);
    if (weights_read) host_wait(update_done_[use.unit]);
    loaded_[j] = add(Lane::HostToDevice, TaskKind::WeightUpload, use.unit, 0.0,
                     weights_read ? numel(use.unit) * upload_bytes_per_param_ / devices_d() : 0.0);
    if (weights_read) loaded_[j] = gather_weights(use.unit, loaded_[j]);
    if (weights_read) weights_uploaded(use.unit, loaded_[j]);
  }
  void issue_loads_up_to(size_t limit) {
    while (next_load_ < uses_.size() && next_load_ <= limit) {
      const SlotUse& use = uses_[next_load_];
      if (use.load) {
        if (use.previous_use >= 0 && released_[static_cast<size_t>(use.previous_use)] < 0) return;
        issue_load(next_load_);
      }
      ++next_load_;
    }
  }
  void ensure_resident(size_t u) {
    if (!resident_[u] || resident_uploaded_[u] || gpu_optimizer_[u]) return;
    if (streamed_state_[u]) {  // DeviceOptimizer::streamed_update_done
      wait(Lane::Compute, update_done_[u]);
      resident_uploaded_[u] = true;
      return;
    }
    host_wait(update_done_[u]);
    wait(Lane::HostToDevice, last_read_[u]);
    const int32_t uploaded = gather_weights(u, add(Lane::HostToDevice, TaskKind::ResidentUpload, u, 0.0,
                                                   numel(u) * upload_bytes_per_param_ / devices_d()));
    wait(Lane::Compute, uploaded);
    weights_uploaded(u, uploaded);
    resident_uploaded_[u] = true;
  }
  void offload_boundary(int64_t b) {
    wait(Lane::DeviceToHost, last_compute_);
    const int32_t done =
        add(Lane::DeviceToHost, TaskKind::ActivationOffload, static_cast<size_t>(b), 0.0, activation_bytes_);
    offload_done_[static_cast<size_t>(b)] = done;
    staging_free_[staging_of(b)] = done;
  }
  size_t staging_of(int64_t b) const { return static_cast<size_t>(groups_.staging[static_cast<size_t>(b)]); }
  void before_boundary_write(int64_t b) {
    if (boundary_offloaded(b)) wait(Lane::Compute, staging_free_[staging_of(b)]);
  }
  void reload_boundary(int64_t b, int32_t staging_readers_done) {
    wait(Lane::HostToDevice, staging_readers_done);
    wait(Lane::HostToDevice, offload_done_[static_cast<size_t>(b)]);
    activation_back_[static_cast<size_t>(b)] =
        add(Lane::HostToDevice, TaskKind::ActivationReload, static_cast<size_t>(b), 0.0, activation_bytes_);
    staging_free_[staging_of(b)] = -1;
  }
  void await_boundary(int64_t b, int32_t before) {
    if (!boundary_offloaded(b)) return;
    if (activation_back_[static_cast<size_t>(b)] < 0) reload_boundary(b, before);
    wait(Lane::Compute, activation_back_[static_cast<size_t>(b)]);
  }
  // SlidingEngine::offload_internals and the internals' reloads, as the engine issues them.
  void before_internals_write(int64_t l) {
    wait(Lane::Compute, internals_staging_free_[internals_staging_of(l)]);
  }
  void offload_internals(int64_t l) {
    wait(Lane::BulkDeviceToHost, last_compute_);
    const int32_t done = add(Lane::BulkDeviceToHost, TaskKind::InternalsOffload, static_cast<size_t>(l), 0.0,
                             internals_bytes_);
    internals_offload_done_[static_cast<size_t>(l)] = done;
    internals_staging_free_[internals_staging_of(l)] = done;
  }
  void reload_internals(size_t k, int32_t readers_done) {
    const int64_t l = reloads_.layers[k];
    wait(Lane::BulkHostToDevice, readers_done);
    wait(Lane::BulkHostToDevice, internals_offload_done_[static_cast<size_t>(l)]);
    internals_back_[static_cast<size_t>(l)] =
        add(Lane::BulkHostToDevice, TaskKind::InternalsReload, static_cast<size_t>(l), 0.0, internals_bytes_);
    ++next_internals_reload_;
  }
  void prefetch_internals(size_t use, int32_t before) {
    const size_t ring = static_cast<size_t>(groups_.internals_staging_buffers);
    while (next_internals_reload_ < reloads_.layers.size()) {
      const size_t k = next_internals_reload_;
      if (k >= ring && reloads_.reader[k - ring] >= static_cast<int64_t>(use)) return;
      reload_internals(k, before);
    }
  }
  void await_internals(int64_t l, int32_t before) {
    if (!internals_on_host(l)) return;
    if (internals_back_[static_cast<size_t>(l)] < 0) {
      FERRY_ASSERT(reloads_.layers[next_internals_reload_] == l, "internals reload in backward order");
      reload_internals(next_internals_reload_, before);
    }
    wait(Lane::Compute, internals_back_[static_cast<size_t>(l)]);
  }

  // The updater's worker: one FIFO of landings (a host unit's gradient, or a device unit's norm
  // partials). It computes the global norm after the step's last landing (and, during the
  // backward, that landing's update); after the backward, the host units' updates follow in unit
  // order.
  void landing(size_t u, int32_t landed) {
    const bool host_unit = !device_updated_[u];
    int32_t last = add(Lane::Cpu, TaskKind::GradientLanded, u, 0.0, 0.0, landed);
    if (host_unit && plan_.update == UpdateSchedule::DuringBackward) {
      last = cpu_update(u, landed_update_params(u));
      next_update_done_[u] = last;
      if (gradient_landing_.in_ring[u]) ring_updates_.push_back(last);
    }
    norm_known_ = last;
    if (++landed_ < layout_.units.size() || plan_.update != UpdateSchedule::AfterBackward) return;
    for (size_t v = 0; v < layout_.units.size(); ++v)
      if (!device_updated_[v]) next_update_done_[v] = cpu_update(v, landed_update_params(v));
  }
  // The CPU AdamW of host unit u, after `dep`. A disk unit's update (DiskStateTier::acquire) waits
  // for its state's read, issued as far ahead as the tier's buffers allow -- a buffer is read into
  // once the write-back of its previous unit is done, and a unit once its own last write-back is --
  // and is followed by its write-back. The disk's DMA also takes host DRAM bandwidth from the
  // bandwidth-bound AdamW pass: at its rate the pass moves kCpuAdamWBytesPerParam bytes per
  // parameter, so each byte the disk moves costs the CPU lane 1 / (that x the rate) seconds.
  int32_t cpu_update(size_t u, double params, int32_t dep = -1) {
    double seconds = params / cpu_adamw_rate_;
    if (disk_.order.empty() || disk_.region_bytes[u] == 0)
      return add(Lane::Cpu, TaskKind::CpuAdamW, u, seconds, 0.0, dep);
    const int64_t j = disk_sequence_++;
    FERRY_ASSERT(disk_.order[static_cast<size_t>(j) % disk_.order.size()] == u,
                 "disk units are updated in the tier's order");
    while (static_cast<int64_t>(disk_read_.size()) < j + disk_ahead_) read_state(disk_read_.size());
    const double bytes = static_cast<double>(disk_.region_bytes[u]);
    seconds += 2.0 * bytes / (kCpuAdamWBytesPerParam * cpu_adamw_rate_);
    wait(Lane::Cpu, disk_read_[static_cast<size_t>(j)]);
    const int32_t updated = add(Lane::Cpu, TaskKind::CpuAdamW, u, seconds, 0.0, dep);
    const int32_t deps[] = {updated};
    disk_write_.push_back(graph().add(Lane::Disk, TaskKind::DiskWrite,
                                      bytes / profile_.host.disk_write_bytes_per_s, 0.0, deps,
                                      static_cast<int32_t>(u)));
    return updated;
  }
  // The read of the disk unit at position k of the repeating order (the tier's sequence number).
  void read_state(size_t k) {
    const size_t n = disk_.order.size(), u = disk_.order[k % n];
    std::vector<int32_t> deps;
    for (size_t back : {disk_.slots, n})  // the buffer's previous unit, the unit's previous round
      if (k >= back) deps.push_back(disk_write_[k - back]);
    disk_read_.push_back(
        graph().add(Lane::Disk, TaskKind::DiskRead,
                    static_cast<double>(disk_.region_bytes[u]) / profile_.host.disk_read_bytes_per_s, 0.0,
                    deps, static_cast<int32_t>(u)));
  }
  void gpu_adamw(size_t u) {
    next_update_done_[u] =
        add(Lane::Compute, TaskKind::GpuAdamW, u, numel(u) / profile_.compute.gpu_adamw_params_per_s, 0.0);
  }
  // DeviceOptimizer::stream_update, after what the bulk h2d lane was told to wait for: each piece's
  // master, m and v up once its ring slot's previous piece is down, updated there, and down.
  void stream_update(size_t u) {
    for (double begin = 0.0; begin < numel(u); begin += streamed_piece_) {
      const double count = std::min(streamed_piece_, numel(u) - begin), bytes = 3.0 * sizeof(float) * count;
      const size_t slot = next_state_slot_++ % kStreamedStateSlots;
      wait(Lane::BulkHostToDevice, state_slot_free_[slot]);
      const int32_t updated = add(Lane::BulkHostToDevice, TaskKind::StateUpload, u,
                                  count / profile_.compute.gpu_adamw_params_per_s, bytes);
      wait(Lane::BulkDeviceToHost, updated);
      state_slot_free_[slot] = add(Lane::BulkDeviceToHost, TaskKind::StateDownload, u, 0.0, bytes);
      next_update_done_[u] = updated;
    }
  }

  void step() {
    const size_t units = layout_.units.size(), uses = uses_.size();
    host_wait(tokens_free_);
    tokens_free_ = add(Lane::HostToDevice, TaskKind::TokenUpload, kNoSubject, 0.0,
                       static_cast<double>(kStepTokenArrays * shape_.tokens()) * sizeof(int32_t));
    wait(Lane::Compute, tokens_free_);

    loaded_.assign(uses, -1);
    released_.assign(uses, -1);
    next_load_ = 0;
    activation_back_.assign(static_cast<size_t>(L_), -1);
    offload_done_.assign(static_cast<size_t>(L_), -1);
    internals_back_.assign(static_cast<size_t>(L_), -1);
    internals_offload_done_.assign(static_cast<size_t>(L_), -1);
    next_internals_reload_ = 0;
    resident_uploaded_.assign(units, false);
    next_update_done_ = update_done_;
    landed_ = 0;
    norm_known_ = -1;
    const size_t prefetch = static_cast<size_t>(std::max<int64_t>(1, plan_.gpu_slots - 1));

    // SlidingEngine::run_sweeps: every use once per sweep; gradients leave after the last.
    int64_t begin = 0;
    do {
      chunks_now_ = std::min(sweep_chunks_, shape_.chunks - begin);
      begin += sweep_chunks_;
      sweep(uses, prefetch, /*last_sweep=*/begin >= shape_.chunks);
    } while (begin < shape_.chunks);
    chunks_now_ = sweep_chunks_;
    finish_step();
  }

  void sweep(size_t uses, size_t prefetch, bool last_sweep) {
    const size_t E = layout_.embedding_unit(), Hd = layout_.head_unit();
    const auto& compute = profile_.compute;
    for (size_t i = 0; i < uses; ++i) {
      issue_loads_up_to(i);
      const SlotUse& use = uses_[i];
      const size_t u = use.unit;
      if (use.slot >= 0) {
        for (size_t j = i + 1; j-- > 0;) {  // the load that put u in this slot
          if (uses_[j].slot == use.slot && uses_[j].load) {
            wait(Lane::Compute, loaded_[j]);
            break;
          }
        }
      }
      ensure_resident(u);
      if (layout_.tied && u == Hd) ensure_resident(E);
      const int32_t before = last_compute_;
      const bool forward = passes_[i] == UsePass::Forward;
      bool sends = false;
      if (u == E && forward) {
        before_boundary_write(0);
        add(Lane::Compute, TaskKind::EmbeddingForward, E, chunks_of(compute.embedding_forward), 0.0);
        if (boundary_offloaded(0)) offload_boundary(0);
      } else if (u == Hd) {
        add(Lane::Compute, TaskKind::Head, Hd, tiled_chunks_of(head_time()), 0.0);
        sends = last_sweep;
      } else if (u != E) {
        const int64_t l = static_cast<int64_t>(u) - 1;
        if (forward) {
          before_boundary_write(l + 1);
          if (internals_on_host(l)) before_internals_write(l);
          add(Lane::Compute, TaskKind::LayerForward, u, tiled_chunks_of(compute.layer_forward), 0.0);
          if (boundary_offloaded(l + 1)) offload_boundary(l + 1);
          if (internals_on_host(l)) offload_internals(l);
        } else if (passes_[i] == UsePass::Recompute) {  // SlidingEngine::recompute_boundary
          await_boundary(l, before);
          add(Lane::Compute, TaskKind::LayerForward, u, tiled_chunks_of(compute.layer_forward), 0.0);
        } else {
          await_boundary(l, before);
          await_internals(l, before);
          add(Lane::Compute, TaskKind::LayerBackward, u, layer_backward_seconds(l), 0.0);
          sends = last_sweep;
        }
      } else {
        add(Lane::Compute, TaskKind::EmbeddingBackward, E, chunks_of(compute.embedding_backward), 0.0);
        sends = last_sweep;
      }
      if (resident_[u]) last_read_[u] = last_compute_;
      if (layout_.tied && u == Hd) last_read_[E] = last_compute_;
      // A tied head's lm_head gradient sits in the embedding's buffer, sent with the embedding's.
      if (sends && device_updated_[u]) {
        // DeviceOptimizer::gradient_done: norm partials on the device (one double per 8Ki
        // elements); beside host units they go to the updater, and without clipping the unit is
        // updated at once.
        if (!all_on_gpu_) {
          wait(Lane::DeviceToHost, last_compute_);
          landing(u, add(Lane::DeviceToHost, TaskKind::GradientDownload, u, 0.0,
                         numel(u) / static_cast<double>(kGradNormChunk) * sizeof(double)));
          if (plan_.update == UpdateSchedule::DuringBackward && streamed_state_[u]) {
            wait(Lane::BulkHostToDevice, last_compute_);
            stream_update(u);
          } else if (plan_.update == UpdateSchedule::DuringBackward) {
            gpu_adamw(u);
          }
        }
        released_[i] = last_compute_;
      } else if (sends) {
        // SlidingEngine::send_gradients: the norm partials on the device, then the gradient (of
        // the row-sparse embedding: its token rows, gathered) and the partials down.
        // Several devices (SlidingEngine::send_gradient_shard): the gradient all-reduced first, and
        // each device sends its 1/N of it down.
        if (devices_ > 1)
          add(Lane::Compute, TaskKind::GradientReduce, u,
              all_reduce_seconds(numel(u) * static_cast<double>(dtype_size(plan_.grad_dtype)), devices_,
                                 collective_),
              0.0);
        add(Lane::Compute, TaskKind::GpuGradNorm, u, numel(u) / profile_.compute.grad_norm_params_per_s, 0.0);
        wait(Lane::DeviceToHost, last_compute_);
        // UnitUpdater::reserve_gradient_buffer: a ring buffer is free once the update of the
        // gradient before it there has read it.
        const size_t ring = gradient_landing_.ring_buffers;
        if (gradient_landing_.in_ring[u] && ring_updates_.size() >= ring)
          wait(Lane::DeviceToHost, ring_updates_[ring_updates_.size() - ring]);
        released_[i] =
            add(Lane::DeviceToHost, TaskKind::GradientDownload, u, 0.0,
                landed_update_params(u) * static_cast<double>(dtype_size(plan_.grad_dtype)) / devices_d() +
                    numel(u) * sizeof(double) / static_cast<double>(kGradNormChunk));
        landing(u, released_[i]);
      } else {
        released_[i] = last_compute_;
      }
      // Prefetch the boundary activation the next backward layer reads, while this unit computes --
      // or, with one staging buffer that this unit reads, once it has (boundary_groups.h).
      if (i + 1 < uses && i + 1 > static_cast<size_t>(L_) + 1) {
        const size_t next = uses_[i + 1].unit;
        if (next != E) {
          const int64_t l = static_cast<int64_t>(next) - 1;
          const bool reads_input = passes_[i] == UsePass::Backward || passes_[i] == UsePass::Recompute;
          const bool staging_busy = groups_.staging_buffers == 1 && reads_input && u != E &&
                                    u != layout_.head_unit() &&
                                    boundary_offloaded(static_cast<int64_t>(u) - 1);
          if (boundary_offloaded(l) && activation_back_[static_cast<size_t>(l)] < 0)
            reload_boundary(l, staging_busy ? last_compute_ : before);
        }
      }
      issue_loads_up_to(i + prefetch);
      // Internals on the host come back behind the weights, as early as their staging buffer allows.
      if (i > static_cast<size_t>(L_)) prefetch_internals(i, before);
    }
  }

  // After the last sweep: the GPU optimizer's updates (DeviceOptimizer::update_all: the norm and
  // the clip from every unit's partials on the device, then its units), the loss and the norm read.
  void finish_step() {
    const size_t units = layout_.units.size();
    const int32_t backward_done = last_compute_;
    // Every unit on the device: the loss is read after the updates (with the norm). Device units
    // beside host units, after the backward: updated ahead of the next step's forward without
    // waiting for the host's norm, the loss read once the backward is done.
    const bool beside_host = !all_on_gpu_ && plan_.update == UpdateSchedule::AfterBackward;
    if (all_on_gpu_ || beside_host)
      for (size_t u = 0; u < units; ++u)
        if (gpu_optimizer_[u]) gpu_adamw(u);
    // The streamed units after the clip coefficient (its sum and kernel are not modelled), in unit
    // order on the bulk lanes.
    if (beside_host && plan_.streamed_optimizer_units() > 0) {
      wait(Lane::BulkHostToDevice, backward_done);
      for (size_t u = 0; u < units; ++u)
        if (streamed_state_[u]) stream_update(u);
    }
    wait(Lane::DeviceToHost, all_on_gpu_ ? last_compute_ : backward_done);
    const int32_t loss =
        add(Lane::DeviceToHost, TaskKind::LossReadback, kNoSubject, 0.0, sizeof(float) + sizeof(double));
    host_wait(loss);
    if (!all_on_gpu_) host_wait(norm_known_);  // the step returns the global norm (UnitUpdater::grad_norm)
    program_.step_end.push_back(host_last_);
    update_done_ = next_update_done_;
  }

  const ModelLayout& layout_;
  const Plan& plan_;
  const MachineProfile& profile_;
  const StepShape shape_;
  const int64_t L_;
  std::vector<bool> resident_, gpu_optimizer_;
  // per unit: its AdamW on the device (updated_on_device); its state streamed through it
  std::vector<bool> device_updated_, streamed_state_;
  double streamed_piece_ = 0.0;  // parameters of a streamed-state piece (gpu_optimizer_bytes)
  bool all_on_gpu_ = false;
  std::vector<SlotUse> uses_;
  std::vector<UsePass> passes_;  // per use (step_sequence)
  BoundaryGroups groups_;        // recomputed boundaries, staging buffers
  double activation_bytes_ = 0.0, upload_bytes_per_param_ = 0.0;
  double internals_bytes_ = 0.0;      // one layer's internals, every micro-chunk of the step
  InternalsReloads reloads_;          // layers with internals on the host, in the backward's order
  double cpu_adamw_rate_ = 0.0;       // params/s of the host's AdamW pass for this plan
  double tiled_extra_share_ = 0.0;    // of a layer forward, what a tiled backward runs again besides
  double grouped_extra_share_ = 0.0;  // of a layer forward, what a backward in head groups runs again
                                      // (planner/head_groups.h)
  double recompute_share_ = 1.0;      // of a layer forward's time, what the backward's recompute takes
  // per micro-chunk: the passes a layer that kept its internals runs again
  double kept_layer_recompute_per_chunk_s_ = 0.0;
  double kept_norms_recompute_per_chunk_s_ = 0.0;   // its share of the two norms
  double kept_activation_write_per_chunk_s_ = 0.0;  // the activation's write in the SwiGLU backward
  // of what a layer keeping everything skips beyond one keeping the products' outputs, the norms'
  // share by the bytes (measured where the profile times both: layer_backward_kept_all)
  double kept_norms_share_ = 0.0;
  int64_t sweep_chunks_ = 1;                     // micro-chunks per sweep (Plan::sweeps)
  int64_t chunks_now_ = 1;                       // micro-chunks of the sweep being built
  bool sparse_embedding_ = false;                // row_sparse_embedding()
  DiskTierLayout disk_;                          // the disk tier's units and their bytes (none: empty)
  int64_t disk_ahead_ = 0;                       // reads in flight ahead of the update, at most
  int64_t disk_sequence_ = 0;                    // the next disk update's position in the repeating order
  std::vector<int32_t> disk_read_, disk_write_;  // per position: its read and its write-back
  double embedding_row_params_ = 0;              // its expected token rows' parameters per step
  int64_t devices_ = 1;                          // Plan::devices: this program is one device's
  CollectiveRate collective_;

  StepProgram program_;
  std::vector<int32_t> pending_[kLaneCount];  // stream waits not yet attached to a task
  int32_t host_last_ = -1, last_compute_ = -1;
  // across steps
  std::vector<int32_t> update_done_;   // per unit: the task that finished its update of the previous step
  std::vector<int32_t> last_read_;     // per resident unit: the last compute that read its weights
  GradientLanding gradient_landing_;   // ConvertOnUpload's gradient buffers
  std::vector<int32_t> ring_updates_;  // the CPU updates of the gradients that landed in the ring, in order
  int32_t staging_free_[2] = {-1, -1};
  int32_t internals_staging_free_[2] = {-1, -1};
  int32_t state_slot_free_[kStreamedStateSlots] = {-1, -1, -1};  // the ring's slots, as the engine's
  size_t next_state_slot_ = 0;
  int32_t tokens_free_ = -1;
  // per step
  std::vector<int32_t> loaded_, released_, activation_back_, offload_done_, next_update_done_;
  std::vector<int32_t> internals_back_, internals_offload_done_;
  size_t next_internals_reload_ = 0;
  std::vector<bool> resident_uploaded_;
  size_t next_load_ = 0, landed_ = 0;
  int32_t norm_known_ = -1;
};

}  // namespace

StepProgram build_step_program(const ModelConfig& config, const ModelLayout& layout, const Plan& plan,
                               const MachineProfile& profile, const StepShape& shape, int steps) {
  FERRY_CHECK(plan.units.size() == layout.units.size() &&
                  static_cast<int64_t>(plan.activations.size()) == config.num_layers,
              "cost model", "the plan does not match the model ({} units, {} layers)", layout.units.size(),
              config.num_layers);
  return ProgramBuilder(config, layout, plan, profile, shape).build(steps);
}

}  // namespace ferry
