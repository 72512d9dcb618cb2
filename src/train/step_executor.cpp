#include "train/step_executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <span>
#include <utility>

#include "core/clock.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "device/device.h"
#include "engine/device_group_engine.h"
#include "engine/model_step.h"
#include "engine/sliding_engine.h"
#include "engine/step_trace.h"
#include "engine/unit_optimizer.h"
#include "ops/device_ops.h"
#include "planner/memory_model.h"
#include "profiler/collective_profiler.h"
#include "train/device_choice.h"
#include "train/device_group.h"
#include "train/gemm_choice_cache.h"
#include "train/plan_selection.h"
#include "train/profile_cache.h"

namespace ferry {

namespace {

// `w` with every unit in RAM (the CPU backend steps the fp32 weights themselves).
ModelWeights loaded(ModelWeights w) {
  w.load_all();
  return w;
}

// The CPU backend in host memory: ModelStep + UnitOptimizer, the reference every schedule matches.
class PlainExecutor final : public StepExecutor {
 public:
  PlainExecutor(const TrainConfig& config, ModelWeights weights)
      : weights_(loaded(std::move(weights))),
        ops_(make_cpu_ops()),
        micro_batch_(config.micro_batch > 0 ? config.micro_batch : 1),  // auto: the CPU has no memory to plan
        // seq_tile auto: untiled, the CPU has no memory to plan (any tiling gives the same bits);
        // head_groups auto: one group, likewise.
        step_(weights_.config, weights_.layout, *ops_, micro_batch_ * config.seq_len,
              config.global_batch / micro_batch_, std::max<int64_t>(config.seq_tile, 0),
              std::max<int64_t>(config.head_groups, 1)),
        optimizer_(weights_.layout, config.decay_norms_and_biases, config.optimizer_state, config.seed) {
    for (const auto& u : weights_.layout.units) grads_.emplace_back(static_cast<size_t>(u.numel), 0.0f);
    // A lean format encodes the loaded weights; the forward then reads what it holds.
    optimizer_.assign_masters(masters());
  }
  std::string describe() const override {
    return fmt::format("cpu ({} threads, fp32 reference ops)", ThreadPool::global().size());
  }
  ExecutedStep step(int64_t step, const StepBatch& batch, const AdamWHyper& hyper,
                    double max_grad_norm) override {
    std::vector<float*> g;
    for (auto& b : grads_) g.push_back(b.data());
    const StepLoss loss = step_.run(masters(), g, batch);
    const UpdateStats stats =
        optimizer_.step(masters(), std::vector<const float*>(g.begin(), g.end()), hyper, max_grad_norm, step);
    return {loss.mean(), loss.counted_tokens, stats.grad_norm};
  }
  void finish_updates() override {}
  StepLoss evaluate(const StepBatch& batch) override { return step_.evaluate(masters(), batch); }
  std::vector<float*> masters() override { return pointers(weights_.units); }
  std::vector<float*> exp_avg() override { return pointers(optimizer_.m()); }
  std::vector<float*> exp_avg_sq() override { return pointers(optimizer_.v()); }
  OptimizerStateFormat state_format() const override { return optimizer_.format(); }
  std::vector<std::vector<std::span<std::byte>>> lean_state() override {
    std::vector<std::vector<std::span<std::byte>>> out;
    if (is_exact(optimizer_.format())) return out;
    for (size_t u = 0; u < weights_.units.size(); ++u) {
      out.emplace_back();
      for (auto& a : optimizer_.lean_arrays(u)) out.back().push_back(std::as_writable_bytes(std::span(a)));
    }
    return out;
  }
  void state_loaded(int64_t) override { optimizer_.read_masters(masters()); }
  int64_t micro_batch() const override { return micro_batch_; }

 private:
  static std::vector<float*> pointers(std::vector<std::vector<float>>& buffers) {
    std::vector<float*> out;
    for (auto& b : buffers) out.push_back(b.data());
    return out;
  }
  ModelWeights weights_;
  std::unique_ptr<Ops> ops_;
  int64_t micro_batch_;
  ModelStep step_;
  UnitOptimizer optimizer_;
  std::vector<std::vector<float>> grads_;
};

// The sliding engine on a device, or on a group of devices with one host state (`gpus: N`,
// engine/device_group_engine.h).
class SlidingExecutor final : public StepExecutor {
 public:
  // `attention`: the directions in which the engine's ops run ferry's own attention kernels, which
  // the profile found faster on this machine (attention_choice).
  SlidingExecutor(DeviceGroup group, const TrainConfig& config, ModelWeights weights, const Plan& plan,
                  const Prediction& predicted, const EvalPrediction& evaluation, AttentionChoice attention,
                  const HostProfile& host_profile, bool profile_of_this_machine)
      : group_(std::move(group)),
        device_(group_.devices.front().get()),
        trace_(config.trace.empty() ? nullptr
                                    : std::make_unique<StepTrace>(*device_, config.trace, config.trace_steps,
                                                                  static_cast<size_t>(config.trace_memory))),
        plan_(plan),
        predicted_(predicted),
        evaluation_(evaluation),
        host_profile_(host_profile),
        profile_of_this_machine_(profile_of_this_machine),
        layout_(weights.layout) {
    plan_.state_seed = config.seed;  // a lean format's stochastic rounding, as the plain trainer's
    // What the state commit spends its time on, said once it is done: an 8B's takes tens of
    // seconds before step 1.
    const auto start = std::chrono::steady_clock::now();
    auto lap_start = start;
    auto lap = [&lap_start] {  // seconds since the last lap
      const auto now = std::chrono::steady_clock::now();
      return std::chrono::duration<double>(now - std::exchange(lap_start, now)).count();
    };
    const int64_t chunk_tokens = plan_.micro_batch * config.seq_len,
                  chunks = config.global_batch / plan_.micro_batch;
    if (group_.devices.size() == 1) {
      ops_.push_back(make_device_ops(trace_ ? trace_->device() : *device_));
      ops_.back()->use_library_attention(!attention.own_forward, !attention.own_backward);
      gemm_choices_.lend(*ops_.back());
      engine_ = std::make_unique<SlidingEngine>(weights.config, weights.layout,
                                                trace_ ? trace_->device() : *device_, *ops_.front(), plan_,
                                                chunk_tokens, chunks, config.decay_norms_and_biases);
    } else {
      std::vector<Ops*> ops;
      for (auto& d : group_.devices) {
        d->bind_thread();  // the ops' library handles belong to the thread's current device
        ops_.push_back(make_device_ops(*d));
        ops_.back()->use_library_attention(!attention.own_forward, !attention.own_backward);
        gemm_choices_.lend(*ops_.back());
        ops.push_back(ops_.back().get());
      }
      group_engine_ = std::make_unique<DeviceGroupEngine>(
          weights.config, weights.layout, group_.device_pointers(), ops, group_.collective_pointers(), plan_,
          chunk_tokens, chunks, config.decay_norms_and_biases);
    }
    // Into the huge-page masters (or, for a disk unit, through the tier's buffer into its file),
    // freeing each copy as it goes. Deferred weights are read one unit at a time straight into the
    // fp32 masters where the state has them in RAM, else into one buffer (HostBytes::loaded_weights
    // counts the largest such unit) that assign_masters encodes or writes through the tier.
    const double buffers_s = lap();
    double load_s = 0.0, masters_s = 0.0;
    std::vector<float> unit_values;
    for (size_t u = 0; u < layout_.units.size(); ++u) {
      if (weights.deferred()) {
        if (const std::span<float> masters = host().masters_to_load(u); !masters.empty()) {
          weights.loader(u, masters);
          load_s += lap();
          continue;
        }
        unit_values.resize(static_cast<size_t>(layout_.units[u].numel));
        weights.loader(u, unit_values);
        load_s += lap();
        host().assign_masters(u, unit_values);
      } else {
        host().assign_masters(u, weights.units[u]);
        std::vector<float>().swap(weights.units[u]);
      }
      masters_s += lap();
    }
    std::vector<float>().swap(unit_values);
    host().commit_state();  // only now: the loaded copies are gone
    const double moments_s = lap();
    weights_changed(0);
    const double uploads_s = lap(), total_s = seconds_since(start);
    log_info(
        "state: ready in {:.1f} s (engine buffers and pinned memory {:.1f} s, reading the weights {:.1f} s, "
        "writing the masters {:.1f} s, committing the optimizer state {:.1f} s, upload copies {:.1f} s)",
        total_s, buffers_s, load_s, masters_s, moments_s, uploads_s);
  }
  ~SlidingExecutor() override {
    engine_.reset();
    group_engine_.reset();
  }
  std::string describe() const override {
    return group_.devices.size() == 1
               ? fmt::format("{}: {}", device_->name(), plan_.describe())
               : fmt::format("{} x {}: {}", group_.devices.size(), device_->name(), plan_.describe());
  }
  double predicted_step_seconds() const override { return predicted_.step_seconds; }
  EvalPrediction predicted_evaluation() const override { return evaluation_; }
  // Device 0's (each device of a group holds the same buffers for its share); the pinned memory of
  // every device, which one host holds.
  std::optional<DeviceMemoryUse> device_memory() const override {
    DeviceMemoryUse use{device_->memory(), device_->pinned_memory()};
    for (size_t r = 1; r < group_.devices.size(); ++r) {
      use.pinned.in_use += group_.devices[r]->pinned_memory().in_use;
      use.pinned.peak += group_.devices[r]->pinned_memory().peak;
    }
    return use;
  }
  ExecutedStep step(int64_t step, const StepBatch& batch, const AdamWHyper& hyper,
                    double max_grad_norm) override {
    if (trace_) trace_->begin(step);
    const SlidingStepResult r = engine_ ? engine_->step(step, batch, hyper, max_grad_norm)
                                        : group_engine_->step(step, batch, hyper, max_grad_norm);
    if (trace_) trace_->end();
    if (step == kMemoryReportStep) log_memory();
    for (const auto& ops : ops_) gemm_choices_.keep(*ops);
    return {r.loss, r.counted_tokens, r.grad_norm};
  }
  void finish_updates() override {
    if (engine_)
      engine_->finish_updates();
    else
      group_engine_->finish_updates();
  }
  StepLoss evaluate(const StepBatch& batch) override {
    return engine_ ? engine_->evaluate(batch) : group_engine_->evaluate(batch);
  }
  std::optional<CpuAdamWRates> cpu_adamw_rates() override {
    if (!is_exact(host().format())) return std::nullopt;
    const UnitUpdater::CpuUpdateRate r = host().cpu_update_rate();
    // A unit of fewer parameters than this has its state (14-16 bytes a parameter a pass) in a
    // large CPU's last-level cache, and its pass runs faster than the profile's from DRAM can.
    constexpr double kFromMemoryParams = double{1 << 24};
    if (r.seconds < 1.0 || r.smallest_unit_params < kFromMemoryParams) return std::nullopt;
    const double alone = host_profile_.cpu_adamw_params_per_s;
    return CpuAdamWRates{r.params / r.seconds, alone, alone * host_profile_.memory_sharing.cpu_beside_duplex,
                         profile_of_this_machine_};
  }
  std::vector<float*> masters() override {
    UnitUpdater& host = this->host();
    if (is_exact(host.format())) return collect(&HostUnitState::master);
    // A lean format's masters are decoded one tensor at a time as they are written
    // (streamed_state), not into 4 bytes/param of fp32 copies.
    return std::vector<float*>(host.unit_count(), nullptr);
  }
  std::vector<float*> exp_avg() override { return collect(&HostUnitState::m); }
  std::vector<float*> exp_avg_sq() override { return collect(&HostUnitState::v); }
  OptimizerStateFormat state_format() const override { return plan_.optimizer_state; }
  std::vector<std::vector<std::span<std::byte>>> lean_state() override {
    std::vector<std::vector<std::span<std::byte>>> out;
    UnitUpdater& host = this->host();
    if (is_exact(host.format())) return out;
    const std::vector<StateArraySpec> specs = state_arrays(host.format());
    for (size_t u = 0; u < host.unit_count(); ++u) {
      out.emplace_back();
      if (host.on_disk(u)) continue;  // streamed_state
      const size_t n = static_cast<size_t>(layout_.units[u].numel);
      for (size_t k = 0; k < specs.size(); ++k)
        out.back().push_back(
            std::span(host.unit(u).lean[k].as<std::byte>(), state_array_bytes(specs[k].kind, n)));
    }
    return out;
  }
  // The disk units' state through the tier's own RAM buffer (UnitUpdater::disk_state), which the
  // memory model counts: a checkpoint or a resume holds no copy of it. A save writes a disk unit's
  // weights from its upload copy (UnitUpdater::staged_weights) and reads its state once, for the
  // optimizer file, whose tensors come unit by unit (the tier keeps the unit it read last).
  //
  // A lean format's masters (every unit's) are decoded a piece at a time into one fp32 buffer
  // (planner/memory_model.h lean_save_scratch_bytes counts it).
  StreamedState streamed_state() override {
    UnitUpdater& host = this->host();
    const bool exact = is_exact(host.format());
    if (host.disk() == nullptr && exact) return {};
    StreamedState s;
    if (host.disk() != nullptr) {
      s.arrays = [&host](size_t u) { return host.disk_state(u); };
      s.store = [&host](size_t u) { host.disk_state_written(u); };
      s.fresh_arrays = [&host](size_t u) { return host.disk_state_new(u); };
      s.encoded = [&host](size_t u, DType dtype) {
        return host.on_disk(u) ? host.staged_weights(u, dtype) : nullptr;
      };
    }
    if (exact) {
      s.masters = [&host](size_t u, size_t offset, size_t) {
        return reinterpret_cast<const float*>(host.disk_state(u)[0].data()) + offset;
      };
    } else {
      s.masters = [this, &host](size_t u, size_t offset, size_t count) {
        decoded_tensor_.resize(count);
        host.read_masters(u, decoded_tensor_.data(), offset, offset + count);
        return static_cast<const float*>(decoded_tensor_.data());
      };
    }
    return s;
  }
  void state_loaded(int64_t step) override { weights_changed(step); }
  int64_t micro_batch() const override { return plan_.micro_batch; }

 private:
  // By step 3 every buffer exists (the ops' scratch grows during step 1, nothing is allocated per
  // step after), so the memory in use then is the run's peak, to set beside the planner's
  // prediction. The devices' own peak counters also include a profile measurement, when one ran.
  static constexpr int64_t kMemoryReportStep = 3;
  UnitUpdater& host() { return engine_ ? engine_->host() : group_engine_->host(); }
  void weights_changed(int64_t step) {
    if (engine_)
      engine_->weights_changed(step);
    else
      group_engine_->weights_changed(step);
  }
  void log_memory() const {
    const DeviceMemoryUse use = *device_memory();
    const MemoryStats device = use.device, pinned = use.pinned;
    log_info("memory in use after step {}: device {} (predicted {}), pinned {} (predicted {})",
             kMemoryReportStep, format_bytes(device.in_use), format_bytes(predicted_.device.total()),
             format_bytes(pinned.in_use), format_bytes(predicted_.host.pinned));
  }

  // fp32 state: the arrays `member` of every unit; nullptr for a disk unit (streamed_state).
  std::vector<float*> collect(HostArray HostUnitState::*member) {
    std::vector<float*> out;
    if (!is_exact(host().format())) return out;
    UnitUpdater& host = this->host();
    for (size_t u = 0; u < host.unit_count(); ++u)
      out.push_back(host.on_disk(u) ? nullptr : (host.unit(u).*member).data());
    return out;
  }
  DeviceGroup group_;                      // the devices (one, or `gpus`) and their collectives
  Device* device_;                         // the first
  std::unique_ptr<StepTrace> trace_;       // config `trace:`; nullptr without
  std::vector<std::unique_ptr<Ops>> ops_;  // per device
  GemmChoiceCache gemm_choices_;           // the GEMM algorithms runs before chose, and this run's
  Plan plan_;
  Prediction predicted_;
  EvalPrediction evaluation_;
  HostProfile host_profile_;  // the rates the plan took for the CPU AdamW
  bool profile_of_this_machine_ = true;
  ModelLayout layout_;
  std::unique_ptr<SlidingEngine> engine_;            // one device
  std::unique_ptr<DeviceGroupEngine> group_engine_;  // several
  std::vector<float> decoded_tensor_;  // a piece of a lean format's masters, as fp32, for writing
};

}  // namespace

std::unique_ptr<StepExecutor> make_step_executor(const TrainConfig& config, ModelWeights weights,
                                                 HostMemoryWatch* watch) {
  const DeviceChoice choice = choose_device(config, DeviceUse::Train);
  if (choice.kind == DeviceKind::Cpu) {
    FERRY_CHECK(config.trace.empty(), "trace",
                "the cpu backend has no streams to trace; trace with device: sim or cuda");
    return std::make_unique<PlainExecutor>(config, std::move(weights));
  }
  FERRY_CHECK(config.trace.empty() || choice.devices == 1, "trace",
              "trace records one device's streams; trace a run of gpus: 1");
  DeviceGroup group = join_devices(choice, make_chosen_devices(choice));
  Device* dev = group.devices.front().get();
  PlanTarget target = choice.target;
  target.device_budget = dev->memory().capacity - std::min(dev->memory().capacity, dev->memory().in_use);
  size_t weight_bytes = 0;  // deferred weights are read after planning, one unit at a time
  for (const auto& unit : weights.units) weight_bytes += unit.size() * sizeof(float);
  const HostBeside beside = fill_host_target(target, weight_bytes, true);
  fill_disk_target(target, config, true);
  // A budget no plan fits is refused before measuring a profile, which needs device memory too.
  check_device_budget(weights.config, weights.layout, plan_request(config, target, 0.0));
  MachineProfile profile;
  std::string source;
  bool from_file = false;
  AttentionChoice attention;
  {
    // Ops for measuring only, released (with their working memory) before the engine's.
    const std::unique_ptr<Ops> measuring = make_device_ops(*dev);
    ProfileOrigin origin = ProfileOrigin::Measured;
    profile = obtain_profile(config, weights.config, *dev, *measuring, {}, &origin);
    from_file = origin == ProfileOrigin::File;
    source = origin == ProfileOrigin::File    ? config.profile.string()
             : origin == ProfileOrigin::Cache ? fmt::format("{}, cached", profile.device_name)
                                              : fmt::format("{}, measured now", profile.device_name);
    attention = attention_choice(profile, *dev, *measuring);
    if (attention.any())
      log_info(
          "attention: {} on ferry's own kernels, which ran it faster in a layer than the library on this "
          "machine (the profile)",
          attention.own_directions());
  }
  if (group.devices.size() > 1 && profile.collective.bus_bytes_per_s <= 0) {
    // Measured here, with the devices at hand, where the profile has no rate: the planner charges
    // the gradients' all-reduce and the weights' all-gather at it (planner/collective_cost.h).
    std::vector<Collective*> compute;
    for (const auto& handles : group.collective_pointers())
      compute.push_back(handles[static_cast<size_t>(StreamKind::Compute)]);
    // The simulated devices' memory is host memory, which the planning phase holds to its plan:
    // a small buffer there (their rate is the host's memcpy, reached at a few MiB).
    const size_t bytes = choice.kind == DeviceKind::Sim ? size_t{8} << 20 : size_t{256} << 20;
    profile.collective = measure_collectives(group.device_pointers(), compute, bytes);
    log_info(
        "collectives over {} devices: all-reduce bus bandwidth {:.1f} GB/s, latency {:.0f} us (measured now)",
        profile.collective.devices, profile.collective.bus_bytes_per_s / 1e9,
        profile.collective.latency_s * 1e6);
  }
  const PlanSelection selection =
      select_plan(config, weights.config, weights.layout, target, std::move(profile), std::move(source));
  const Candidate& chosen = selection.result.best;
  log_info("{}", describe_selection(selection));
  log_info("predicted step time {:.4f} s ({:.0f} tokens/s): {}", chosen.prediction.step_seconds,
           chosen.prediction.tokens_per_second, chosen.explanation);
  for (const std::string& line : describe_advice(selection)) log_info("plan: {}", line);
  for (const std::string& line : describe_disk(selection)) log_info("plan: {}", line);
  const DeviceBytes& d = chosen.prediction.device;
  const HostBytes& h = chosen.prediction.host;
  log_info(
      "device memory plan: {} of {} (slots {}, resident {}, activations {}, scratch {}, ops workspace {})",
      format_bytes(d.total()), format_bytes(target.device_budget), format_bytes(d.slots),
      format_bytes(d.resident), format_bytes(d.activations), format_bytes(d.scratch),
      format_bytes(d.ops_workspace));
  log_info(
      "host memory plan: {} in all = optimizer state {} + pinned {} + beside the engine {} (runtime and data "
      "{} measured, {} allowed for later growth{}){}; budget {} ({})",
      format_bytes(h.total()), format_bytes(h.pageable), format_bytes(h.pinned), format_bytes(h.beside),
      format_bytes(beside.bytes - kHostGrowthAllowance), format_bytes(kHostGrowthAllowance),
      config.trace.empty()
          ? std::string()
          : fmt::format(", {} for the trace", format_bytes(static_cast<size_t>(config.trace_memory))),
      h.device > 0 ? fmt::format(" + the simulated device's {}", format_bytes(h.device)) : std::string(),
      format_bytes(selection.request.host_budget), selection.request.host_budget_source);
  if (h.start() > h.total())
    log_info(
        "host memory plan at the start: {} (the weights read one unit at a time into a {} fp32 buffer while "
        "the masters are written, before the moments)",
        format_bytes(h.start()), format_bytes(h.loaded_weights));
  if (watch != nullptr) {
    // Loading holds the weights in fp32 beside what the process had; every later phase holds the plan.
    watch->plan(kPhaseModelLoad, beside.weights + beside.bytes);
    for (const char* phase : kPhasesOfThePlan) watch->plan(phase, h.total());
    // The weights become the state unit by unit, the moments after the last (HostBytes::start).
    // Checkpoints and resumes stream the tier's state through its own buffer (streamed_state):
    // they hold the plan.
    watch->plan(kPhaseStateCommit, h.peak());
    watch->enter(kPhaseStateCommit);
  }
  return std::make_unique<SlidingExecutor>(std::move(group), config, std::move(weights), chosen.plan,
                                           chosen.prediction, selection.evaluation, attention,
                                           selection.profile.host, !from_file);
}

}  // namespace ferry
