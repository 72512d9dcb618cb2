// The cost model against predictions computed by hand for plans simple enough to time on paper:
// everything on the GPU (the sum of the compute), streamed weights over a slow link (bytes over
// bandwidth), a slow CPU (the updates), and what offloading activations adds to the link.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "planner/cost_model.h"
#include "planner/memory_model.h"
#include "planner/profile.h"
#include "planner/slot_schedule.h"
#include "planner_shapes.h"
#include "test_util.h"

namespace ferry {
namespace {

class CostModelTest : public ::testing::Test {
 protected:
  static constexpr int64_t kSeq = 1024, kChunks = 8;
  const ModelConfig config_ = test::toy_shape();
  const ModelLayout layout_ = build_model_layout(config_);
  const StepShape shape_{kSeq, kChunks};
  const int64_t L_ = config_.num_layers;

  Plan plan(UnitPlacement units, ActivationPlacement activations, int64_t slots = 2) const {
    Plan p;
    p.gpu_slots = slots;
    p.units.assign(layout_.units.size(), units);
    p.activations.assign(static_cast<size_t>(L_), activations);
    return p;
  }
  double params() const {
    double n = 0;
    for (const auto& u : layout_.units) n += static_cast<double>(u.numel);
    return n;
  }
  // ids, targets, positions, doc_start, the distinct ids and the segment bounds (kStepTokenArrays)
  double token_bytes() const { return 6.0 * static_cast<double>(shape_.tokens()) * sizeof(int32_t); }
};

// Nothing crosses PCIe but the tokens and the loss; the step is the compute stream's work in order:
// embedding, 4 layer forwards (0.1 s each), the head (0.2 s), 4 layer backwards (0.2 s each), the
// embedding backward, and the GPU AdamW over every parameter.
TEST_F(CostModelTest, EverythingOnTheGpuIsTheSumOfTheCompute) {
  const double pcie = 1e12, gpu_adamw = 1e9;
  const MachineProfile profile =
      test::round_profile(config_, kSeq, shape_.tokens(), 0.1, pcie, 1e9, gpu_adamw);
  const Prediction p =
      predict(config_, layout_, plan(UnitPlacement::ResidentWithOptimizer, ActivationPlacement::KeepOnGpu),
              profile, shape_);
  const double embedding = 0.1 / 100;
  const double compute = embedding + 4 * 0.1 + 0.2 + 4 * 0.2 + embedding + params() / gpu_adamw;
  const double copies = token_bytes() / pcie + (sizeof(float) + sizeof(double)) / pcie;
  EXPECT_NEAR(p.step_seconds, compute + copies, 1e-9);
  EXPECT_EQ(p.bottleneck, Lane::Compute);
  EXPECT_NEAR(p.busy[static_cast<int>(Lane::Compute)], compute, 1e-9);
  EXPECT_DOUBLE_EQ(p.busy[static_cast<int>(Lane::Cpu)], 0.0);
  EXPECT_LT(p.gpu_idle_fraction, 1e-6);
  EXPECT_NEAR(p.tokens_per_second, static_cast<double>(shape_.tokens()) / p.step_seconds, 1e-6);
}

// The head keeps fp32 gradients where its unit is updated on the device (as the engine does): the
// profile's head time with fp32 gradients is then the one on the compute stream. Here it is 0.5 s
// against 0.2 s with bf16 gradients: 0.3 s more per step, for the head's unit alone.
TEST_F(CostModelTest, AHeadUpdatedOnTheDeviceTakesItsFp32GradientTime) {
  MachineProfile profile = test::round_profile(config_, kSeq, shape_.tokens(), 0.1, 1e12, 1e12, 1e9);
  profile.compute.head_f32_grads = {0.0, 0.5 / static_cast<double>(shape_.tokens())};
  const Plan resident = plan(UnitPlacement::ResidentParams, ActivationPlacement::KeepOnGpu);
  Plan head_on_device = resident;
  head_on_device.units[layout_.head_unit()] = UnitPlacement::ResidentWithOptimizer;
  const Prediction bf16 = predict(config_, layout_, resident, profile, shape_);
  const Prediction f32 = predict(config_, layout_, head_on_device, profile, shape_);
  const int head = static_cast<int>(TaskKind::Head);
  EXPECT_NEAR(bf16.critical_by_kind[head], 0.2, 1e-9);
  EXPECT_NEAR(f32.critical_by_kind[head], 0.5, 1e-9);
  // Everything on the device: fp32 gradients everywhere, the head's among them.
  const Prediction all =
      predict(config_, layout_, plan(UnitPlacement::ResidentWithOptimizer, ActivationPlacement::KeepOnGpu),
              profile, shape_);
  EXPECT_NEAR(all.critical_by_kind[head], 0.5, 1e-9);
}

// Compute and the CPU are (nearly) free, the link moves 1 GB/s each way (also both at once). The
// forward is the uploads of E, L0..L3 and H one after the other (nothing is on the GPU at the
// start of a step); the backward downloads every gradient (6 units) but uploads only what the slot
// schedule evicted (never the embedding, whose backward reads no weights), so it is bound by the
// downloads. Step = forward upload bytes / h2d rate + gradient bytes / d2h rate, whatever the
// number of slots. With each gradient go its norm partials: 8 bytes per 8Ki-element chunk of each
// parameter. Of the (untied) embedding's gradient only the step's token rows go down: for ids
// drawn uniformly from V, V (1 - (1 - 1/V)^tokens) rows are expected.
TEST_F(CostModelTest, StreamedWeightsOverASlowLinkTakeBytesOverBandwidth) {
  const double pcie = 1e9;
  const MachineProfile profile = test::round_profile(config_, kSeq, shape_.tokens(), 1e-9, pcie, 1e15);
  for (int64_t slots : {2, 3, 4}) {
    const Plan streamed = plan(UnitPlacement::Streamed, ActivationPlacement::KeepOnGpu, slots);
    const Prediction p = predict(config_, layout_, streamed, profile, shape_);
    std::vector<bool> resident(layout_.units.size(), false);
    const std::vector<SlotUse> uses = schedule_slots(step_unit_sequence(L_), resident, slots);
    double forward_uploads = token_bytes(), backward_uploads = 0;
    for (size_t i = 0; i + 1 < uses.size(); ++i)
      if (uses[i].load)
        (i <= static_cast<size_t>(L_) + 1 ? forward_uploads : backward_uploads) +=
            2.0 * static_cast<double>(layout_.units[uses[i].unit].numel);
    double partials = 0;
    for (const auto& unit : layout_.units) partials += 8.0 * static_cast<double>(grad_norm_partials(unit));
    ASSERT_FALSE(layout_.tied);
    const double V = static_cast<double>(config_.vocab_size);
    const double rows = V * (1.0 - std::pow(1.0 - 1.0 / V, static_cast<double>(shape_.tokens())));
    ASSERT_LT(rows, 0.9 * V);
    const double embedding = static_cast<double>(layout_.units[layout_.embedding_unit()].numel);
    const double gradients = 2.0 * (params() - embedding + rows * static_cast<double>(config_.hidden_size));
    ASSERT_LT(backward_uploads, gradients);
    EXPECT_NEAR(p.busy[static_cast<int>(Lane::HostToDevice)], (forward_uploads + backward_uploads) / pcie,
                1e-9);
    EXPECT_NEAR(p.busy[static_cast<int>(Lane::DeviceToHost)], (gradients + partials + 12) / pcie, 2e-6);
    EXPECT_NEAR(p.step_seconds, (forward_uploads + gradients) / pcie, 0.02 * p.step_seconds)
        << slots << " slots: " << p.explain();
  }
}

// Layers that keep their internals skip the backward's recompute: the forward (0.1 s) less its
// down_proj, whose share of the layer's weight-matrix FLOPs is H F / (H (2 QD + 2 KD) + 3 H F),
// less the two norms and the activation they still run: (4H + 3F) bf16 values and two fp32 rstd
// per token at the device memory's rate, 30 bytes per GPU AdamW parameter (1e9 of them a second).
// Two such layers shorten an all-on-the-GPU step by exactly twice that.
TEST_F(CostModelTest, KeptInternalsTakeTheRecomputeOffTheBackward) {
  const MachineProfile profile = test::round_profile(config_, kSeq, shape_.tokens(), 0.1, 1e12, 1e9, 1e9);
  Plan recompute = plan(UnitPlacement::ResidentWithOptimizer, ActivationPlacement::KeepOnGpu);
  Plan kept = recompute;
  kept.activations[0] = kept.activations[2] = ActivationPlacement::KeepWithInternals;
  const Prediction a = predict(config_, layout_, recompute, profile, shape_);
  const Prediction b = predict(config_, layout_, kept, profile, shape_);
  const double H = static_cast<double>(config_.hidden_size),
               F = static_cast<double>(config_.intermediate_size);
  const double QD = static_cast<double>(config_.q_dim()), KD = static_cast<double>(config_.kv_dim());
  const double down_share = H * F / (H * (2 * QD + 2 * KD) + 3 * H * F);
  ASSERT_GT(down_share, 0.1);
  const double elementwise = static_cast<double>(shape_.tokens()) * ((4 * H + 3 * F) * 2 + 8) / (30 * 1e9);
  ASSERT_GT(elementwise, 1e-5);
  const double saved = 0.1 * (1 - down_share) - elementwise;
  EXPECT_NEAR(a.step_seconds - b.step_seconds, 2 * saved, 1e-9);
  EXPECT_NEAR(a.busy[static_cast<int>(Lane::Compute)] - b.busy[static_cast<int>(Lane::Compute)], 2 * saved,
              1e-9);
}

// Where the profile measured the backward from kept internals, a kept layer's backward is that
// time (here 1.3 forwards of the step's tokens instead of the 2 of the full backward): two such
// layers shorten the step by exactly 2 × 0.7 forwards.
TEST_F(CostModelTest, AMeasuredKeptBackwardIsTakenAsItIs) {
  MachineProfile profile = test::round_profile(config_, kSeq, shape_.tokens(), 0.1, 1e12, 1e9, 1e9);
  profile.compute.layer_backward_kept = {0.0, 1.3 * profile.compute.layer_forward.per_token_s};
  Plan recompute = plan(UnitPlacement::ResidentWithOptimizer, ActivationPlacement::KeepOnGpu);
  Plan kept = recompute;
  kept.activations[1] = kept.activations[3] = ActivationPlacement::KeepWithInternals;
  const Prediction a = predict(config_, layout_, recompute, profile, shape_);
  const Prediction b = predict(config_, layout_, kept, profile, shape_);
  EXPECT_NEAR(a.step_seconds - b.step_seconds, 2 * 0.1 * 0.7, 1e-9);
}

// A CPU that updates 1e8 params/s and everything else nearly free (the gradient norms are computed
// on the device): the next step's forward follows each unit's update, and the updates start once
// every gradient of the step has landed, so a step is all the updates, back to back.
TEST_F(CostModelTest, ASlowCpuMakesTheStepTheUpdates) {
  const double cpu = 1e8;
  const MachineProfile profile = test::round_profile(config_, kSeq, shape_.tokens(), 1e-9, 1e13, cpu);
  const Prediction p = predict(
      config_, layout_, plan(UnitPlacement::Streamed, ActivationPlacement::KeepOnGpu), profile, shape_);
  const double work = params() / cpu;
  EXPECT_NEAR(p.step_seconds, work, work * 1e-3) << p.explain();
  EXPECT_EQ(p.bottleneck, Lane::Cpu);
  EXPECT_NEAR(p.critical[static_cast<int>(Lane::Cpu)], work, work * 1e-3);
  EXPECT_GT(p.gpu_idle_fraction, 0.99);
  EXPECT_NE(p.explain().find("bound by CPU optimizer"), std::string::npos) << p.explain();
  EXPECT_NE(p.explain().find("CPU AdamW"), std::string::npos) << p.explain();
}

// Converting on upload moves the fp32 masters (4 bytes/param) where the shadow moves bf16 (2): on
// a slow link with nothing else to do the weight uploads take twice as long. On a slow CPU the
// updates, without the bf16 copy, take 24/26 of the time.
TEST_F(CostModelTest, ConvertingOnUploadDoublesTheUploadsAndShortensTheCpuPass) {
  const double pcie = 1e9;
  const MachineProfile link = test::round_profile(config_, kSeq, shape_.tokens(), 1e-9, pcie, 1e15);
  Plan shadow = plan(UnitPlacement::Streamed, ActivationPlacement::KeepOnGpu);
  Plan convert = shadow;
  convert.weight_upload = WeightUpload::ConvertOnUpload;
  const int h2d = static_cast<int>(Lane::HostToDevice);
  const Prediction s = predict(config_, layout_, shadow, link, shape_);
  const Prediction c = predict(config_, layout_, convert, link, shape_);
  const double tokens = token_bytes() / pcie;
  EXPECT_NEAR(c.busy[h2d] - tokens, 2 * (s.busy[h2d] - tokens), 1e-9);

  const double cpu = 1e8;
  const MachineProfile slow_cpu = test::round_profile(config_, kSeq, shape_.tokens(), 1e-9, 1e13, cpu);
  for (UpdateSchedule update : {UpdateSchedule::AfterBackward, UpdateSchedule::DuringBackward}) {
    shadow.update = convert.update = update;
    const Prediction a = predict(config_, layout_, shadow, slow_cpu, shape_);
    const Prediction b = predict(config_, layout_, convert, slow_cpu, shape_);
    EXPECT_NEAR(b.busy[static_cast<int>(Lane::Cpu)], a.busy[static_cast<int>(Lane::Cpu)] * 24.0 / 26.0, 1e-9)
        << update_name(update);
    EXPECT_NEAR(b.step_seconds, a.step_seconds * 24.0 / 26.0, 1e-3 * a.step_seconds) << b.explain();
  }
}

// Offloading every boundary activation adds, per step, one d2h of each boundary in the forward
// and one h2d of each in the backward: L x tokens x hidden x 2 bytes each way.
TEST_F(CostModelTest, OffloadedActivationsCrossTheLinkTwice) {
  const double pcie = 1e9;
  const MachineProfile profile = test::round_profile(config_, kSeq, shape_.tokens(), 0.05, pcie, 1e10);
  const Prediction kept = predict(
      config_, layout_, plan(UnitPlacement::Streamed, ActivationPlacement::KeepOnGpu), profile, shape_);
  const Prediction offloaded = predict(
      config_, layout_, plan(UnitPlacement::Streamed, ActivationPlacement::OffloadToHost), profile, shape_);
  const double moved = static_cast<double>(L_ * shape_.tokens() * config_.hidden_size) * 2.0 / pcie;
  EXPECT_NEAR(
      offloaded.busy[static_cast<int>(Lane::HostToDevice)] - kept.busy[static_cast<int>(Lane::HostToDevice)],
      moved, 1e-9);
  EXPECT_NEAR(
      offloaded.busy[static_cast<int>(Lane::DeviceToHost)] - kept.busy[static_cast<int>(Lane::DeviceToHost)],
      moved, 1e-9);
  EXPECT_GE(offloaded.step_seconds, kept.step_seconds);
}

// Resident layers skip their uploads into slots; each is uploaded once per step instead of twice.
TEST_F(CostModelTest, ResidentLayersUploadOncePerStep) {
  const double pcie = 1e9;
  const MachineProfile profile = test::round_profile(config_, kSeq, shape_.tokens(), 1e-9, pcie, 1e15);
  Plan resident = plan(UnitPlacement::ResidentParams, ActivationPlacement::KeepOnGpu);
  const Prediction p = predict(config_, layout_, resident, profile, shape_);
  EXPECT_NEAR(p.busy[static_cast<int>(Lane::HostToDevice)], (2.0 * params() + token_bytes()) / pcie, 1e-9);
}

TEST_F(CostModelTest, PeakMemoryIsTheMemoryModels) {
  const MachineProfile profile = test::round_profile(config_, kSeq, shape_.tokens(), 0.1, 1e9, 1e9);
  const Plan p = plan(UnitPlacement::Streamed, ActivationPlacement::OffloadToHost, 3);
  const Prediction prediction = predict(config_, layout_, p, profile, shape_);
  EXPECT_EQ(prediction.device.total(), device_bytes(config_, layout_, p, kSeq, kChunks).total());
  EXPECT_EQ(prediction.host.pinned, host_bytes(config_, layout_, p, kSeq, kChunks).pinned);
  EXPECT_EQ(prediction.host.pageable, host_bytes(config_, layout_, p, kSeq, kChunks).pageable);
  EXPECT_EQ(prediction.disk_bytes, 0u);
}

// After the first step the pattern repeats: the steady state is reached at the second step.
TEST_F(CostModelTest, StepsAfterTheFirstTakeTheSameTime) {
  const MachineProfile profile = test::round_profile(config_, kSeq, shape_.tokens(), 0.01, 2e9, 2e8);
  const Prediction p = predict(
      config_, layout_, plan(UnitPlacement::Streamed, ActivationPlacement::OffloadToHost), profile, shape_);
  ASSERT_EQ(p.simulated_steps.size(), static_cast<size_t>(kSimulatedSteps));
  for (size_t s = 2; s < p.simulated_steps.size(); ++s)
    EXPECT_NEAR(p.simulated_steps[s], p.simulated_steps[1], 1e-9 * p.simulated_steps[1]);
  EXPECT_DOUBLE_EQ(p.step_seconds, p.simulated_steps.back());
}

TEST_F(CostModelTest, AGpuOptimizerNeedsAGpuAdamWRate) {
  const MachineProfile profile = test::round_profile(config_, kSeq, shape_.tokens(), 0.1, 1e9, 1e9, 0.0);
  EXPECT_THROW(
      predict(config_, layout_, plan(UnitPlacement::ResidentWithOptimizer, ActivationPlacement::KeepOnGpu),
              profile, shape_),
      Error);
}

// Internals on the host beside offloaded boundaries, on the stored H200 profile of the 8B: each
// 5.6 GB internals copy holds its direction's copy engine for ~0.1 s, so the boundary offloads
// behind it, and the forwards waiting for their staging buffers, stall. Measured (call 15b, the
// lean 8B at 80 GiB without clipping): layers 0, 2 and 4 so placed ran 6.07 s a step against 5.89
// for the plan without them, which kept two more layers' internals on the GPU instead. The model
// gets the sign (+0.7%), not yet the size (+2.9%): internals_on_host stays off by default.
TEST(CostModel, InternalsOnTheHostBesideOffloadedBoundariesStallTheForward) {
  const ModelConfig c = test::llama_8b();
  const ModelLayout layout = build_model_layout(c);
  const MachineProfile profile = load_profile(test::fixtures_dir().parent_path().parent_path() /
                                              "bench/profiles/h200-llama-3.1-8b-s2048.json");
  Plan p;
  p.micro_batch = 8;
  p.gpu_slots = 2;
  p.update = UpdateSchedule::DuringBackward;
  p.optimizer_state = OptimizerStateFormat::Bf16SrQ8;
  p.units.assign(layout.units.size(), UnitPlacement::Streamed);
  p.activations.assign(32, ActivationPlacement::OffloadToHost);
  for (size_t l = 21; l < 32; ++l) p.activations[l] = ActivationPlacement::KeepWithInternals;
  const StepShape shape{16384, 4};
  Plan on_host = p;
  for (size_t l = 21; l < 23; ++l) on_host.activations[l] = ActivationPlacement::KeepOnGpu;
  for (size_t l : {0, 2, 4}) on_host.activations[l] = ActivationPlacement::OffloadWithInternals;
  const Prediction without = predict(c, layout, p, profile, shape);
  const Prediction with = predict(c, layout, on_host, profile, shape);
  EXPECT_GT(with.step_seconds, without.step_seconds);
}

}  // namespace
}  // namespace ferry
