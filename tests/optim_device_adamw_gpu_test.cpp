// DeviceAdamW on each device kind (the simulated device's queued reference, and GpuAdamW on CUDA
// when a GPU is present) against the host's computations, bit for bit: norm partials of fp32 and
// bf16 gradients as clip.h's grad_sumsq_partials, their in-order accumulation, the clip
// coefficient, and the AdamW step with its bf16 copy as adamw_step. The sliding engine relies on
// this equality to split units between the host and the device without changing a step.
#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "device/device.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/device_adamw.h"
#include "test_util.h"

namespace ferry {
namespace {

class DeviceAdamWTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cuda") {
      if (!cuda_available()) GTEST_SKIP() << "no GPU";
      device_ = make_cuda_device(0, size_t{1} << 30);
    } else {
      device_ = make_sim_device({});
    }
    adamw_ = make_device_adamw(*device_);
  }
  // A device copy of `bytes` bytes of `host`.
  DeviceBuffer upload(const void* host, size_t bytes) {
    DeviceBuffer d(*device_, bytes, "test input");
    PinnedBuffer staging(*device_, bytes, "test staging");
    std::memcpy(staging.data(), host, bytes);
    device_->copy_to_device(d.data(), staging.data(), bytes, StreamKind::HostToDevice);
    device_->synchronize(device_->record(StreamKind::HostToDevice));
    return d;
  }
  template <typename T>
  std::vector<T> download(const DeviceBuffer& d, size_t count) {
    device_->synchronize_all();
    PinnedBuffer staging(*device_, count * sizeof(T), "test readback");
    device_->copy_to_host(staging.data(), d.data(), count * sizeof(T), StreamKind::DeviceToHost);
    device_->synchronize(device_->record(StreamKind::DeviceToHost));
    std::vector<T> out(count);
    std::memcpy(out.data(), staging.data(), count * sizeof(T));
    return out;
  }
  std::unique_ptr<Device> device_;
  std::unique_ptr<DeviceAdamW> adamw_;
};

TEST_P(DeviceAdamWTest, NormPartialsAccumulationAndClipAreTheHostsBits) {
  for (size_t n : {size_t{1}, size_t{31}, size_t{65535}, size_t{65536}, size_t{65537}, size_t{300007}}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const auto g = test::random_vector(n, 3 + n, -2.0f, 2.0f);
    std::vector<uint16_t> g16(n);
    for (size_t i = 0; i < n; ++i) g16[i] = f32_to_bf16(g[i]);
    for (DType dtype : {DType::F32, DType::BF16}) {
      const void* host = dtype == DType::F32 ? static_cast<const void*>(g.data()) : g16.data();
      const GradSpan span{host, n, dtype};
      const std::vector<double> want = grad_sumsq_partials(std::span<const GradSpan>(&span, 1));
      ASSERT_EQ(want.size(), grad_sumsq_chunks(n));
      DeviceBuffer grad = upload(host, n * dtype_size(dtype));
      DeviceBuffer partials(*device_, want.size() * sizeof(double), "partials");
      adamw_->grad_sumsq_partials(grad.data(), dtype, n, partials.as<double>());
      const std::vector<double> got = download<double>(partials, want.size());
      for (size_t k = 0; k < want.size(); ++k) ASSERT_EQ(got[k], want[k]) << "chunk " << k;

      // Accumulated after an earlier unit's sum, as the engine adds unit after unit.
      const double earlier = 12.375;
      DeviceBuffer sum = upload(&earlier, sizeof(double));
      adamw_->accumulate(partials.as<double>(), want.size(), sum.as<double>());
      std::vector<double> all{earlier};
      all.insert(all.end(), want.begin(), want.end());
      const double norm = norm_from_partials(all);
      EXPECT_EQ(std::sqrt(download<double>(sum, 1)[0]), norm);
      DeviceBuffer coefficient(*device_, 256, "clip");
      for (double max_norm : {0.0, 1.0, 1e6}) {
        adamw_->clip_coefficient(sum.as<double>(), max_norm, coefficient.as<float>());
        EXPECT_EQ(download<float>(coefficient, 1)[0], clip_coefficient(norm, max_norm))
            << "max_norm " << max_norm;
      }
    }
  }
}

// The sum of many partials (a 3B layer has ~12k; the kernel reads them in tiles of 4096): the
// host's bits, in the host's order, from an earlier unit's sum; magnitudes over twelve decades so
// that another order would round differently.
TEST_P(DeviceAdamWTest, ManyPartialsAddUpToTheHostsBits) {
  for (size_t count : {size_t{4095}, size_t{4096}, size_t{4097}, size_t{12289}, size_t{50000}}) {
    SCOPED_TRACE(::testing::Message() << "count=" << count);
    const auto mantissas = test::random_vector(count, 7 + count, 1.0f, 2.0f);
    std::vector<double> partials(count);
    for (size_t k = 0; k < count; ++k)
      partials[k] = static_cast<double>(mantissas[k]) * std::ldexp(1.0, static_cast<int>(k * 7919 % 41) - 20);
    const double earlier = 3.0625;
    std::vector<double> all{earlier};
    all.insert(all.end(), partials.begin(), partials.end());
    // Pairwise, as a parallel reduction would add them, the sum rounds differently.
    std::vector<double> level(all);
    while (level.size() > 1) {
      std::vector<double> next;
      for (size_t k = 0; k < level.size(); k += 2)
        next.push_back(k + 1 < level.size() ? level[k] + level[k + 1] : level[k]);
      level = std::move(next);
    }
    double in_order = 0.0;
    for (double p : all) in_order += p;  // clip.cpp's norm_from_partials, before its square root
    ASSERT_NE(level[0], in_order);
    DeviceBuffer on_device = upload(partials.data(), count * sizeof(double));
    DeviceBuffer sum = upload(&earlier, sizeof(double));
    adamw_->accumulate(on_device.as<double>(), count, sum.as<double>());
    const double got = download<double>(sum, 1)[0];
    EXPECT_EQ(got, in_order);
    EXPECT_EQ(std::sqrt(got), norm_from_partials(all));
  }
}

TEST_P(DeviceAdamWTest, StepIsTheReferenceWithItsBf16Copy) {
  const size_t n = 100003;
  const std::vector<AdamWSegment> segments{{0, 40000, true}, {40000, 17, false}, {40017, n - 40017, true}};
  AdamWHyper hyper;
  hyper.lr = 3e-3;
  hyper.weight_decay = 0.1;
  hyper.beta2 = 0.95;
  std::vector<float> master = test::random_vector(n, 1), m = test::random_vector(n, 2, -0.01f, 0.01f),
                     v = test::random_vector(n, 3, 0.0f, 1e-4f), grad = test::random_vector(n, 4);
  DeviceBuffer dm = upload(master.data(), n * 4), dmm = upload(m.data(), n * 4), dv = upload(v.data(), n * 4),
               dg = upload(grad.data(), n * 4);
  DeviceBuffer out(*device_, n * 2, "bf16 weights");
  const float scale = 0.37f;
  DeviceBuffer dscale = upload(&scale, sizeof(float));
  for (int64_t step = 1; step <= 2; ++step) {
    AdamWUnitBuffers b{dm.as<float>(), dmm.as<float>(), dv.as<float>(),
                       dg.data(),      DType::F32,      out.as<uint16_t>()};
    adamw_->step(b, segments, hyper, step, dscale.as<float>());
    for (const AdamWSegment& s : segments)
      adamw_step(master.data() + s.offset, m.data() + s.offset, v.data() + s.offset, grad.data() + s.offset,
                 s.count, hyper, step, s.decay, scale);
  }
  EXPECT_EQ(0, std::memcmp(download<float>(dm, n).data(), master.data(), n * 4));
  EXPECT_EQ(0, std::memcmp(download<float>(dmm, n).data(), m.data(), n * 4));
  EXPECT_EQ(0, std::memcmp(download<float>(dv, n).data(), v.data(), n * 4));
  const std::vector<uint16_t> copy = download<uint16_t>(out, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(copy[i], f32_to_bf16(master[i])) << "element " << i;
}

// The weights a device writes from uploaded fp32 masters (WeightUpload::ConvertOnUpload) are the
// host's f32_to_bf16 of them, ties to even, infinities and NaNs included; fp32 weights are a copy.
// Counts that end off a 4-element boundary, and a misaligned start, take the scalar path.
TEST_P(DeviceAdamWTest, WrittenWeightsAreTheHostsConversion) {
  const size_t n = 70001;
  std::vector<float> master = test::random_vector(n, 7, -3.0f, 3.0f);
  const uint32_t specials[] = {0x3f808000u, 0x3f818000u, 0x7f800000u, 0xff800000u, 0x7fc00001u,
                               0xffa00000u, 0x00000001u, 0x80000000u, 0x7f7fffffu, 0x3f80ffffu};
  for (size_t k = 0; k < std::size(specials); ++k) std::memcpy(&master[k * 7], &specials[k], 4);
  DeviceBuffer dm = upload(master.data(), n * 4);
  DeviceBuffer bf16(*device_, n * 2, "bf16 weights"), f32(*device_, n * 4, "fp32 weights");
  device_->fill_zero(bf16.data(), n * 2, StreamKind::Compute);
  adamw_->write_weights(dm.as<float>(), bf16.data(), DType::BF16, n - 1);
  adamw_->write_weights(dm.as<float>() + 1, f32.as<float>() + 1, DType::F32, n - 1);
  const std::vector<uint16_t> got = download<uint16_t>(bf16, n);
  for (size_t i = 0; i + 1 < n; ++i) ASSERT_EQ(got[i], f32_to_bf16(master[i])) << "element " << i;
  EXPECT_EQ(got[n - 1], 0) << "written past the count";
  const std::vector<float> copied = download<float>(f32, n);
  EXPECT_EQ(0, std::memcmp(copied.data() + 1, master.data() + 1, (n - 1) * 4));
  // A start that is not 16-byte aligned.
  adamw_->write_weights(dm.as<float>() + 3, bf16.as<uint16_t>() + 3, DType::BF16, 1001);
  const std::vector<uint16_t> shifted = download<uint16_t>(bf16, n);
  for (size_t i = 3; i < 1004; ++i) ASSERT_EQ(shifted[i], f32_to_bf16(master[i])) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceAdamWTest, ::testing::Values("sim", "cuda"));

}  // namespace
}  // namespace ferry
