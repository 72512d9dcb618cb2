// The sliding engine over N simulated devices with one host state (engine/device_group_engine.h)
// against two references:
//
//  * the split reference: the plain trainer's step run over each device's micro-chunks into a
//    gradient of its own (scaled by the whole step's counted tokens), the N gradients and losses
//    added in rank order in fp32 (device/collective.h sum_in_rank_order), then the plain AdamW.
//    That is the same arithmetic in the same order, so losses, norms, masters, m and v must be
//    bit-identical, with and without clipping, for every plan;
//  * one device with the same global batch: the gradient is then every micro-chunk's
//    contribution added onto one buffer, in order, where N devices add N partial sums. Both are
//    fp32 sums of the same terms a_1..a_n (n: the step's tokens), each within γ(n-1) Σ|a_t| of
//    the exact sum (γ(k) = k u / (1 - k u), u = 2^-24), so they differ by at most
//    2 γ(n-1) Σ|a_t|. For the loss the terms are the tokens' cross-entropies (all >= 0), so
//    Σ|a_t| is the loss sum itself, and the first step's loss is held to that bound exactly. The
//    gradients' Σ|a_t| are not observable from outside the step; their effect is held to a
//    relative 1e-4 on the norms and to 1e-6 + 1e-4 |w| on the weights after the steps.
#include <array>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "data/packing.h"
#include "device/collective.h"
#include "device/device.h"
#include "device/thread_collective.h"
#include "engine/device_group_engine.h"
#include "engine/model_step.h"
#include "engine/unit_optimizer.h"
#include "ops/device_ops.h"
#include "sliding_plans.h"
#include "test_util.h"
#include "train/model_init.h"

namespace ferry {
namespace {

using test::hyper_at;
using test::kMicro;
using test::kSeq;
using test::make_plan;
using test::make_rows;

// 8 rows a step, micro-chunks of kMicro = 2 rows: 4 micro-chunks, split over 1, 2 or 4 devices.
constexpr int64_t kRows = 8, kChunks = kRows / kMicro, kSteps = 4;

StepBatch group_batch(const std::vector<PackedRow>& rows, int64_t step) {
  std::vector<const PackedRow*> picked;
  for (int64_t r = 0; r < kRows; ++r)
    picked.push_back(&rows[static_cast<size_t>((step * kRows + r) % rows.size())]);
  return make_step_batch(picked, kSeq, kMicro);
}

struct RunState {
  std::vector<double> losses, norms;
  std::vector<std::vector<float>> masters, m, v;
};

// The split reference over `devices` shares (devices == 1: the one-device plain trainer).
RunState split_reference(const ModelConfig& config, uint64_t seed, const std::vector<PackedRow>& rows,
                         double max_norm, int devices, int64_t steps = kSteps) {
  RunState state;
  init_random_weights(config, seed, state.masters);
  const ModelLayout layout = build_model_layout(config);
  auto ops = make_cpu_ops();
  ModelStep model(config, layout, *ops, kMicro * kSeq, kChunks);
  UnitOptimizer opt(layout, false);
  std::vector<std::vector<std::vector<float>>> grads(static_cast<size_t>(devices));
  for (auto& g : grads)
    for (const auto& u : layout.units) g.emplace_back(static_cast<size_t>(u.numel), 0.0f);
  std::vector<std::vector<float>> sum;
  for (const auto& u : layout.units) sum.emplace_back(static_cast<size_t>(u.numel), 0.0f);
  std::vector<float*> p;
  for (auto& u : state.masters) p.push_back(u.data());
  const int64_t each = kChunks / devices;
  for (int64_t s = 0; s < steps; ++s) {
    const StepBatch batch = group_batch(rows, s);
    float loss = 0.0f;  // the devices' fp32 loss sums, added in rank order
    for (int r = 0; r < devices; ++r) {
      std::vector<float*> g;
      for (auto& u : grads[static_cast<size_t>(r)]) g.push_back(u.data());
      const StepLoss part = model.run(p, g, chunk_slice(batch, r * each, each), batch.counted_tokens());
      loss = r == 0 ? static_cast<float>(part.loss_sum) : loss + static_cast<float>(part.loss_sum);
    }
    for (size_t u = 0; u < layout.units.size(); ++u) {
      std::vector<const void*> parts;
      for (int r = 0; r < devices; ++r) parts.push_back(grads[static_cast<size_t>(r)][u].data());
      sum_in_rank_order(parts, 0, sum[u].size(), DType::F32, sum[u].data());
    }
    std::vector<const float*> g;
    for (auto& u : sum) g.push_back(u.data());
    const UpdateStats stats = opt.step(p, g, hyper_at(s), max_norm, s + 1);
    state.losses.push_back(static_cast<double>(loss) / static_cast<double>(batch.counted_tokens()));
    state.norms.push_back(stats.grad_norm);
  }
  state.m = opt.m();
  state.v = opt.v();
  return state;
}

// N simulated devices joined by thread collectives, one per stream.
struct SimGroup {
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<std::unique_ptr<Ops>> ops;
  std::array<std::unique_ptr<ThreadCommunicator>, kCollectiveStreamCount> comms;
  std::vector<std::array<std::unique_ptr<Collective>, kCollectiveStreamCount>> handles;

  explicit SimGroup(int n, const SimDeviceOptions& options = {}) : devices(make_sim_devices(n, options)) {
    for (auto& c : comms) c = std::make_unique<ThreadCommunicator>(n, std::chrono::seconds(60));
    handles.resize(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      ops.push_back(make_device_ops(*devices[static_cast<size_t>(r)]));
      for (int s = 0; s < kCollectiveStreamCount; ++s)
        handles[static_cast<size_t>(r)][static_cast<size_t>(s)] =
            comms[static_cast<size_t>(s)]->join(r, *devices[static_cast<size_t>(r)]);
    }
  }
  std::unique_ptr<DeviceGroupEngine> engine(const ModelConfig& config, const Plan& plan) {
    std::vector<Device*> d;
    std::vector<Ops*> o;
    std::vector<std::array<Collective*, kCollectiveStreamCount>> c;
    for (size_t r = 0; r < devices.size(); ++r) {
      d.push_back(devices[r].get());
      o.push_back(ops[r].get());
      c.push_back({handles[r][0].get(), handles[r][1].get(), handles[r][2].get()});
    }
    return std::make_unique<DeviceGroupEngine>(config, build_model_layout(config), d, o, c, plan,
                                               kMicro * kSeq, kChunks, false);
  }
};

std::vector<std::vector<float>> copy_of(UnitUpdater& host, HostArray HostUnitState::*member) {
  std::vector<std::vector<float>> out;
  for (size_t u = 0; u < host.unit_count(); ++u) {
    const HostArray& a = host.unit(u).*member;
    out.emplace_back(a.data(), a.data() + a.size());
  }
  return out;
}

// `steps` steps on `devices` simulated devices, from the state `start` (empty: the seed's weights)
// as of step `first` (0-based).
RunState group_run(const ModelConfig& config, uint64_t seed, const std::vector<PackedRow>& rows,
                   double max_norm, int devices, const Plan& plan, int64_t steps = kSteps,
                   const RunState* start = nullptr, int64_t first = 0) {
  SimGroup group(devices);
  auto engine = group.engine(config, plan);
  UnitUpdater& host = engine->host();
  std::vector<std::vector<float>> weights;
  if (start == nullptr) init_random_weights(config, seed, weights);
  for (size_t u = 0; u < host.unit_count(); ++u) {
    host.unit(u).master.assign(start ? start->masters[u] : weights[u]);
    if (start) {
      host.unit(u).m.assign(start->m[u]);
      host.unit(u).v.assign(start->v[u]);
    }
  }
  engine->weights_changed(first);
  RunState run;
  for (int64_t s = first; s < first + steps; ++s) {
    const SlidingStepResult r = engine->step(s + 1, group_batch(rows, s), hyper_at(s), max_norm);
    run.losses.push_back(r.loss);
    run.norms.push_back(r.grad_norm);
  }
  engine->finish_updates();
  run.masters = copy_of(host, &HostUnitState::master);
  run.m = copy_of(host, &HostUnitState::m);
  run.v = copy_of(host, &HostUnitState::v);
  for (auto& d : group.devices) EXPECT_LE(d->memory().peak, d->memory().capacity);
  return run;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t u = 0; u < a.size(); ++u)
    if (a[u].size() != b[u].size() || std::memcmp(a[u].data(), b[u].data(), a[u].size() * 4) != 0)
      return false;
  return true;
}

void expect_identical(const RunState& expected, const RunState& actual) {
  ASSERT_EQ(expected.losses.size(), actual.losses.size());
  for (size_t i = 0; i < expected.losses.size(); ++i) {
    EXPECT_EQ(expected.losses[i], actual.losses[i]) << "loss of step " << i + 1;
    EXPECT_EQ(expected.norms[i], actual.norms[i]) << "grad norm of step " << i + 1;
  }
  EXPECT_TRUE(same_bits(expected.masters, actual.masters)) << "masters";
  EXPECT_TRUE(same_bits(expected.m, actual.m)) << "exp_avg";
  EXPECT_TRUE(same_bits(expected.v, actual.v)) << "exp_avg_sq";
}

class DeviceGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nlohmann::json json = preset_config("qwen3", "tiny").raw;
    json["num_hidden_layers"] = 3;
    config_ = parse_model_config(json, "test");
    layout_ = build_model_layout(config_);
    rows_ = make_rows(config_.vocab_size, 5);
  }
  Plan streamed(int64_t slots, std::vector<int64_t> offloaded, UpdateSchedule update) const {
    return make_plan(layout_, 3, slots, {}, std::move(offloaded), update);
  }
  ModelConfig config_;
  ModelLayout layout_;
  std::vector<PackedRow> rows_;
};

TEST_F(DeviceGroupTest, TwoDevicesEqualTheSplitReferenceWithClipping) {
  const Plan plan = streamed(2, {}, UpdateSchedule::AfterBackward);
  expect_identical(split_reference(config_, 9, rows_, 0.5, 2), group_run(config_, 9, rows_, 0.5, 2, plan));
}

TEST_F(DeviceGroupTest, TwoDevicesEqualTheSplitReferenceWithoutClipping) {
  const Plan plan = streamed(3, {0, 2}, UpdateSchedule::DuringBackward);
  expect_identical(split_reference(config_, 9, rows_, 0.0, 2), group_run(config_, 9, rows_, 0.0, 2, plan));
}

TEST_F(DeviceGroupTest, FourDevicesResidentUnitsAndOffloadedBoundaries) {
  // The embedding (row-sparse, its rows split over the devices) and the head resident, layer 1
  // streamed through one slot, every boundary offloaded.
  const Plan plan =
      make_plan(layout_, 3, 1, {0, layout_.head_unit()}, {0, 1, 2}, UpdateSchedule::AfterBackward);
  expect_identical(split_reference(config_, 9, rows_, 1.0, 4), group_run(config_, 9, rows_, 1.0, 4, plan));
}

TEST_F(DeviceGroupTest, OneDeviceGroupIsTheOneDeviceRun) {
  // A group of one sums nothing: it is the plain trainer's run bit for bit.
  const Plan plan = streamed(2, {1}, UpdateSchedule::AfterBackward);
  expect_identical(split_reference(config_, 9, rows_, 0.5, 1), group_run(config_, 9, rows_, 0.5, 1, plan));
}

TEST_F(DeviceGroupTest, DeterministicFromRunToRun) {
  const Plan plan = streamed(2, {0}, UpdateSchedule::AfterBackward);
  expect_identical(group_run(config_, 3, rows_, 0.5, 2, plan), group_run(config_, 3, rows_, 0.5, 2, plan));
}

TEST_F(DeviceGroupTest, WithinTheSummationBoundOfOneDevice) {
  const Plan plan = streamed(2, {}, UpdateSchedule::AfterBackward);
  const RunState one = split_reference(config_, 9, rows_, 0.5, 1);
  const RunState two = group_run(config_, 9, rows_, 0.5, 2, plan);
  const double u = std::ldexp(1.0, -24);
  const double n = static_cast<double>(group_batch(rows_, 0).counted_tokens());
  const double gamma = (n - 1) * u / (1 - (n - 1) * u);
  // Step 1 reads the same weights on both: its loss sums differ by at most 2 γ(n-1) × the sum.
  const double loss_sum = one.losses[0] * n;
  EXPECT_LE(std::abs(one.losses[0] - two.losses[0]) * n, 2 * gamma * loss_sum);
  EXPECT_NE(one.norms[0], 0.0);
  for (size_t s = 0; s < one.norms.size(); ++s)
    EXPECT_NEAR(one.norms[s], two.norms[s], 1e-4 * one.norms[s]) << "step " << s + 1;
  for (size_t u8 = 0; u8 < one.masters.size(); ++u8)
    for (size_t i = 0; i < one.masters[u8].size(); ++i)
      ASSERT_NEAR(one.masters[u8][i], two.masters[u8][i], 1e-6 + 1e-4 * std::abs(one.masters[u8][i]))
          << "unit " << u8 << " element " << i;
}

TEST_F(DeviceGroupTest, ResumesFromItsStateAsIfUninterrupted) {
  const Plan plan = streamed(2, {1}, UpdateSchedule::AfterBackward);
  const RunState straight = group_run(config_, 9, rows_, 0.5, 2, plan);
  const RunState first = group_run(config_, 9, rows_, 0.5, 2, plan, 2);
  const RunState rest = group_run(config_, 9, rows_, 0.5, 2, plan, 2, &first, 2);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(straight.losses[i + 2], rest.losses[i]);
    EXPECT_EQ(straight.norms[i + 2], rest.norms[i]);
  }
  EXPECT_TRUE(same_bits(straight.masters, rest.masters));
  EXPECT_TRUE(same_bits(straight.v, rest.v));
}

TEST_F(DeviceGroupTest, EvaluatesOnRankZeroInPieces) {
  const Plan plan = streamed(2, {}, UpdateSchedule::AfterBackward);
  SimGroup group(2);
  auto engine = group.engine(config_, plan);
  std::vector<std::vector<float>> weights;
  init_random_weights(config_, 9, weights);
  for (size_t u = 0; u < weights.size(); ++u) engine->host().unit(u).master.assign(weights[u]);
  engine->weights_changed(0);
  const StepBatch batch = group_batch(rows_, 0);
  // The plain trainer's evaluation, piece by piece as rank 0 runs it (two micro-chunks each).
  auto ops = make_cpu_ops();
  ModelStep model(config_, layout_, *ops, kMicro * kSeq, kChunks);
  std::vector<float*> p;
  for (auto& u : weights) p.push_back(u.data());
  double expected = 0.0;
  for (int64_t first = 0; first < kChunks; first += 2)
    expected += model.evaluate(p, chunk_slice(batch, first, 2)).loss_sum;
  const StepLoss loss = engine->evaluate(batch);
  EXPECT_EQ(loss.loss_sum, expected);
  EXPECT_EQ(loss.counted_tokens, batch.counted_tokens());
}

TEST(DeviceGroupTied, TiedEmbeddingsSumTheHeadsAndTheEmbeddingsGradientsOnEveryDevice) {
  // The tied table is resident; the head adds its lm_head gradient into the embedding's buffer on
  // each device, and the sum of both crosses the devices once.
  ModelConfig config = preset_config("llama", "tiny");
  nlohmann::json json = config.raw;
  json["tie_word_embeddings"] = true;
  config = parse_model_config(json, "test");
  const ModelLayout layout = build_model_layout(config);
  ASSERT_TRUE(layout.tied);
  const auto rows = make_rows(config.vocab_size, 6);
  const Plan plan = make_plan(layout, config.num_layers, 2, {0}, {1}, UpdateSchedule::AfterBackward);
  expect_identical(split_reference(config, 4, rows, 1.0, 2), group_run(config, 4, rows, 1.0, 2, plan));
}

TEST(DeviceGroupSplit, UnevenMicroChunksAreRefusedNamingTheGlobalBatchThatWould) {
  EXPECT_EQ(chunks_per_device(8, 4), 2);
  try {
    chunks_per_device(3, 2);
    FAIL() << "3 micro-chunks split over 2 devices";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of micro_batch x gpus"), std::string::npos) << e.what();
  }
}

TEST(DeviceGroupSplit, ShardsCoverEveryElementOnce) {
  for (size_t n : {0, 1, 5, 6, 7, 4096}) {
    for (int size : {1, 2, 3, 4}) {
      std::vector<int> sent(n, 0), uploaded(n, 0);
      for (int r = 0; r < size; ++r) {
        const UnitShard s = unit_shard(n, r, size);
        for (size_t i = s.begin; i < s.send_end; ++i) ++sent[i];
        for (int q = 0; q < size; ++q) {  // the all-gather brings every rank's shard
          const UnitShard o = unit_shard(n, q, size);
          for (size_t i = o.begin; i < o.end; ++i) ++uploaded[i];
        }
        for (size_t i = s.tail_begin; i < n; ++i) ++uploaded[i];
      }
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(sent[i], 1) << n << " elements over " << size;
        EXPECT_EQ(uploaded[i], size) << n << " elements over " << size;  // each rank holds all
      }
      int64_t rows_seen = 0;
      for (int r = 0; r < size; ++r) {
        const RowShard rs = row_shard(static_cast<int64_t>(n), r, size);
        EXPECT_EQ(rs.begin, rows_seen);
        EXPECT_LE(rs.end - rs.begin, (static_cast<int64_t>(n) + size - 1) / size);
        rows_seen = rs.end;
      }
      EXPECT_EQ(rows_seen, static_cast<int64_t>(n));
    }
  }
}

}  // namespace
}  // namespace ferry
