#include "engine/sliding_engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "device/trace/trace_scope.h"
#include "optim/device_adamw.h"
#include "planner/boundary_groups.h"
#include "planner/memory_model.h"

namespace ferry {

namespace {

// The plan, once it is known to place every unit and boundary of this model.
const Plan& checked_plan(const Plan& plan, const ModelConfig& config, const ModelLayout& layout) {
  FERRY_CHECK(plan.units.size() == layout.units.size(), "engine",
              "the plan places {} units; the model has {}", plan.units.size(), layout.units.size());
  FERRY_CHECK(static_cast<int64_t>(plan.activations.size()) == config.num_layers, "engine",
              "the plan places {} boundary activations; the model has {} layers", plan.activations.size(),
              config.num_layers);
  FERRY_CHECK(
      !layout.tied || plan.units[layout.embedding_unit()] != UnitPlacement::Streamed, "engine",
      "tied embeddings are used by the first and the last unit: the plan must keep the embedding resident");
  // A recompute group's forwards write its boundaries through the shared scratch, which a layer
  // keeping its internals would have to own (the search never mixes them: planner/search.h).
  FERRY_CHECK(
      !(keeps_any_internals(plan) && recomputes_boundaries(plan)), "engine",
      "the plan keeps some layers' internals and recomputes some boundaries (keep_every > 1): a "
      "plan does one or the other; keep every boundary (keep_every: 1) or no internals (recompute: all)");
  // The streamed optimizer's pieces are a decoder layer's (the head and the embedding have a
  // gradient layout of their own: the row-sparse update, a tied head's gradient).
  for (size_t u = 0; u < layout.units.size(); ++u)
    FERRY_CHECK(plan.units[u] != UnitPlacement::ResidentWithStreamedOptimizer ||
                    layout.units[u].kind == UnitKind::Layer,
                "engine",
                "the plan streams the optimizer state of {} through the device: only decoder layers'",
                layout.units[u].name);
  const std::string sweeps = sweeps_refusal(plan);
  FERRY_CHECK(sweeps.empty(), "engine", "the plan runs {} sweeps, but {}", plan.sweeps, sweeps);
  return plan;
}

}  // namespace

SlidingEngine::SlidingEngine(const ModelConfig& config, const ModelLayout& layout, Device& device, Ops& ops,
                             const Plan& plan, int64_t chunk_tokens, int64_t max_chunks, bool decay_all,
                             const DeviceShare* share)
    : config_(config),
      layout_(layout),
      device_(device),
      ops_(ops),
      plan_(checked_plan(plan, config, layout)),
      boundaries_(boundary_groups(plan_.activations, plan_.one_staging_buffer)),
      chunk_tokens_(chunk_tokens),
      max_chunks_(max_chunks),
      roles_(layout_, plan_),
      buffers_(device_, config_, layout_, plan_, roles_, chunk_tokens_, max_chunks_),
      share_(share ? std::optional<DeviceShare>(*share) : std::nullopt) {
  const size_t E = layout_.embedding_unit(), Hd = layout_.head_unit();
  // The head writes the lm_head gradient of a tied model into the embedding's buffer, through one
  // view of one dtype.
  FERRY_CHECK(!layout_.tied || unit_grad_dtype(E) == unit_grad_dtype(Hd), "engine",
              "with tied embeddings the head and the embedding need one gradient dtype: place both "
              "ResidentWithOptimizer (fp32 gradients), or neither, or plan fp32 gradients");
  const StepSequence sequence = step_sequence(config_.num_layers, boundaries_.recomputed);
  uses_ = schedule_slots(sequence.units, roles_.resident, std::max<int64_t>(1, plan_.gpu_slots));
  passes_ = sequence.passes;
  reloads_ = internals_reloads(boundaries_.internals_on_host, uses_, passes_);
  if (buffers_.conversion_staging.bytes() > 0)
    weight_writer_ = make_device_adamw(device_, StreamKind::HostToDevice);
  if (buffers_.host_partial_count > 0) norm_partials_ = make_device_adamw(device_);
  if (share_) check_group_plan();
  if (share_ && !owns_host()) {
    updater_ = share_->host;
  } else {
    // A group's row gradients come from every device's share: one buffer of the updater's own,
    // sized for the group's step (no device's boundary buffer holds them).
    own_updater_ = std::make_unique<UnitUpdater>(
        device_, layout_, plan_, decay_all,
        max_embedding_rows(config_, chunk_tokens_, share_ ? share_->group_max_chunks : max_chunks_),
        share_ ? nullptr : buffers_.shared_row_gradients());
    updater_ = own_updater_.get();
  }
  if (share_) {
    landing_fence_ = DeviceBuffer(device_, sizeof(float), "landing fence");
    device_.fill_zero(landing_fence_.data(), sizeof(float), StreamKind::DeviceToHost);
  }
  last_read_.assign(layout_.units.size(), -1);
  if (roles_.any_device_updated())
    device_optimizer_ = std::make_unique<DeviceOptimizer>(device_, ops_, layout_, plan_, *updater_,
                                                          buffers_.resident_params, buffers_.resident_grads);
}

bool SlidingEngine::keeps_internals(int64_t layer) const {
  return ferry::keeps_internals(plan_.activations[static_cast<size_t>(layer)]);
}

bool SlidingEngine::internals_on_host(int64_t layer) const {
  return boundaries_.internals_staging[static_cast<size_t>(layer)] >= 0;
}

size_t SlidingEngine::internals_staging_of(int64_t layer) const {
  return static_cast<size_t>(boundaries_.internals_staging[static_cast<size_t>(layer)]);
}

LayerScratch SlidingEngine::layer_scratch(int64_t layer, int64_t step_chunk) const {
  if (!keeps_internals(layer)) return buffers_.layer_scratch;
  const int64_t chunk = step_chunk - sweep_begin_;  // the buffers hold the sweep's
  // An evaluation keeps nothing for a backward, and leaves the staging buffers alone.
  if (internals_on_host(layer) && evaluating_) return buffers_.layer_scratch;
  const LayerScratch& kept =
      internals_on_host(layer)
          ? buffers_.staged_internals[internals_staging_of(layer)][static_cast<size_t>(chunk)]
          : buffers_.kept_internals[static_cast<size_t>(layer)][static_cast<size_t>(chunk)];
  return with_kept_internals(kept, buffers_.layer_scratch);
}

DType SlidingEngine::unit_grad_dtype(size_t u) const {
  return roles_.grad_dtype(u, plan_);
}

SlidingEngine::~SlidingEngine() {
  try {
    device_.synchronize_all();
  } catch (...) {
    // Destructors never throw; the error was (or will be) reported by the call that caused it.
  }
}

void SlidingEngine::weights_changed(int64_t step) {
  // The caller replaced the host's masters (and m, v): nothing in flight may write them now, and
  // the device units' state is replaced, not downloaded.
  if (step_ > 0) updater_->wait_all_updated(step_);
  device_.synchronize_all();
  if (owns_host()) updater_->refresh_staging(step);
  step_ = step;
  if (device_optimizer_) device_optimizer_->upload_state();
}

void SlidingEngine::finish_updates() {
  if (step_ > 0) updater_->wait_all_updated(step_);
  if (device_optimizer_) device_optimizer_->download_state();
}

void* SlidingEngine::unit_params_ptr(size_t unit, int64_t slot) const {
  return roles_.resident[unit] ? buffers_.resident_params[unit].data()
                               : buffers_.slot_params[static_cast<size_t>(slot)].data();
}

void* SlidingEngine::unit_grads_ptr(size_t unit, int64_t slot) const {
  return roles_.resident[unit] ? buffers_.resident_grads[unit].data()
                               : buffers_.slot_grads[static_cast<size_t>(slot)].data();
}

// Boundary `b` is the input of layer b (b < L); b == L is the head's input.
Tensor SlidingEngine::activation(int64_t b, int64_t step_chunk) const {
  const int64_t L = config_.num_layers, T = chunk_tokens_, H = config_.hidden_size;
  const int64_t chunk = step_chunk - sweep_begin_;  // the buffers hold the sweep's
  const DType dt = plan_.weight_dtype;
  void* base;
  if (b == L)
    base = buffers_.head_input.data();
  else if (boundary_on_gpu(plan_.activations[static_cast<size_t>(b)]))
    base = buffers_.kept_activations[static_cast<size_t>(b)].data();
  else if (boundaries_.recomputed[static_cast<size_t>(b)])
    base =
        buffers_
            .recompute_activations[static_cast<size_t>(boundaries_.recompute_buffer[static_cast<size_t>(b)])]
            .data();
  else
    base = buffers_.staging_activations[staging_of(b)].data();
  return Tensor(static_cast<char*>(base) + static_cast<size_t>(chunk * T * H) * dtype_size(dt), dt, {T, H});
}

Tensor SlidingEngine::activation_grad(int64_t step_chunk) const {
  const int64_t T = chunk_tokens_, H = config_.hidden_size;
  const int64_t chunk = step_chunk - sweep_begin_;
  const DType dt = plan_.weight_dtype;
  return Tensor(
      static_cast<char*>(buffers_.chunk_grads.data()) + static_cast<size_t>(chunk * T * H) * dtype_size(dt),
      dt, {T, H});
}

void SlidingEngine::upload_when_updated(size_t u, void* device_dst) {
  if (!updater_->row_sparse(u) || share_) {
    updater_->wait_updated(u, weights_step());
    upload_weights(u, device_dst);
    return;
  }
  // The row-sparse embedding: each range of the table goes up as soon as the CPU has updated its
  // token rows (UnitUpdater::kRowRanges), the first ranges' copies beside the last ones' update.
  const int64_t rows = updater_->table_rows();
  const size_t row_len = static_cast<size_t>(layout_.units[u].numel / rows);
  int64_t begin = 0;
  for (int64_t r = 0; r < UnitUpdater::kRowRanges; ++r) {
    const int64_t end = UnitUpdater::row_range_end(rows, r);
    updater_->wait_rows_updated(weights_step(), end);
    upload_weights(u, device_dst, static_cast<size_t>(begin) * row_len, static_cast<size_t>(end) * row_len);
    begin = end;
  }
}

void SlidingEngine::upload_weights(size_t u, void* device_dst) {
  if (share_ && !evaluating_) return upload_weight_shard(u, device_dst);
  upload_weights(u, device_dst, 0, static_cast<size_t>(layout_.units[u].numel));
}

void SlidingEngine::upload_weights(size_t u, void* device_dst, size_t begin, size_t end) {
  const DType wd = plan_.weight_dtype;
  char* dst = static_cast<char*>(device_dst);
  if (!updater_->converts_on_upload()) {
    const char* staging = static_cast<const char*>(updater_->unit(u).staging.data());
    device_.copy_to_device(dst + begin * dtype_size(wd), staging + begin * dtype_size(wd),
                           (end - begin) * dtype_size(wd), StreamKind::HostToDevice);
    return;
  }
  // The fp32 masters go up piece by piece through the staging, each written as weights before the
  // next piece (same stream) overwrites it: the copy engine stays busy but for a short kernel per
  // 64 MiB piece.
  const float* master = updater_->unit(u).master.data();
  const size_t piece = buffers_.conversion_staging.bytes() / sizeof(float);
  for (size_t done = begin; done < end; done += piece) {
    const size_t k = std::min(piece, end - done);
    device_.copy_to_device(buffers_.conversion_staging.data(), master + done, k * sizeof(float),
                           StreamKind::HostToDevice);
    weight_writer_->write_weights(buffers_.conversion_staging.as<float>(), dst + done * dtype_size(wd), wd,
                                  k);
  }
}

void SlidingEngine::issue_load(size_t j) {
  const SlotUse& use = uses_[j];
  const TraceScope scope(device_, "load", layout_.units[use.unit].name);
  if (use.previous_use >= 0)
    device_.wait(StreamKind::HostToDevice, events_.released[static_cast<size_t>(use.previous_use)]);
  // The embedding's backward claims its slot (after the previous occupant's release) unfilled.
  const bool weights_read = use_reads_weights(uses_, j);
  if (weights_read) upload_when_updated(use.unit, buffers_.slot_params[static_cast<size_t>(use.slot)].data());
  events_.loaded[j] = device_.record(StreamKind::HostToDevice);
  if (weights_read && !evaluating_ && owns_host()) updater_->weights_uploaded(use.unit, events_.loaded[j]);
}

void SlidingEngine::issue_loads_up_to(size_t limit) {
  if (evaluating_) limit = std::min(limit, head_use());  // no backward follows
  while (events_.next_load < uses_.size() && events_.next_load <= limit) {
    const SlotUse& use = uses_[events_.next_load];
    if (use.load) {
      if (use.previous_use >= 0 && events_.released[static_cast<size_t>(use.previous_use)] < 0) return;
      issue_load(events_.next_load);
    }
    ++events_.next_load;
  }
}

EventId SlidingEngine::send_gradients(size_t unit, int64_t slot) {
  if (share_) return send_gradient_shard(unit, slot);
  const TraceScope scope(device_, "gradients", layout_.units[unit].name);
  const size_t bytes = static_cast<size_t>(layout_.units[unit].numel) * dtype_size(plan_.grad_dtype);
  const char* grads = static_cast<const char*>(unit_grads_ptr(unit, slot));
  // The previous step's copy of this slice left the device before that step returned (the d2h
  // stream is synchronized at every step's end), and the updater read the pinned slice before this
  // step's forward could pass the unit's update.
  double* partials = buffers_.host_unit_partials.as<double>() + buffers_.host_partial_offset[unit];
  const size_t count =
      issue_unit_norm_partials(*norm_partials_, layout_.units[unit], grads, plan_.grad_dtype, partials);
  const GradientBuffer landing = updater_->reserve_gradient_buffer(unit, StreamKind::DeviceToHost);
  if (updater_->row_sparse(unit)) {
    // Only the rows of the step's tokens carry a gradient: gathered (in the order of the step's
    // distinct ids) into the activation-gradient buffer, which the embedding's backward was the
    // last to read this step, and only they go down (unit_updater.h).
    const int64_t H = config_.hidden_size;
    const Tensor table = embedding_table(layout_, const_cast<char*>(grads), plan_.grad_dtype);
    const Tensor rows(buffers_.chunk_grads.data(), plan_.grad_dtype, {step_rows_, H});
    ops_.embedding_forward(step_row_ids_, table, rows);
    device_.wait(StreamKind::DeviceToHost, device_.record(StreamKind::Compute));
    device_.copy_to_host(landing.data, rows.data,
                         static_cast<size_t>(step_rows_ * H) * dtype_size(plan_.grad_dtype),
                         StreamKind::DeviceToHost);
  } else {
    device_.wait(StreamKind::DeviceToHost, device_.record(StreamKind::Compute));
    // Into the unit's weight staging (the backward's upload of these weights completed before the
    // compute that produced the gradient), or its gradient buffer, or the ring's next buffer once
    // it is free (unit_updater.h).
    device_.copy_to_host(landing.data, grads, bytes, StreamKind::DeviceToHost);
  }
  double* host_partials = buffers_.host_unit_partials_host.as<double>() + buffers_.host_partial_offset[unit];
  device_.copy_to_host(host_partials, partials, count * sizeof(double), StreamKind::DeviceToHost);
  const EventId landed = device_.record(StreamKind::DeviceToHost);
  updater_->gradient_landed(unit, landing, landed, host_partials, count);
  return landed;
}

SlidingStepResult SlidingEngine::step(int64_t step, const StepBatch& batch, const AdamWHyper& hyper,
                                      double max_grad_norm) {
  FERRY_ASSERT(!share_, "a device of a group runs its share of a step with the group's GroupStep");
  GroupStep group;
  group.counted_tokens = batch.counted_tokens();
  group.rows = distinct_ids(std::span<const int32_t>(batch.ids.data(), batch.ids.size()), config_.vocab_size);
  return run_step(step, batch, std::move(group), hyper, max_grad_norm);
}

SlidingStepResult SlidingEngine::step(int64_t step, const StepBatch& share, const GroupStep& group,
                                      const AdamWHyper& hyper, double max_grad_norm) {
  FERRY_ASSERT(share_.has_value(), "a step with a GroupStep is a device of a group's share");
  return run_step(step, share, group, hyper, max_grad_norm);
}

SlidingStepResult SlidingEngine::run_step(int64_t step, const StepBatch& batch, GroupStep group,
                                          const AdamWHyper& hyper, double max_grad_norm) {
  FERRY_ASSERT(step == step_ + 1, "steps must be consecutive");
  FERRY_ASSERT(batch.chunk_tokens() == chunk_tokens_ && batch.chunks() <= max_chunks_);
  FERRY_CHECK(
      max_grad_norm <= 0 || plan_.update == UpdateSchedule::AfterBackward, "engine",
      "gradient clipping needs the global norm before any update: use the after-backward update schedule");
  step_ = step;
  begin_step(batch, std::move(group), hyper, max_grad_norm);
  run_sweeps(uses_.size());
  return end_step(max_grad_norm);
}

void SlidingEngine::run_sweeps(size_t uses) {
  const int64_t per_sweep = sweep_chunks(plan_, max_chunks_);
  sweep_begin_ = 0;
  do {
    sweep_end_ = std::min(step_chunks_, sweep_begin_ + per_sweep);
    last_sweep_ = sweep_end_ == step_chunks_;
    for (size_t i = 0; i < uses; ++i) run_use(i);
    sweep_begin_ = sweep_end_;
  } while (sweep_begin_ < step_chunks_);
  sweep_begin_ = 0;
}

void SlidingEngine::begin_step(const StepBatch& batch, GroupStep group, const AdamWHyper& hyper,
                               double max_grad_norm) {
  const int64_t T = chunk_tokens_, L = config_.num_layers;
  const size_t stride = static_cast<size_t>(max_chunks_ * T);
  // This device's rows of the step's: all of them alone; in a group, its share (device_share.h).
  const RowShard mine = share_
                            ? row_shard(static_cast<int64_t>(group.rows.size()), share_->rank, share_->size)
                            : RowShard{0, static_cast<int64_t>(group.rows.size())};
  step_rows_ = mine.end - mine.begin;
  step_row_offset_ = mine.begin;
  FERRY_ASSERT(static_cast<size_t>(step_rows_) <= stride);

  upload_tokens(batch, std::vector<int32_t>(group.rows.begin() + mine.begin, group.rows.begin() + mine.end));
  counted_tokens_ = group.counted_tokens;
  if (owns_host()) updater_->begin_step(step_, hyper, max_grad_norm, std::move(group.rows));
  step_row_ids_ = buffers_.tokens.as<int32_t>() + 4 * stride;
  // A streamed-state unit's gradient is read by its last update until the compute stream waits
  // for it before the unit's first use: zeroed there (ensure_resident).
  for (size_t u = 0; u < roles_.resident.size(); ++u)
    if (roles_.resident[u] && plan_.units[u] != UnitPlacement::ResidentWithStreamedOptimizer)
      device_.fill_zero(buffers_.resident_grads[u].data(),
                        static_cast<size_t>(layout_.units[u].numel) * dtype_size(unit_grad_dtype(u)),
                        StreamKind::Compute);

  events_.reset(uses_.size(), static_cast<size_t>(L), roles_.resident.size());
  step_hyper_ = hyper;
}

void SlidingEngine::upload_tokens(const StepBatch& batch, const std::vector<int32_t>& rows) {
  const int64_t C = batch.chunks(), T = chunk_tokens_;
  const size_t n = static_cast<size_t>(C * T), stride = static_cast<size_t>(max_chunks_ * T);
  // Token arrays of the step, each (max_chunks * T): ids, targets, positions, doc_start, the
  // distinct ids, and the chunks' segment bounds (kStepTokenArrays).
  if (tokens_free_ >= 0) device_.synchronize(tokens_free_);
  int32_t* host = buffers_.tokens_host.as<int32_t>();
  std::memcpy(host, batch.ids.data(), n * 4);
  std::memcpy(host + stride, batch.targets.data(), n * 4);
  std::memcpy(host + 2 * stride, batch.positions.data(), n * 4);
  std::memcpy(host + 3 * stride, batch.doc_start.data(), n * 4);
  if (!rows.empty()) std::memcpy(host + 4 * stride, rows.data(), rows.size() * 4);  // none in an evaluation
  // A batch built by hand may have no segments; its chunks then claim none (below).
  const bool has_segments = batch.segment_bounds.size() == n;
  if (has_segments) std::memcpy(host + 5 * stride, batch.segment_bounds.data(), n * 4);
  device_.copy_to_device(buffers_.tokens.data(), host, kStepTokenArrays * stride * sizeof(int32_t),
                         StreamKind::HostToDevice);
  tokens_free_ = device_.record(StreamKind::HostToDevice);
  device_.wait(StreamKind::Compute, tokens_free_);
  device_.fill_zero(buffers_.loss.data(), sizeof(float), StreamKind::Compute);
  step_chunks_ = C;
  step_chunk_layouts_.resize(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    ChunkLayout& l = step_chunk_layouts_[static_cast<size_t>(c)];
    l.row_tokens = batch.row_tokens(c);
    l.segments = has_segments ? batch.segments(c) : 0;
    l.longest_segment = has_segments ? batch.longest_segment(c) : 0;
  }
  counted_tokens_ = batch.counted_tokens();
}

StepLoss SlidingEngine::evaluate(const StepBatch& batch) {
  FERRY_ASSERT(batch.chunk_tokens() == chunk_tokens_ && batch.chunks() <= max_chunks_);
  // The weights of every update issued so far: the host's, and the device units' (their update is
  // ahead on the compute stream).
  if (step_ > 0) updater_->wait_all_updated(step_);
  evaluating_ = true;
  upload_tokens(batch, {});
  events_.reset(uses_.size(), static_cast<size_t>(config_.num_layers), roles_.resident.size());
  try {
    run_sweeps(head_use() + 1);
  } catch (...) {
    evaluating_ = false;
    throw;
  }
  evaluating_ = false;
  device_.wait(StreamKind::DeviceToHost, device_.record(StreamKind::Compute));
  device_.copy_to_host(buffers_.loss_host.data(), buffers_.loss.data(), sizeof(float),
                       StreamKind::DeviceToHost);
  device_.synchronize(device_.record(StreamKind::DeviceToHost));
  StepLoss loss;
  loss.loss_sum = *buffers_.loss_host.as<float>();
  loss.counted_tokens = counted_tokens_;
  return loss;
}

TokenChunk SlidingEngine::chunk(int64_t c) const {
  const size_t stride = static_cast<size_t>(max_chunks_ * chunk_tokens_),
               o = static_cast<size_t>(c * chunk_tokens_);
  const int32_t* dev_tokens = buffers_.tokens.as<int32_t>();
  TokenChunk t;
  t.tokens = chunk_tokens_;
  t.ids = dev_tokens + o;
  t.targets = dev_tokens + stride + o;
  t.positions = dev_tokens + 2 * stride + o;
  t.doc_start = dev_tokens + 3 * stride + o;
  const ChunkLayout& l = step_chunk_layouts_[static_cast<size_t>(c)];
  t.row_tokens = l.row_tokens;
  t.segments = l.segments;
  if (t.segments > 0) {
    t.segment_bounds = dev_tokens + 5 * stride + o;
    t.longest_segment = l.longest_segment;
  }
  return t;
}

void SlidingEngine::ensure_resident(size_t u) {
  if (!roles_.resident[u] || events_.resident_uploaded[u]) return;
  if (roles_.device_updated[u]) {
    // Its weights are written on the device by its update; a streamed-state one's on a copy stream.
    const EventId updated = device_optimizer_->streamed_update_done(u);
    if (updated >= 0) device_.wait(StreamKind::Compute, updated);
    if (plan_.units[u] == UnitPlacement::ResidentWithStreamedOptimizer && !evaluating_)
      device_.fill_zero(buffers_.resident_grads[u].data(),
                        static_cast<size_t>(layout_.units[u].numel) * dtype_size(unit_grad_dtype(u)),
                        StreamKind::Compute);
    events_.resident_uploaded[u] = true;
    return;
  }
  // Overwrite the weights once the previous step's last reader is done, not after everything
  // issued so far: the upload then overlaps the compute of the units before this one.
  if (last_read_[u] >= 0) device_.wait(StreamKind::HostToDevice, last_read_[u]);
  upload_when_updated(u, buffers_.resident_params[u].data());
  const EventId uploaded = device_.record(StreamKind::HostToDevice);
  device_.wait(StreamKind::Compute, uploaded);
  if (!evaluating_ && owns_host()) updater_->weights_uploaded(u, uploaded);
  events_.resident_uploaded[u] = true;
}

bool SlidingEngine::boundary_offloaded(int64_t b) const {
  return b < config_.num_layers && boundary_on_host(plan_.activations[static_cast<size_t>(b)]);
}

bool SlidingEngine::reads_the_one_staging_buffer(size_t i) const {
  const size_t u = uses_[i].unit;
  const bool reads_its_input = passes_[i] == UsePass::Backward || passes_[i] == UsePass::Recompute;
  return boundaries_.staging_buffers == 1 && reads_its_input && u != layout_.embedding_unit() &&
         u != layout_.head_unit() && boundary_offloaded(static_cast<int64_t>(u) - 1);
}

size_t SlidingEngine::staging_of(int64_t b) const {
  return static_cast<size_t>(boundaries_.staging[static_cast<size_t>(b)]);
}

size_t SlidingEngine::boundary_bytes() const {
  return static_cast<size_t>((sweep_end_ - sweep_begin_) * chunk_tokens_ * config_.hidden_size) *
         dtype_size(plan_.weight_dtype);
}

void SlidingEngine::before_boundary_write(int64_t b) {
  if (boundary_offloaded(b) && events_.staging_free[staging_of(b)] >= 0)
    device_.wait(StreamKind::Compute, events_.staging_free[staging_of(b)]);
}

void SlidingEngine::offload_boundary(int64_t b) {
  const TraceScope scope(device_, "offload activation");
  device_.wait(StreamKind::DeviceToHost, device_.record(StreamKind::Compute));
  device_.copy_to_host(buffers_.host_activations[static_cast<size_t>(b)].data(),
                       buffers_.staging_activations[staging_of(b)].data(), boundary_bytes(),
                       StreamKind::DeviceToHost);
  events_.offload_done[static_cast<size_t>(b)] = device_.record(StreamKind::DeviceToHost);
  events_.staging_free[staging_of(b)] = events_.offload_done[static_cast<size_t>(b)];
}

void SlidingEngine::reload_boundary(int64_t b, EventId staging_readers_done) {
  const TraceScope scope(device_, "reload activation");
  device_.wait(StreamKind::HostToDevice, staging_readers_done);
  device_.wait(StreamKind::HostToDevice, events_.offload_done[static_cast<size_t>(b)]);
  device_.copy_to_device(buffers_.staging_activations[staging_of(b)].data(),
                         buffers_.host_activations[static_cast<size_t>(b)].data(), boundary_bytes(),
                         StreamKind::HostToDevice);
  events_.activation_back[static_cast<size_t>(b)] = device_.record(StreamKind::HostToDevice);
  events_.staging_free[staging_of(b)] = -1;
}

void SlidingEngine::await_boundary(int64_t b, EventId before) {
  if (!boundary_offloaded(b)) return;
  if (events_.activation_back[static_cast<size_t>(b)] < 0) reload_boundary(b, before);
  device_.wait(StreamKind::Compute, events_.activation_back[static_cast<size_t>(b)]);
}

size_t SlidingEngine::internals_step_bytes() const {
  return static_cast<size_t>(sweep_end_ - sweep_begin_) * buffers_.internals_bytes;
}

void SlidingEngine::offload_internals(int64_t l) {
  const TraceScope scope(device_, "offload internals");
  device_.wait(StreamKind::BulkDeviceToHost, device_.record(StreamKind::Compute));
  device_.copy_to_host(buffers_.host_internals[static_cast<size_t>(l)].data(),
                       buffers_.internals_staging[internals_staging_of(l)].data(), internals_step_bytes(),
                       StreamKind::BulkDeviceToHost);
  events_.internals_offload_done[static_cast<size_t>(l)] = device_.record(StreamKind::BulkDeviceToHost);
  events_.internals_staging_free[internals_staging_of(l)] =
      events_.internals_offload_done[static_cast<size_t>(l)];
}

void SlidingEngine::reload_internals(size_t k, EventId readers_done) {
  const TraceScope scope(device_, "reload internals");
  const int64_t l = reloads_.layers[k];
  device_.wait(StreamKind::BulkHostToDevice, readers_done);
  device_.wait(StreamKind::BulkHostToDevice, events_.internals_offload_done[static_cast<size_t>(l)]);
  device_.copy_to_device(buffers_.internals_staging[internals_staging_of(l)].data(),
                         buffers_.host_internals[static_cast<size_t>(l)].data(), internals_step_bytes(),
                         StreamKind::BulkHostToDevice);
  events_.internals_back[static_cast<size_t>(l)] = device_.record(StreamKind::BulkHostToDevice);
  ++events_.next_internals_reload;
}

void SlidingEngine::prefetch_internals(size_t use_index, EventId before) {
  // A staging buffer is free for the next layer's reload once the backward that read it before
  // (ring buffers back in the order) is done: a use before this one, which `before` follows.
  const size_t ring = static_cast<size_t>(boundaries_.internals_staging_buffers);
  while (events_.next_internals_reload < reloads_.layers.size()) {
    const size_t k = events_.next_internals_reload;
    if (k >= ring && reloads_.reader[k - ring] >= static_cast<int64_t>(use_index)) return;
    reload_internals(k, before);
  }
}

void SlidingEngine::await_internals(int64_t l, EventId before) {
  if (!internals_on_host(l)) return;
  if (events_.internals_back[static_cast<size_t>(l)] < 0) {
    FERRY_ASSERT(reloads_.layers[events_.next_internals_reload] == l, "internals reloaded in backward order");
    reload_internals(events_.next_internals_reload, before);
  }
  device_.wait(StreamKind::Compute, events_.internals_back[static_cast<size_t>(l)]);
}

void SlidingEngine::run_use(size_t i) {
  // The compute issued before this use, before it waits for its weights: what the staging buffer
  // of an internals reload waits for (prefetch_internals), no later.
  const EventId previous_compute = device_.record(StreamKind::Compute);
  issue_loads_up_to(i);
  const SlotUse& use = uses_[i];
  const size_t u = use.unit, E = layout_.embedding_unit(), Hd = layout_.head_unit();
  const int64_t L = config_.num_layers;
  const UsePass pass = passes_[i];
  const bool forward = pass == UsePass::Forward;
  const TraceScope scope(device_, layout_.units[u].name,
                         pass == UsePass::Head        ? "loss"
                         : forward                    ? "forward"
                         : pass == UsePass::Recompute ? "recompute"
                                                      : "backward");
  if (use.slot >= 0) {
    for (int64_t j = static_cast<int64_t>(i); j >= 0; --j) {  // the load that put u in this slot
      const SlotUse& prior = uses_[static_cast<size_t>(j)];
      if (prior.slot == use.slot && prior.load) {
        FERRY_ASSERT(prior.unit == u && events_.loaded[static_cast<size_t>(j)] >= 0);
        device_.wait(StreamKind::Compute, events_.loaded[static_cast<size_t>(j)]);
        break;
      }
    }
  }
  ensure_resident(u);
  if (layout_.tied && u == Hd) ensure_resident(E);
  const EventId before = device_.record(StreamKind::Compute);
  void* params = unit_params_ptr(u, use.slot);
  void* grads = unit_grads_ptr(u, use.slot);
  // Streamed units' gradients start from zero in their slot; resident ones were zeroed at the
  // step's start.
  const bool computes_gradients = pass == UsePass::Head || pass == UsePass::Backward;
  if (computes_gradients && !roles_.resident[u] && !evaluating_)
    device_.fill_zero(grads, static_cast<size_t>(layout_.units[u].numel) * dtype_size(unit_grad_dtype(u)),
                      StreamKind::Compute);
  // Every backward unit, the head included, has a gradient to send once the step's last sweep has
  // added its share; an evaluation has none.
  const bool sends = computes_gradients && !evaluating_ && last_sweep_;
  if (u == E && forward)
    embedding_forward(params);
  else if (u == Hd)
    head_step(params, grads);
  else if (u == E)
    embedding_backward(grads);
  else if (forward)
    decoder_forward(u, params);
  else if (pass == UsePass::Recompute)
    recompute_boundary(u, params, before);
  else
    decoder_backward(u, params, grads, before);
  release_use(i, sends);
  // Prefetch the boundary activation the next backward or recompute use reads, while this unit
  // computes -- or, with one staging buffer that this unit reads, once it has (boundary_groups.h).
  if (!evaluating_ && i + 1 < uses_.size() && i + 1 > static_cast<size_t>(L) + 1) {
    const size_t next = uses_[i + 1].unit;
    if (next != E) {
      const int64_t l = static_cast<int64_t>(next) - 1;
      if (boundary_offloaded(l) && events_.activation_back[static_cast<size_t>(l)] < 0)
        reload_boundary(l, reads_the_one_staging_buffer(i) ? device_.record(StreamKind::Compute) : before);
    }
  }
  issue_loads_up_to(i + static_cast<size_t>(std::max<int64_t>(1, plan_.gpu_slots - 1)));
  // Internals on the host come back behind the weights, as early as their staging buffer allows.
  if (!evaluating_ && i > static_cast<size_t>(L)) prefetch_internals(i, previous_compute);
}

void SlidingEngine::embedding_forward(void* params) {
  before_boundary_write(0);
  const Tensor table = embedding_table(layout_, params, plan_.weight_dtype);
  for (int64_t c = sweep_begin_; c < sweep_end_; ++c)
    ops_.embedding_forward(chunk(c).ids, table, activation(0, c));
  if (boundary_offloaded(0) && !evaluating_) offload_boundary(0);
}

void SlidingEngine::head_step(void* params, void* grads) {
  const float grad_scale = counted_tokens_ > 0 ? 1.0f / static_cast<float>(counted_tokens_) : 0.0f;
  const size_t E = layout_.embedding_unit(), Hd = layout_.head_unit();
  void* emb_params = roles_.resident[E] ? buffers_.resident_params[E].data() : nullptr;
  void* emb_grads = roles_.resident[E] ? buffers_.resident_grads[E].data() : nullptr;
  const HeadParams hp = head_params(layout_, params, emb_params, plan_.weight_dtype);
  const HeadParams hg =
      head_params(layout_, grads, emb_grads, unit_grad_dtype(Hd));  // E's dtype too (constructor)
  const Tensor loss(buffers_.loss.data(), DType::F32, {1});
  for (int64_t c = sweep_begin_; c < sweep_end_; ++c)
    head_forward_backward(ops_, config_, hp, evaluating_ ? nullptr : &hg, chunk(c),
                          activation(config_.num_layers, c), grad_scale, activation_grad(c),
                          buffers_.head_scratch, loss);
}

void SlidingEngine::decoder_forward(size_t u, void* params) {
  const int64_t l = static_cast<int64_t>(u) - 1;
  const LayerParams p = layer_params(layout_.units[u], params, plan_.weight_dtype);
  const LayerContext ctx{&config_, static_cast<const float*>(buffers_.inv_freq.data())};
  before_boundary_write(l + 1);
  const bool sends_internals = internals_on_host(l) && !evaluating_;
  const EventId staging_free = sends_internals ? events_.internals_staging_free[internals_staging_of(l)] : -1;
  if (staging_free >= 0) device_.wait(StreamKind::Compute, staging_free);
  for (int64_t c = sweep_begin_; c < sweep_end_; ++c) {
    LayerScratch s = layer_scratch(l, c);
    layer_forward(ops_, ctx, p, chunk(c), activation(l, c), activation(l + 1, c), s);
  }
  // The boundary first: the direction's copy engine takes copies in the order they are issued, and
  // the next forward's staging buffer waits for the boundary, not for the internals.
  if (boundary_offloaded(l + 1) && !evaluating_)
    offload_boundary(l + 1);  // an evaluation never reads it back
  if (sends_internals) offload_internals(l);
}

void SlidingEngine::recompute_boundary(size_t u, void* params, EventId before) {
  const int64_t l = static_cast<int64_t>(u) - 1;
  FERRY_ASSERT(boundaries_.recomputed[static_cast<size_t>(l + 1)],
               "a recompute use writes a recomputed boundary");
  await_boundary(l, before);
  const LayerParams p = layer_params(layout_.units[u], params, plan_.weight_dtype);
  const LayerContext ctx{&config_, static_cast<const float*>(buffers_.inv_freq.data())};
  for (int64_t c = sweep_begin_; c < sweep_end_; ++c) {
    LayerScratch s = layer_scratch(l, c);
    layer_forward(ops_, ctx, p, chunk(c), activation(l, c), activation(l + 1, c), s);
  }
}

void SlidingEngine::decoder_backward(size_t u, void* params, void* grads, EventId before) {
  const int64_t l = static_cast<int64_t>(u) - 1;
  await_boundary(l, before);
  const LayerParams p = layer_params(layout_.units[u], params, plan_.weight_dtype);
  const LayerParams g = layer_params(layout_.units[u], grads, unit_grad_dtype(u));
  await_internals(l, before);
  const LayerContext ctx{&config_, static_cast<const float*>(buffers_.inv_freq.data())};
  const Recompute recompute = keeps_internals(l) ? recompute_after(plan_.kept_internals) : Recompute::Forward;
  for (int64_t c = sweep_begin_; c < sweep_end_; ++c) {
    LayerScratch s = layer_scratch(l, c);
    layer_backward(ops_, ctx, p, g, chunk(c), activation(l, c), activation_grad(c), activation_grad(c), s,
                   recompute);
  }
}

void SlidingEngine::embedding_backward(void* grads) {
  const size_t E = layout_.embedding_unit();
  const Tensor dtable = embedding_table(layout_, grads, unit_grad_dtype(E));
  for (int64_t c = sweep_begin_; c < sweep_end_; ++c)
    ops_.embedding_backward(chunk(c).ids, activation_grad(c), dtable);
}

void SlidingEngine::release_use(size_t i, bool sends) {
  const SlotUse& use = uses_[i];
  const size_t u = use.unit, E = layout_.embedding_unit(), Hd = layout_.head_unit();
  if (roles_.resident[u]) last_read_[u] = device_.record(StreamKind::Compute);
  if (layout_.tied && u == Hd) last_read_[E] = device_.record(StreamKind::Compute);
  // A tied head's lm_head gradient sits in the embedding's buffer, sent with the embedding's.
  if (sends && roles_.device_updated[u]) {
    device_optimizer_->gradient_done(u, step_, step_hyper_);
    events_.released[i] = device_.record(StreamKind::Compute);
  } else if (sends) {
    events_.released[i] = send_gradients(u, use.slot);
  } else {
    events_.released[i] = device_.record(StreamKind::Compute);
  }
}

SlidingStepResult SlidingEngine::end_step(double max_grad_norm) {
  const AdamWHyper& hyper = step_hyper_;
  const bool all_on_device = plan_.optimizer_on_gpu();
  // Device units beside host units: clipped by the norm of every unit's partials summed on the
  // device, ahead of the next forward, without waiting for the host units' gradients to land; the
  // loss, complete with the backward, is read without waiting for those updates.
  const bool beside_host =
      device_optimizer_ && !all_on_device && plan_.update == UpdateSchedule::AfterBackward;
  const EventId backward_done = beside_host ? device_.record(StreamKind::Compute) : EventId{};
  if (all_on_device)
    device_optimizer_->update_all(step_, hyper, max_grad_norm);
  else if (beside_host)
    device_optimizer_->update_all(step_, hyper, max_grad_norm,
                                  {buffers_.host_unit_partials.as<double>(), &buffers_.host_partial_offset});
  if (share_) {  // the group's summed loss (in rank order)
    share_->on(StreamKind::Compute)
        .all_reduce(buffers_.loss.data(), buffers_.loss.data(), 1, DType::F32, StreamKind::Compute);
  }
  device_.wait(StreamKind::DeviceToHost, beside_host ? backward_done : device_.record(StreamKind::Compute));
  device_.copy_to_host(buffers_.loss_host.data(), buffers_.loss.data(), sizeof(float),
                       StreamKind::DeviceToHost);
  device_.synchronize(device_.record(StreamKind::DeviceToHost));
  SlidingStepResult result;
  result.counted_tokens = counted_tokens_;
  result.loss = result.counted_tokens > 0
                    ? *buffers_.loss_host.as<float>() / static_cast<double>(result.counted_tokens)
                    : 0.0;
  result.grad_norm = all_on_device ? device_optimizer_->read_norm() : updater_->grad_norm(step_);
  return result;
}

}  // namespace ferry
