// The machine profile measured on the simulated device with a tiny model: complete and plausible,
// the emulated PCIe bandwidth found again, the device's memory cap respected; and where a run's
// profile comes from (profile file, cache, measurement) with its failure modes.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "device/device.h"
#include "ops/device_ops.h"
#include "planner/head_groups.h"
#include "planner/sequence_tile.h"
#include "profiler/disk_rate.h"
#include "profiler/machine_profiler.h"
#include "test_util.h"
#include "train/model_init.h"
#include "train/profile_cache.h"

namespace ferry {
namespace {

constexpr int64_t kSeq = 32;

// One CPU thread for the reference ops: on a busy test machine a pool thread that is descheduled
// holds up every op at its barrier, so a sample's time says more about the scheduler than about
// the work; one thread is slowed in proportion at worst. Set before the pool's first use.
const bool kOneThread = (ThreadPool::set_global_threads(1), true);

// Small enough that a whole profile of the tiny model takes about a second. Five samples of at
// least 5 ms each: a busy test machine deschedules the process for milliseconds at a time, and the
// median must still see the undisturbed samples.
ProfileOptions quick_options() {
  ProfileOptions o;
  o.timing.repeats = 5;
  o.timing.min_sample_seconds = 0.005;
  o.timing.max_seconds = 0.5;
  o.cpu_adamw_timing = o.timing;
  o.copy_bytes = size_t{1} << 20;
  o.cpu_adamw_params = int64_t{1} << 20;
  o.gpu_adamw_params = int64_t{1} << 20;
  o.compute_soak_seconds = 0.0;
  o.memory_sharing_sample_seconds = 0.02;
  o.memory_sharing_repeats = 1;
  o.measure_disk = false;
  return o;
}

struct SimRig {
  explicit SimRig(const SimDeviceOptions& options = {})
      : device(make_sim_device(options)), ops(make_device_ops(*device)) {}
  std::unique_ptr<Device> device;
  std::unique_ptr<Ops> ops;
};

void expect_positive(double v, const char* what) {
  EXPECT_TRUE(std::isfinite(v) && v > 0.0) << what << " = " << v;
}

void expect_usable(const LinearTime& t, const char* what) {
  EXPECT_TRUE(std::isfinite(t.fixed_s) && t.fixed_s >= 0.0) << what << ".fixed_s = " << t.fixed_s;
  expect_positive(t.per_token_s, what);
}

// Captures what the log writes to stderr at warning level and above.
class LogCapture {
 public:
  LogCapture() : saved_(log_level()) {
    set_log_level(LogLevel::Warn);
    ::testing::internal::CaptureStderr();
  }
  ~LogCapture() {
    if (!taken_) ::testing::internal::GetCapturedStderr();
    set_log_level(saved_);
  }
  std::string take() {
    taken_ = true;
    return ::testing::internal::GetCapturedStderr();
  }

 private:
  LogLevel saved_;
  bool taken_ = false;
};

TEST(MachineProfiler, SimProfileIsCompleteAndPlausible) {
  const ModelConfig config = preset_config("llama", "tiny");
  SimRig rig;
  const MachineProfile p = measure_profile(*rig.device, *rig.ops, config, kSeq, quick_options());

  EXPECT_EQ(p.device_name, "sim");
  EXPECT_EQ(p.kernels, rig.ops->kernels());
  EXPECT_EQ(p.kernels, "cpu");  // the simulated device runs the fp32 reference ops
  EXPECT_EQ(p.weight_dtype, DType::F32);
  EXPECT_EQ(p.shape_key, model_shape_key(config, kSeq, DType::F32));
  EXPECT_EQ(p.seq_len, kSeq);
  EXPECT_EQ(p.device_memory_bytes, static_cast<double>(rig.device->memory().capacity));
  // What a run without gpu_memory would get, whatever this one's budget (the sim's default).
  EXPECT_EQ(p.device_uncapped_memory_bytes, static_cast<double>(SimDeviceOptions{}.memory_capacity));
  expect_usable(p.compute.layer_forward, "layer_forward");
  expect_usable(p.compute.layer_backward, "layer_backward");
  expect_usable(p.compute.layer_backward_kept, "layer_backward_kept");
  expect_usable(p.compute.head, "head");
  expect_usable(p.compute.embedding_forward, "embedding_forward");
  expect_usable(p.compute.embedding_backward, "embedding_backward");
  // How the times compare with each other is the machine's (on this 2-core host under load a
  // layer's backward came out faster than its forward, and one head 33x the other): the work each
  // pass issues is checked on a clock of its own below.
  expect_usable(p.compute.head_f32_grads, "head with fp32 gradients");
  // The simulated device runs the queued reference AdamW for units whose optimizer lives there.
  expect_positive(p.compute.gpu_adamw_params_per_s, "device adamw");
  expect_positive(p.transfer.h2d_bytes_per_s, "h2d");
  expect_positive(p.transfer.d2h_bytes_per_s, "d2h");
  expect_positive(p.transfer.duplex_h2d_bytes_per_s, "duplex h2d");
  expect_positive(p.transfer.duplex_d2h_bytes_per_s, "duplex d2h");
  EXPECT_TRUE(std::isfinite(p.transfer.latency_s) && p.transfer.latency_s >= 0.0);
  EXPECT_EQ(p.host.threads, static_cast<int>(ThreadPool::global().size()));
  expect_positive(p.host.cpu_adamw_params_per_s, "cpu adamw");
  expect_positive(p.host.memory_bytes, "memory");
  EXPECT_EQ(p.host.disk_read_bytes_per_s, 0.0);  // not asked for
  // The simulated copies are memcpys on threads of their own, beside the CPU AdamW's pool: how
  // much each slows the other depends on this machine, but each share is a fraction of a rate.
  EXPECT_TRUE(p.host.memory_sharing_measured);
  for (const double share :
       {p.host.memory_sharing.cpu_beside_copy, p.host.memory_sharing.cpu_beside_duplex,
        p.host.memory_sharing.copy_beside_cpu, p.host.memory_sharing.duplex_beside_cpu}) {
    EXPECT_GT(share, 0.0);
    EXPECT_LE(share, 1.0);
  }
  EXPECT_LE(rig.device->memory().peak, rig.device->memory().capacity);
  EXPECT_EQ(rig.device->memory().in_use, 0u) << "the measurement frees what it allocated";
  EXPECT_EQ(rig.device->pinned_memory().in_use, 0u);
}

// Ops that issue another Ops' work and count it: a clock that advances 1/1024 s (exact in binary,
// so equal work reads as equal times) per element of each op's activation (of its only tensor for
// add, zero and copy), per row and output feature of a product, and the weight-gradient buffers
// the head's cross-entropy was given. A pass timed on this clock costs a + b * tokens exactly, so
// the fits are lines, and how the passes compare says how much work each issues, whatever the
// machine's load; the same work split in sequence tiles (rows) or head groups (columns) counts the
// same.
class CountingOps final : public Ops {
 public:
  explicit CountingOps(Ops& inner) : inner_(inner) {}
  double seconds() const { return static_cast<double>(work_) / 1024.0; }
  const std::set<const void*>& head_weight_gradients() const { return head_weight_gradients_; }
  // How often a head call's weight-gradient buffer differed from the call's before it.
  int head_gradient_switches() const { return head_gradient_switches_; }

  const char* name() const override { return inner_.name(); }
  int calls_to_steady_speed() const override {
    return steady_calls_ > 0 ? steady_calls_ : inner_.calls_to_steady_speed();
  }
  // Says the ops reach their steady speed after `calls` calls of a problem (as the CUDA ops' GEMM
  // tuning does: each of a layer GEMM problem's first `calls` calls counts as a tuning call), and
  // counts the calls of each layer GEMM problem from now on.
  void reach_steady_speed_after(int calls) { steady_calls_ = calls; }
  int64_t tuning_calls() const override { return tuning_calls_; }
  // The fewest calls any layer GEMM problem (rows, output and input features) had.
  int64_t fewest_layer_gemm_calls() const {
    int64_t fewest = INT64_MAX;
    for (const auto& [problem, calls] : gemm_calls_) fewest = std::min(fewest, calls);
    return fewest;
  }
  std::string kernels() const override { return inner_.kernels(); }
  // As if the backend had a library's attention beside its own: while it is on for a direction
  // (from the start, as on the CUDA ops), an attention call of that direction counts the
  // library's work per element of q, else the own kernels'.
  struct AttentionWork {
    int64_t library_forward = 0, library_backward = 0, own_forward = 0, own_backward = 0;
  };
  void give_library_attention(const AttentionWork& work) { attention_work_ = work; }
  bool has_library_attention() const override { return attention_work_.library_forward > 0; }
  void use_library_attention(bool forward, bool backward) override {
    library_forward_ = forward;
    library_backward_ = backward;
    ++attention_switches_;
  }
  bool library_forward() const { return library_forward_; }
  bool library_backward() const { return library_backward_; }
  int attention_switches() const { return attention_switches_; }
  void embedding_forward(const int32_t* ids, Tensor table, Tensor out) override {
    count(out).embedding_forward(ids, table, out);
  }
  void embedding_backward(const int32_t* ids, Tensor dout, Tensor dtable) override {
    count(dout).embedding_backward(ids, dout, dtable);
  }
  void rmsnorm_forward(Tensor x, Tensor weight, float eps, Tensor out, Tensor rstd) override {
    count(x).rmsnorm_forward(x, weight, eps, out, rstd);
  }
  void rmsnorm_backward(Tensor x, Tensor weight, Tensor rstd, Tensor dout, Tensor dresidual, Tensor dx,
                        Tensor dweight) override {
    count(x).rmsnorm_backward(x, weight, rstd, dout, dresidual, dx, dweight);
  }
  void rope(Tensor x, const int32_t* positions, const float* inv_freq, bool inverse) override {
    count(x).rope(x, positions, inv_freq, inverse);
  }
  void attention_forward(Tensor q, Tensor k, Tensor v, AttentionMask mask, float scale, Tensor out,
                         Tensor lse) override {
    count_attention(q, true).attention_forward(q, k, v, mask, scale, out, lse);
  }
  void attention_backward(Tensor q, Tensor k, Tensor v, AttentionMask mask, float scale, Tensor out,
                          Tensor lse, Tensor dout, Tensor dq, Tensor dk, Tensor dv) override {
    count_attention(q, false).attention_backward(q, k, v, mask, scale, out, lse, dout, dq, dk, dv);
  }
  void attention_cached(Tensor q, Tensor k, Tensor v, float scale, Tensor out) override {
    count(q).attention_cached(q, k, v, scale, out);
  }
  void swiglu_forward(Tensor gate, Tensor up, Tensor out) override {
    count(gate).swiglu_forward(gate, up, out);
  }
  void swiglu_backward(Tensor gate, Tensor up, Tensor dout, Tensor dgate, Tensor dup, Tensor out) override {
    count(gate).swiglu_backward(gate, up, dout, dgate, dup, out);
  }
  void linear_forward(Tensor x, Tensor w, Tensor bias, Tensor residual, Tensor y) override {
    if (++gemm_calls_[{x.shape[0], w.shape[0], w.shape[1]}] <= steady_calls_) ++tuning_calls_;
    count(x, w.shape[0]).linear_forward(x, w, bias, residual, y);
  }
  void linear_backward(Tensor x, Tensor w, Tensor dy, Tensor dx, Tensor dw, Tensor dbias,
                       bool accumulate_dx) override {
    count(x, w.shape[0]).linear_backward(x, w, dy, dx, dw, dbias, accumulate_dx);
  }
  void linear_cross_entropy(Tensor x, Tensor w, const int32_t* targets, float grad_scale, Tensor dx,
                            Tensor dw, Tensor loss_sum, Tensor logits, int64_t weight_grad_chunks) override {
    head_weight_gradients_.insert(dw.data);
    if (last_head_gradient_ != nullptr && dw.data != last_head_gradient_) ++head_gradient_switches_;
    last_head_gradient_ = dw.data;
    count(x).linear_cross_entropy(x, w, targets, grad_scale, dx, dw, loss_sum, logits, weight_grad_chunks);
  }
  void add(Tensor a, Tensor b, Tensor out) override { count(a).add(a, b, out); }
  void zero(Tensor x) override { count(x).zero(x); }
  void copy(Tensor src, Tensor dst) override { count(src).copy(src, dst); }

 private:
  Ops& count(const Tensor& elements_of) {
    work_ += elements_of.numel();
    return inner_;
  }
  Ops& count_attention(const Tensor& q, bool forward) {
    if (!has_library_attention()) return count(q);
    const AttentionWork& w = attention_work_;
    const int64_t per_element = forward ? (library_forward_ ? w.library_forward : w.own_forward)
                                        : (library_backward_ ? w.library_backward : w.own_backward);
    work_ += q.numel() * per_element;
    return inner_;
  }
  Ops& count(const Tensor& x, int64_t out_features) {
    work_ += x.shape[0] * out_features;
    return inner_;
  }

  Ops& inner_;
  int64_t work_ = 0;  // issued from the measuring thread only
  int steady_calls_ = 0;
  int64_t tuning_calls_ = 0;
  std::map<std::array<int64_t, 3>, int64_t> gemm_calls_;
  std::set<const void*> head_weight_gradients_;
  const void* last_head_gradient_ = nullptr;
  int head_gradient_switches_ = 0;
  AttentionWork attention_work_;  // give_library_attention; library_forward 0: no library
  bool library_forward_ = true, library_backward_ = true;
  int attention_switches_ = 0;
};

// quick_options() timed on `ops`'s counting clock. The device AdamW issues no ops: its time on
// that clock is 0, so its array is kept small.
ProfileOptions counting_options(const CountingOps& ops) {
  ProfileOptions options = quick_options();
  options.timing.clock = [&ops] { return ops.seconds(); };
  options.gpu_adamw_params = 64 * 64;
  return options;
}

// measure_compute of the tiny llama on the counting clock, with a library's attention beside the
// own kernels doing `work` (none where work.library_forward is 0): the profile, and which
// attention the ops run after it.
struct AttentionRun {
  ComputeProfile profile;
  bool library_forward = true, library_backward = true;
  int switches = 0;
};
AttentionRun measure_with_library_attention(const CountingOps::AttentionWork& work) {
  SimRig rig;
  CountingOps ops(*rig.ops);
  ops.give_library_attention(work);
  const ProfileOptions options = counting_options(ops);
  AttentionRun r;
  r.profile = measure_compute(*rig.device, ops, preset_config("llama", "tiny"), kSeq, options);
  r.library_forward = ops.library_forward();
  r.library_backward = ops.library_backward();
  r.switches = ops.attention_switches();
  return r;
}

// Where the ops have a library's attention beside their own, the layer is timed with each: for each
// direction the faster is chosen, the profile says which, its times are those of the choice (timed
// once more where the two directions choose differently), and the ops are left running it. Within
// the margin the library's stays. Without a library nothing is switched.
TEST(MachineProfiler, TimesTheLayerWithEachAttentionAndKeepsTheFasterForEachDirection) {
  const AttentionRun slow_library = measure_with_library_attention({3, 3, 1, 1});
  EXPECT_TRUE(slow_library.profile.own_attention_forward);
  EXPECT_TRUE(slow_library.profile.own_attention_backward);
  EXPECT_FALSE(slow_library.library_forward) << "the ops run the faster attention after the profile";
  EXPECT_FALSE(slow_library.library_backward);
  EXPECT_EQ(slow_library.switches, 2);
  const AttentionRun fast_library = measure_with_library_attention({1, 1, 3, 3});
  EXPECT_FALSE(fast_library.profile.own_attention_forward);
  EXPECT_FALSE(fast_library.profile.own_attention_backward);
  EXPECT_TRUE(fast_library.library_forward && fast_library.library_backward);
  EXPECT_EQ(fast_library.switches, 2);
  // The library's forward, the own backward: each direction its faster, timed together once more.
  const AttentionRun mixed = measure_with_library_attention({1, 3, 3, 1});
  EXPECT_FALSE(mixed.profile.own_attention_forward);
  EXPECT_TRUE(mixed.profile.own_attention_backward);
  EXPECT_TRUE(mixed.library_forward);
  EXPECT_FALSE(mixed.library_backward);
  const AttentionRun same = measure_with_library_attention({2, 2, 2, 2});
  EXPECT_FALSE(same.profile.own_attention_forward || same.profile.own_attention_backward)
      << "no faster: the library's stays";
  EXPECT_TRUE(same.library_forward && same.library_backward);
  const AttentionRun none = measure_with_library_attention({});
  EXPECT_FALSE(none.profile.own_attention_forward || none.profile.own_attention_backward);
  EXPECT_EQ(none.switches, 0) << "nothing to choose without a library";
  for (const int64_t T : {kSeq, 2 * kSeq, 4 * kSeq}) {
    // The kept times are those of the faster attention in each direction: one unit of work a q
    // element in every case but `same` (two), the same work either way.
    for (const AttentionRun* r : {&fast_library, &mixed}) {
      EXPECT_DOUBLE_EQ(r->profile.layer_forward.at(T), slow_library.profile.layer_forward.at(T)) << T;
      EXPECT_DOUBLE_EQ(r->profile.layer_backward_kept_all.at(T),
                       slow_library.profile.layer_backward_kept_all.at(T))
          << T;
      EXPECT_DOUBLE_EQ(r->profile.layer_backward.at(T), slow_library.profile.layer_backward.at(T)) << T;
    }
    EXPECT_LT(slow_library.profile.layer_forward.at(T), same.profile.layer_forward.at(T)) << T << " tokens";
    EXPECT_LT(none.profile.layer_forward.at(T), same.profile.layer_forward.at(T))
        << "one unit each, unswitched";
  }
}

// Each pass is timed as the engine runs it, and each on its own: the backward recomputes the
// forward and then runs its own ops, the backward from kept internals skips the recompute of the
// GEMMs and the attention, and the head with fp32 gradients is a measurement of its own (into
// buffers of its own), not the other head's time copied.
TEST(MachineProfiler, ComputeProfileTimesEachPassAsTheEngineRunsIt) {
  const ModelConfig config = preset_config("llama", "tiny");
  SimRig rig;
  CountingOps ops(*rig.ops);
  const ProfileOptions options = counting_options(ops);
  const ComputeProfile c = measure_compute(*rig.device, ops, config, kSeq, options);
  for (const int64_t T : {kSeq, 2 * kSeq, 4 * kSeq}) {
    EXPECT_GT(c.layer_backward.at(T), c.layer_forward.at(T)) << T << " tokens";
    EXPECT_LT(c.layer_backward_kept.at(T), c.layer_backward.at(T)) << T << " tokens";
    EXPECT_GT(c.head.at(T), c.embedding_forward.at(T)) << T << " tokens";
    EXPECT_EQ(c.head_f32_grads.at(T), c.head.at(T))
        << "the same work on the simulated device (fp32 gradients)";
    EXPECT_EQ(c.head_grouped.at(T), c.head.at(T)) << "the CPU ops make no logits chunks: not timed";
    EXPECT_EQ(c.head_f32_grads_grouped.at(T), c.head_f32_grads.at(T));
  }
  EXPECT_EQ(ops.head_weight_gradients().size(), 2u) << "the head with fp32 gradients has buffers of its own";
  EXPECT_EQ(rig.device->memory().in_use, 0u);
}

// The head's variants are timed in turn at each size (their samples interleaved after one soak of
// them all), not one variant at every size and then the next: each variant's soak took ~1.5 s of
// a first profile on a GPU, and a slow phase of the machine falls on every variant alike.
TEST(MachineProfiler, TheHeadsVariantsAreTimedInTurn) {
  const ModelConfig config = preset_config("llama", "tiny");
  SimRig rig;
  CountingOps ops(*rig.ops);
  ProfileOptions options = counting_options(ops);
  options.timing.repeats = 3;
  measure_compute(*rig.device, ops, config, kSeq, options);
  ASSERT_EQ(ops.head_weight_gradients().size(), 2u) << "the head in gd and with fp32 gradients";
  // Three sizes of micro-chunk, each sampled 3 times in turn: at least two switches a sample.
  EXPECT_GE(ops.head_gradient_switches(), 3 * 3 * 2 - 1);
}

// measure_compute of a tiny llama's layer at kLongSequence tokens in one micro-chunk, on the
// counting clock, within `capacity` bytes of simulated device memory.
constexpr int64_t kLongSequence = 1024;
// With `steady_calls`, the ops say they reach their steady speed after that many calls of a
// problem, and `fewest_gemm_calls` gets the fewest calls a layer GEMM problem had.
ComputeProfile measure_long(const ModelConfig& config, size_t capacity, int steady_calls = 0,
                            int64_t* fewest_gemm_calls = nullptr) {
  SimDeviceOptions sim;
  sim.memory_capacity = capacity;
  SimRig rig(sim);
  CountingOps ops(*rig.ops);
  ops.reach_steady_speed_after(steady_calls);
  ProfileOptions options = counting_options(ops);
  options.micro_batches = {1, 2};
  options.one_chunk_tokens = kLongSequence;
  const ComputeProfile c = measure_compute(*rig.device, ops, config, kLongSequence, options);
  EXPECT_LE(rig.device->memory().peak, capacity);
  if (fewest_gemm_calls) *fewest_gemm_calls = ops.fewest_layer_gemm_calls();
  return c;
}

// The profile at the smallest capacity that measures (a bisection between one that cannot and one
// that holds whole sequences), and that capacity.
ComputeProfile measure_long_in_least_memory(const ModelConfig& config, size_t* capacity_used = nullptr) {
  std::optional<ComputeProfile> least;
  size_t fails = size_t{256} << 10, holds = size_t{16} << 20;
  while (holds - fails > size_t{64} << 10) {
    const size_t capacity = (fails + holds) / 2;
    try {
      least = measure_long(config, capacity);
      holds = capacity;
    } catch (const Error&) {
      fails = capacity;
    }
  }
  EXPECT_TRUE(least.has_value()) << "nothing measured under " << holds << " bytes";
  if (capacity_used) *capacity_used = holds;
  return least.value_or(ComputeProfile{});
}

ModelConfig tiny_llama_with_kv_heads(int64_t kv_heads) {
  nlohmann::json raw = preset_config("llama", "tiny").raw;
  raw["num_key_value_heads"] = kv_heads;
  return parse_model_config(raw, "test");
}

// Where not even one sequence fits the device whole, the layer is timed in the largest sequence
// tiles that fit (as a plan at that length runs it), within the cap, and its times are taken back
// to the untiled layer's: the planner's charge for the tiled forward (planner/sequence_tile.h) is
// then the time measured, which on the counting clock is the untiled forward's (tiles issue the
// same work). The tiled backward runs the input norm again per tile, so it is charged more than
// the untiled one, by less than a forward. (One KV head: attention runs in one group.)
TEST(MachineProfiler, TimesTheLayerInSequenceTilesWhereNoWholeSequenceFits) {
  const ModelConfig config = tiny_llama_with_kv_heads(1);
  const ComputeProfile whole = measure_long(config, size_t{256} << 20);
  ASSERT_EQ(whole.layer_tile_tokens, 0);
  const ComputeProfile tiled = measure_long_in_least_memory(config);
  ASSERT_GT(tiled.layer_tile_tokens, 0) << "the smallest capacity that measures timed whole sequences";
  EXPECT_EQ(tiled.layer_head_groups, 1);
  const int64_t tile = tiled.layer_tile_tokens;
  EXPECT_LT(tile, kLongSequence);
  EXPECT_GE(tile, 256);
  EXPECT_NEAR(tiled_seconds(tiled.layer_forward, kLongSequence, tile), whole.layer_forward.at(kLongSequence),
              1e-9 * whole.layer_forward.at(kLongSequence));
  const double backward = tiled_seconds(tiled.layer_backward, kLongSequence, tile);
  EXPECT_GT(backward, whole.layer_backward.at(kLongSequence));
  EXPECT_LT(backward, whole.layer_backward.at(kLongSequence) + whole.layer_forward.at(kLongSequence));
  EXPECT_EQ(tiled.layer_backward_kept.at(kLongSequence), tiled.layer_backward.at(kLongSequence))
      << "kept internals are whole chunks: no such pass is timed in tiles";
}

// The warm-up goes on until a run makes no tuning call, so every GEMM problem reaches its steady
// speed before the timed runs, whole or in tiles (where each problem is called once per tile, and
// so tuned in fewer layer calls).
TEST(MachineProfiler, WarmsEachGemmProblemUpAsOftenAsTheOpsNeedWholeOrInTiles) {
  const ModelConfig config = tiny_llama_with_kv_heads(1);
  constexpr int kSteadyCalls = 12;
  int64_t whole_calls = 0, tiled_calls = 0;
  ASSERT_EQ(measure_long(config, size_t{256} << 20, kSteadyCalls, &whole_calls).layer_tile_tokens, 0);
  size_t least = 0;
  measure_long_in_least_memory(config, &least);
  const ComputeProfile tiled = measure_long(config, least, kSteadyCalls, &tiled_calls);
  ASSERT_GT(tiled.layer_tile_tokens, 0);
  EXPECT_GE(whole_calls, kSteadyCalls);
  EXPECT_GE(tiled_calls, kSteadyCalls);
}

// Where the smallest tiles still leave attention's tensors too large, attention runs in groups of
// KV heads too (as a plan at that length runs it): q, k, v and their gradients shrink to one
// group's. The forward, taken back to one group's, is the untiled forward on the counting clock
// (groups split the same work by columns) but for the input norm each further group computes
// again for its tiles (a memory-bound pass the planner does not charge); the planner's backward
// charge (the tiles' and the groups' shares of a forward added back, planner/head_groups.h) lies
// between the untiled backward and it plus a forward.
TEST(MachineProfiler, TimesAttentionInHeadGroupsWhereNoTileFitsWithEveryHead) {
  const ModelConfig config = tiny_llama_with_kv_heads(2);
  const ComputeProfile whole = measure_long(config, size_t{256} << 20);
  const ComputeProfile least = measure_long_in_least_memory(config);
  ASSERT_EQ(least.layer_head_groups, 2) << "the least memory that measures needs attention in groups";
  const int64_t tile = least.layer_tile_tokens;
  ASSERT_GT(tile, 0);
  const double forward = whole.layer_forward.at(kLongSequence);
  const double norms_again = static_cast<double>(kLongSequence * config.hidden_size) / 1024.0;
  const double grouped_forward = tiled_seconds(least.layer_forward, kLongSequence, tile);
  EXPECT_GE(grouped_forward, forward * (1 - 1e-9));
  EXPECT_LE(grouped_forward, (forward + norms_again) * (1 + 1e-9));
  const double charge = tiled_seconds(least.layer_backward, kLongSequence, tile) +
                        (tiled_backward_extra_share(config, kLongSequence, tile) +
                         head_groups_backward_extra_share(config, 2)) *
                            least.layer_forward.at(kLongSequence);
  EXPECT_GT(charge, whole.layer_backward.at(kLongSequence));
  EXPECT_LT(charge, whole.layer_backward.at(kLongSequence) + forward);
}

// Each share is the rate beside the other over the rate alone, kept within (0, 1]: a sample where
// both ran faster together is noise, not a machine where sharing helps.
TEST(MachineProfiler, MemorySharingSharesAreRatesBesideOverAlone) {
  MemorySharingRates r;
  r.cpu_alone = 5e9;
  r.cpu_beside_copy = 4e9;
  r.cpu_beside_duplex = 3.5e9;
  r.copy_alone = 55e9;
  r.copy_beside_cpu = 60e9;  // noise above alone
  r.duplex_alone = 50e9;
  r.duplex_beside_cpu = 35e9;
  const HostMemorySharing s = r.shares();
  EXPECT_DOUBLE_EQ(s.cpu_beside_copy, 0.8);
  EXPECT_DOUBLE_EQ(s.cpu_beside_duplex, 0.7);
  EXPECT_DOUBLE_EQ(s.copy_beside_cpu, 1.0);
  EXPECT_DOUBLE_EQ(s.duplex_beside_cpu, 0.7);
}

// The memory-sharing part's samples of the CPU AdamW alone are a second measurement of the host
// part's rate: where they run faster by more than kCpuUpdateRatesAgree, the host part was slowed,
// and is measured again. Here the host part's clock runs a thousand times as fast as the wall's, so
// its passes seem a thousand times as slow: no descheduling of the copies' part's samples on a
// busy test machine comes near that.
TEST(MachineProfiler, MeasuresTheCpuRatesAgainWhereTheCopiesPartRanThemFaster) {
  const ModelConfig config = preset_config("llama", "tiny");
  SimRig rig;
  ProfileOptions options = quick_options();
  options.cpu_adamw_timing.clock = [] {
    return 1000.0 *
           std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  LogCapture log;
  const MachineProfile p = measure_profile(*rig.device, *rig.ops, config, kSeq, options);
  const std::string text = log.take();
  EXPECT_NE(text.find("the host was busy then"), std::string::npos) << text;
  EXPECT_NE(text.find("measuring the CPU's rates again"), std::string::npos) << text;
  expect_positive(p.host.cpu_adamw_params_per_s, "cpu adamw");
}

TEST(MachineProfiler, TheCpuRatesAgreeWithinTheirMargin) {
  EXPECT_FALSE(cpu_updates_ran_slow(5.42e9, 5.18e9));  // a quiet H100 machine's two parts
  EXPECT_FALSE(cpu_updates_ran_slow(5.0e9, 5.0e9 * kCpuUpdateRatesAgree));
  EXPECT_TRUE(cpu_updates_ran_slow(4.21e9, 5.2e9));
}

TEST(MachineProfiler, KeepsTheFasterOfEachCpuRate) {
  HostProfile kept, again;
  kept.cpu_adamw_params_per_s = 4.2e9;
  again.cpu_adamw_params_per_s = 5.4e9;
  kept.lean_adamw_params_per_s[static_cast<int>(OptimizerStateFormat::Bf16SrQ8)] = 5.0e9;
  again.lean_adamw_params_per_s[static_cast<int>(OptimizerStateFormat::Bf16SrQ8)] = 4.0e9;
  kept.lean_adamw_params_per_s[static_cast<int>(OptimizerStateFormat::Fp32Q8)] = 3.0e9;
  again.lean_adamw_params_per_s[static_cast<int>(OptimizerStateFormat::Fp32Q8)] = 4.5e9;
  kept.memory_bytes = 1e11;
  again.memory_bytes = 2e11;
  keep_faster_cpu_updates(kept, again);
  EXPECT_EQ(kept.cpu_adamw_params_per_s, 5.4e9);
  EXPECT_EQ(kept.lean_adamw_params_per_s[static_cast<int>(OptimizerStateFormat::Bf16SrQ8)], 5.0e9);
  EXPECT_EQ(kept.lean_adamw_params_per_s[static_cast<int>(OptimizerStateFormat::Fp32Q8)], 4.5e9);
  EXPECT_EQ(kept.memory_bytes, 1e11);  // not a rate: the kept profile's
}

// Virtual time for the simulated device's copies: each copy stream runs its copies one after the
// other from the moment the host last read the clock, for exactly the time the device asks for,
// and the streams run side by side. The host reads the time when its work has drained (the
// profiler reads it after synchronizing, or before issuing); a host task on a stream reads that
// stream's time. Copies then take no wall time, and what the profiler finds is exact.
class CopyTimeline {
 public:
  // SimDeviceOptions::copy_wait.
  void wait(StreamKind stream, double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    t_stream = static_cast<int>(stream);
    double& free_at = free_at_[t_stream];
    free_at = std::max(free_at, epoch_) + seconds;
  }
  // TimingOptions::clock.
  double now() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (t_stream >= 0) return free_at_[t_stream];
    for (const double t : free_at_) epoch_ = std::max(epoch_, t);
    return epoch_;
  }

 private:
  static thread_local int t_stream;  // the stream whose thread this is; -1 on the host
  std::mutex mutex_;
  double epoch_ = 0.0;
  std::array<double, kStreamCount> free_at_{};
};
thread_local int CopyTimeline::t_stream = -1;

// The fit through a small and a large copy finds the configured bandwidth and latency of each
// direction, alone and both at once (each direction its own stream), on the copies' own time.
TEST(MachineProfiler, FindsTheEmulatedPcieBandwidthAndLatency) {
  CopyTimeline timeline;
  SimDeviceOptions sim;
  sim.h2d_bytes_per_second = 200e6;
  sim.d2h_bytes_per_second = 100e6;
  sim.copy_latency_seconds = 1e-3;
  sim.copy_wait = [&timeline](StreamKind stream, double seconds) { timeline.wait(stream, seconds); };
  SimRig rig(sim);
  ProfileOptions options = quick_options();
  options.copy_bytes = size_t{4} << 20;
  options.timing.clock = [&timeline] { return timeline.now(); };
  const TransferProfile t = measure_transfers(*rig.device, options);
  EXPECT_NEAR(t.h2d_bytes_per_s, 200e6, 200e6 * 1e-9);
  EXPECT_NEAR(t.d2h_bytes_per_s, 100e6, 100e6 * 1e-9);
  EXPECT_NEAR(t.duplex_h2d_bytes_per_s, 200e6, 200e6 * 1e-9);
  EXPECT_NEAR(t.duplex_d2h_bytes_per_s, 100e6, 100e6 * 1e-9);
  EXPECT_NEAR(t.latency_s, 1e-3, 1e-12);
}

TEST(MachineProfiler, StaysWithinASmallDeviceCap) {
  SimDeviceOptions sim;
  sim.memory_capacity = size_t{8} << 20;  // the default 256 MiB copies are scaled down to fit
  SimRig rig(sim);
  ProfileOptions options = quick_options();
  options.copy_bytes = size_t{256} << 20;
  const MachineProfile p =
      measure_profile(*rig.device, *rig.ops, preset_config("llama", "tiny"), kSeq, options);
  expect_positive(p.transfer.h2d_bytes_per_s, "h2d");
  EXPECT_LE(rig.device->memory().peak, sim.memory_capacity);
}

TEST(MachineProfiler, RefusesADeviceTooSmallForTwoMicroChunks) {
  SimDeviceOptions sim;
  sim.memory_capacity = size_t{64} << 10;
  SimRig rig(sim);
  try {
    measure_compute(*rig.device, *rig.ops, preset_config("llama", "tiny"), 512, quick_options());
    FAIL() << "expected ferry::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("raise gpu_memory"), std::string::npos) << e.what();
  }
}

TEST(MachineProfiler, DiskProbeMeasuresAndRemovesItsFile) {
  test::ScratchDir dir("disk_probe");
  const DiskRates rates = measure_disk_rates(dir.path(), size_t{16} << 20);
  expect_positive(rates.write_bytes_per_s, "disk write");
  expect_positive(rates.read_bytes_per_s, "disk read");
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "the probe file must be removed";
}

class ProfileSelection : public ::testing::Test {
 protected:
  ProfileSelection() : cache_("profile_cache") {
    config_.seq_len = kSeq;
    options_.measure = quick_options();
    options_.cache_dir = cache_.path();
  }
  std::filesystem::path cached_path() const {
    return profile_cache_path(cache_.path(), "sim", model_shape_key(model_, kSeq, DType::F32));
  }
  MachineProfile obtain(ProfileOrigin* origin) {
    return obtain_profile(config_, model_, *rig_.device, *rig_.ops, options_, origin);
  }
  // Plans with `profile` saved as the file `name` (`profile: FILE`); returns what was logged.
  std::string obtain_from_file(const MachineProfile& profile, const std::string& name, MachineProfile* used) {
    const std::filesystem::path file = cache_ / name;
    save_profile(file, profile);
    config_.profile = file;
    LogCapture log;
    ProfileOrigin origin = ProfileOrigin::Measured;
    *used = obtain(&origin);
    EXPECT_EQ(origin, ProfileOrigin::File);
    return log.take();
  }

  test::ScratchDir cache_;
  TrainConfig config_;
  ObtainProfileOptions options_;
  ModelConfig model_ = preset_config("llama", "tiny");
  SimRig rig_;
};

TEST_F(ProfileSelection, MeasuresOnceThenReadsTheCache) {
  ProfileOrigin origin = ProfileOrigin::File;
  const MachineProfile first = obtain(&origin);
  EXPECT_EQ(origin, ProfileOrigin::Measured);
  ASSERT_TRUE(std::filesystem::exists(cached_path()));
  const MachineProfile second = obtain(&origin);
  EXPECT_EQ(origin, ProfileOrigin::Cache);
  EXPECT_EQ(profile_to_json(second), profile_to_json(first));
}

TEST_F(ProfileSelection, CorruptCacheIsReportedAndMeasuredAgain) {
  std::filesystem::create_directories(cached_path().parent_path());
  std::ofstream(cached_path()) << "{\"version\": 1, \"device_name\": \"sim\", \"compute\": [";
  ProfileOrigin origin = ProfileOrigin::File;
  LogCapture log;
  obtain(&origin);
  const std::string warnings = log.take();
  EXPECT_EQ(origin, ProfileOrigin::Measured);
  EXPECT_NE(warnings.find("measuring again"), std::string::npos) << warnings;
  EXPECT_NO_THROW(load_profile(cached_path())) << "the corrupt file is replaced by the new measurement";
}

TEST_F(ProfileSelection, CacheFromAnotherThreadCountIsMeasuredAgain) {
  ProfileOrigin origin;
  MachineProfile p = obtain(&origin);
  p.host.threads += 1;
  save_profile(cached_path(), p);
  LogCapture log;
  obtain(&origin);
  EXPECT_EQ(origin, ProfileOrigin::Measured);
  EXPECT_NE(log.take().find("threads"), std::string::npos);
}

// A cached profile taken another way (an older ferry's: format 2 without the CPU AdamW beside
// copies, or format 3 without the soak or the head with fp32 gradients) is measured again.
TEST_F(ProfileSelection, CacheOfAnotherMethodIsMeasuredAgain) {
  ProfileOrigin origin;
  MachineProfile p = obtain(&origin);
  ASSERT_EQ(p.method, kProfilerMethod);
  ASSERT_TRUE(p.host.memory_sharing_measured);
  for (const bool format2 : {false, true}) {
    p.method = format2 ? 0 : kProfilerMethod - 1;
    p.host.memory_sharing_measured = !format2;
    save_profile(cached_path(), p);
    LogCapture log;
    const MachineProfile again = obtain(&origin);
    EXPECT_EQ(origin, ProfileOrigin::Measured) << format2;
    EXPECT_EQ(again.method, kProfilerMethod);
    EXPECT_TRUE(again.host.memory_sharing_measured);
    EXPECT_NE(log.take().find(
                  fmt::format("(method {}); this ferry measures with method {}", p.method, kProfilerMethod)),
              std::string::npos)
        << format2;
  }
}

// A profile measured with other kernels (cuDNN's attention there and not here, or the other way
// round) holds other compute times; so does one that does not say which it was measured with.
TEST_F(ProfileSelection, CacheFromOtherKernelsIsMeasuredAgain) {
  ProfileOrigin origin;
  MachineProfile p = obtain(&origin);
  for (const std::string other : {"cuda, cuDNN 91400 attention", ""}) {
    p.kernels = other;
    save_profile(cached_path(), p);
    LogCapture log;
    const MachineProfile again = obtain(&origin);
    EXPECT_EQ(origin, ProfileOrigin::Measured) << other;
    EXPECT_EQ(again.kernels, "cpu");
    EXPECT_NE(log.take().find("was measured with the kernels"), std::string::npos) << other;
  }
}

TEST_F(ProfileSelection, ProfileFileIsUsedAsIsAndWarnsAboutAnotherSeqLen) {
  ProfileOrigin origin;
  MachineProfile other = obtain(&origin);
  // Another machine's profile: a GPU with bf16 weights, measured at a longer sequence length.
  other.device_name = "cuda:0 NVIDIA H200";
  other.weight_dtype = DType::BF16;
  other.seq_len = 4 * kSeq;
  other.shape_key = model_shape_key(model_, other.seq_len, other.weight_dtype);
  MachineProfile used;
  const std::string warnings = obtain_from_file(other, "h200.json", &used);
  EXPECT_EQ(profile_to_json(used), profile_to_json(other));
  EXPECT_NE(warnings.find("seq_len 128"), std::string::npos) << warnings;
  EXPECT_EQ(warnings.find("older ferry"), std::string::npos) << warnings;
}

// A profile file from an older ferry still plans (it is another machine's measurement, which this
// one cannot repeat), with a warning that says how to measure it again.
TEST_F(ProfileSelection, ProfileFileOfAnOlderMethodIsUsedWithAWarning) {
  ProfileOrigin origin;
  MachineProfile old = obtain(&origin);
  old.method = 0;
  MachineProfile used;
  const std::string warnings = obtain_from_file(old, "old.json", &used);
  EXPECT_EQ(used.method, 0);
  EXPECT_NE(warnings.find("measured by an older ferry (method 0"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("ferry profile"), std::string::npos) << warnings;
}

TEST_F(ProfileSelection, ProfileFileForAnotherModelShapeIsRefused) {
  ProfileOrigin origin;
  MachineProfile p = obtain(&origin);
  const std::filesystem::path file = cache_ / "tiny-llama.json";
  save_profile(file, p);
  config_.profile = file;
  model_ = preset_config("qwen3", "tiny");
  try {
    obtain(&origin);
    FAIL() << "expected ferry::Error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("measured for the model shape " + p.shape_key), std::string::npos) << message;
    EXPECT_NE(message.find("ferry profile"), std::string::npos) << message;
  }
}

// A run takes ferry's own attention where its profile found it faster on this device with these
// kernels, and only there: a profile of another machine, of other kernels, or of ops without a
// library's attention leaves the library's.
TEST_F(ProfileSelection, TheRunTakesTheOwnAttentionWhereItsProfileFoundItFasterHere) {
  CountingOps ops(*rig_.ops);
  ops.give_library_attention({2, 2, 1, 1});
  MachineProfile p;
  p.device_name = rig_.device->name();
  p.kernels = ops.kernels();
  p.compute.own_attention_backward = true;
  const AttentionChoice here = attention_choice(p, *rig_.device, ops);
  EXPECT_FALSE(here.own_forward);
  EXPECT_TRUE(here.own_backward);
  MachineProfile other = p;
  other.device_name = "cuda:0 NVIDIA H200";
  EXPECT_FALSE(attention_choice(other, *rig_.device, ops).any()) << "measured on another machine";
  other = p;
  other.kernels = "cuda, cuDNN 91400 attention";
  EXPECT_FALSE(attention_choice(other, *rig_.device, ops).any()) << "measured with other kernels";
  other = p;
  other.compute.own_attention_backward = false;
  EXPECT_FALSE(attention_choice(other, *rig_.device, ops).any()) << "the library's was the faster";
  EXPECT_FALSE(attention_choice(p, *rig_.device, *rig_.ops).any()) << "no library's attention to set aside";
}

TEST(ProfileCachePath, NamesTheDeviceAndTheShape) {
  EXPECT_EQ(profile_cache_path("/c", "cuda:0 NVIDIA H200", "llama-h64-s32-BF16"),
            std::filesystem::path("/c/cuda-0-nvidia-h200-llama-h64-s32-BF16.json"));
}

}  // namespace
}  // namespace ferry
