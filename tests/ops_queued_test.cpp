// QueuedOps on a SimDevice: a decoder layer's forward, loss and backward issued to the compute
// stream (inputs copied in on h2d, results out on d2h, ordered by events) give the same bits as the
// CPU ops called directly.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "device/device.h"
#include "ops/device_ops.h"
#include "ops/ops.h"
#include "ops/queued_ops.h"
#include "test_util.h"

namespace ferry {
namespace {

constexpr int64_t T = 13, H = 16, Hq = 4, Hkv = 2, D = 4, F = 24, V = 37;

// Every buffer of the layer lives in one image (fp32 tensors and the int32 index arrays), so that
// both runs start from the same bytes and are compared whole.
class Layout {
 public:
  Layout() {
    for (const char* name :
         {"table", "wq", "wk", "wv", "wo", "norm1", "norm2", "wgate", "wup", "wdown", "head"})
      inputs_.push_back(name);
    add("table", {V, H});
    add("wq", {Hq * D, H});
    add("wk", {Hkv * D, H});
    add("wv", {Hkv * D, H});
    add("wo", {H, Hq * D});
    add("norm1", {H});
    add("norm2", {H});
    add("wgate", {F, H});
    add("wup", {F, H});
    add("wdown", {H, F});
    add("head", {V, H});
    for (const char* name : {"x",    "h1",   "o",   "x2",  "h2",  "down", "x3",   "dx3",  "dh1", "dh1q",
                             "dh1k", "dh1v", "dxn", "dx2", "dh2", "dh2a", "dh2b", "dx2n", "dx",  "xcopy"})
      add(name, {T, H});
    add("q", {T, Hq, D});
    add("att", {T, Hq, D});
    add("datt", {T, Hq, D});
    add("dq", {T, Hq, D});
    for (const char* name : {"k", "v", "dk", "dv"}) add(name, {T, Hkv, D});
    for (const char* name : {"gate", "up", "act", "dact", "dgate", "dup"}) add(name, {T, F});
    add("rstd1", {T});
    add("rstd2", {T});
    add("lse", {Hq, T});
    add("loss", {1});
    for (const char* name :
         {"dtable", "dwq", "dwk", "dwv", "dwo", "dnorm1", "dnorm2", "dwgate", "dwup", "dwdown", "dhead"})
      add(std::string(name), dims_of(std::string(name).substr(1)));
    add("inv_freq", {D / 2});
    for (const char* name : {"ids", "positions", "doc_start", "targets"}) add(name, {T});
  }

  size_t floats() const { return size_; }
  Tensor tensor(float* base, const std::string& name) const {
    const auto& [offset, dims] = entries_.at(name);
    Tensor t(base + offset, DType::F32, {});
    for (int64_t d : dims) t.shape[t.ndim++] = d;
    return t;
  }
  int32_t* ints(float* base, const std::string& name) const {
    return reinterpret_cast<int32_t*>(base + entries_.at(name).first);
  }

  // The starting image: random weights and activations, index arrays of two packed documents.
  std::vector<float> initial_image() const {
    std::vector<float> image = test::random_vector(size_, 77);
    float* base = image.data();
    for (const auto& name : inputs_) {
      Tensor t = tensor(base, name);
      for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] *= 0.5f;
    }
    for (int64_t i = 0; i < D / 2; ++i) tensor(base, "inv_freq").f32()[i] = std::pow(10000.0f, -2.0f * i / D);
    int32_t* ids = ints(base, "ids");
    int32_t* positions = ints(base, "positions");
    int32_t* doc_start = ints(base, "doc_start");
    int32_t* targets = ints(base, "targets");
    for (int32_t t = 0; t < T; ++t) {
      const int32_t start = t < 6 ? 0 : 6;  // documents [0, 6) and [6, 13)
      ids[t] = (t * 7 + 3) % V;
      positions[t] = t - start;
      doc_start[t] = start;
      targets[t] = (t == 5 || t == 9) ? kIgnoreIndex : (t * 5 + 1) % V;
    }
    return image;
  }

 private:
  void add(const std::string& name, std::vector<int64_t> dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    entries_[name] = {size_, dims};
    size_ += (static_cast<size_t>(n) + 15) / 16 * 16;
  }
  std::vector<int64_t> dims_of(const std::string& name) const { return entries_.at(name).second; }

  std::map<std::string, std::pair<size_t, std::vector<int64_t>>> entries_;
  std::vector<std::string> inputs_;
  size_t size_ = 0;
};

// Forward, fused loss and backward of one pre-norm decoder layer with a SwiGLU MLP.
void run_layer(Ops& ops, const Layout& L, float* base) {
  auto t = [&](const char* name) { return L.tensor(base, name); };
  const int32_t* ids = L.ints(base, "ids");
  const int32_t* positions = L.ints(base, "positions");
  const int32_t* doc_start = L.ints(base, "doc_start");
  const int32_t* targets = L.ints(base, "targets");
  const float* inv_freq = t("inv_freq").f32();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const Tensor none;
  auto flat = [](Tensor x) { return x.view({x.shape[0], x.numel() / x.shape[0]}); };

  for (const char* g : {"dtable", "dwq", "dwk", "dwv", "dwo", "dnorm1", "dnorm2", "dwgate", "dwup", "dwdown",
                        "dhead", "loss"})
    ops.zero(t(g));

  ops.embedding_forward(ids, t("table"), t("x"));
  ops.rmsnorm_forward(t("x"), t("norm1"), 1e-6f, t("h1"), t("rstd1"));
  ops.linear_forward(t("h1"), t("wq"), none, none, flat(t("q")));
  ops.linear_forward(t("h1"), t("wk"), none, none, flat(t("k")));
  ops.linear_forward(t("h1"), t("wv"), none, none, flat(t("v")));
  ops.rope(t("q"), positions, inv_freq, false);
  ops.rope(t("k"), positions, inv_freq, false);
  ops.attention_forward(t("q"), t("k"), t("v"), doc_start, scale, t("att"), t("lse"));
  ops.linear_forward(flat(t("att")), t("wo"), none, none, t("o"));
  ops.add(t("x"), t("o"), t("x2"));
  ops.rmsnorm_forward(t("x2"), t("norm2"), 1e-6f, t("h2"), t("rstd2"));
  ops.linear_forward(t("h2"), t("wgate"), none, none, t("gate"));
  ops.linear_forward(t("h2"), t("wup"), none, none, t("up"));
  ops.swiglu_forward(t("gate"), t("up"), t("act"));
  ops.linear_forward(t("act"), t("wdown"), none, none, t("down"));
  ops.add(t("x2"), t("down"), t("x3"));
  ops.copy(t("x3"), t("xcopy"));

  ops.linear_cross_entropy(t("x3"), t("head"), targets, 1.0f / 11.0f, t("dx3"), t("dhead"), t("loss"), none,
                           1);

  ops.linear_backward(t("act"), t("wdown"), t("dx3"), t("dact"), t("dwdown"), none, false);
  ops.swiglu_backward(t("gate"), t("up"), t("dact"), t("dgate"), t("dup"), Tensor());
  ops.linear_backward(t("h2"), t("wgate"), t("dgate"), t("dh2a"), t("dwgate"), none, false);
  ops.linear_backward(t("h2"), t("wup"), t("dup"), t("dh2b"), t("dwup"), none, false);
  ops.add(t("dh2a"), t("dh2b"), t("dh2"));
  ops.rmsnorm_backward(t("x2"), t("norm2"), t("rstd2"), t("dh2"), none, t("dx2n"), t("dnorm2"));
  ops.add(t("dx3"), t("dx2n"), t("dx2"));
  ops.linear_backward(flat(t("att")), t("wo"), t("dx2"), flat(t("datt")), t("dwo"), none, false);
  ops.attention_backward(t("q"), t("k"), t("v"), doc_start, scale, t("att"), t("lse"), t("datt"), t("dq"),
                         t("dk"), t("dv"));
  ops.rope(t("dq"), positions, inv_freq, true);
  ops.rope(t("dk"), positions, inv_freq, true);
  ops.linear_backward(t("h1"), t("wq"), flat(t("dq")), t("dh1q"), t("dwq"), none, false);
  ops.linear_backward(t("h1"), t("wk"), flat(t("dk")), t("dh1k"), t("dwk"), none, false);
  ops.linear_backward(t("h1"), t("wv"), flat(t("dv")), t("dh1v"), t("dwv"), none, false);
  ops.add(t("dh1q"), t("dh1k"), t("dh1"));
  ops.add(t("dh1"), t("dh1v"), t("dh1"));
  ops.rmsnorm_backward(t("x"), t("norm1"), t("rstd1"), t("dh1"), none, t("dxn"), t("dnorm1"));
  ops.add(t("dx2"), t("dxn"), t("dx"));
  ops.embedding_backward(ids, t("dx"), t("dtable"));
}

TEST(QueuedOps, SimDeviceGetsQueuedCpuOps) {
  auto device = make_sim_device(SimDeviceOptions{});
  auto ops = make_device_ops(*device);
  EXPECT_STREQ(ops->name(), "queued cpu");
}

TEST(QueuedOps, ALayerOnTheComputeStreamMatchesDirectCpuOpsBitForBit) {
  const Layout layout;
  const std::vector<float> start = layout.initial_image();
  const size_t bytes = layout.floats() * sizeof(float);

  std::vector<float> direct = start;
  auto cpu = make_cpu_ops();
  run_layer(*cpu, layout, direct.data());

  SimDeviceOptions options;
  options.h2d_bytes_per_second = 1e9;  // slow enough that an unordered read would see poison
  options.copy_latency_seconds = 0.002;
  auto device = make_sim_device(options);
  auto ops = make_device_ops(*device);
  // Separate staging buffers: the host must not touch a pinned buffer an unfinished copy reads.
  PinnedBuffer staging_in(*device, bytes, "staging in"), staging_out(*device, bytes, "staging out");
  DeviceBuffer image(*device, bytes, "layer image");
  std::memcpy(staging_in.data(), start.data(), bytes);
  device->copy_to_device(image.data(), staging_in.data(), bytes, StreamKind::HostToDevice);
  device->wait(StreamKind::Compute, device->record(StreamKind::HostToDevice));
  run_layer(*ops, layout, image.as<float>());  // returns before the ops have run
  device->wait(StreamKind::DeviceToHost, device->record(StreamKind::Compute));
  device->copy_to_host(staging_out.data(), image.data(), bytes, StreamKind::DeviceToHost);
  device->synchronize_all();

  std::vector<float> queued(layout.floats());
  std::memcpy(queued.data(), staging_out.data(), bytes);
  EXPECT_EQ(std::memcmp(queued.data(), direct.data(), bytes), 0);
  // The run did something: a finite loss, nonzero gradients.
  const float loss = layout.tensor(queued.data(), "loss").f32()[0];
  EXPECT_TRUE(std::isfinite(loss) && loss > 0.0f) << loss;
  EXPECT_NE(layout.tensor(queued.data(), "dwq").f32()[0], 0.0f);
}

TEST(QueuedOps, CallsReturnBeforeTheOpsRunAndRunInStreamOrder) {
  auto device = make_sim_device(SimDeviceOptions{});
  auto ops = make_device_ops(*device);
  std::atomic<bool> go{false};
  device->host_task(StreamKind::Compute, [&] {
    while (!go) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  DeviceBuffer buffer(*device, 64 * sizeof(float), "x");
  const Tensor x = Tensor::f32(buffer.as<float>(), {64});
  ops->zero(x);  // queued behind the blocked task: the host is not held
  ops->add(x, x, x);
  go = true;
  device->synchronize_all();
  for (int i = 0; i < 64; ++i) EXPECT_EQ(buffer.as<float>()[i], 0.0f);
}

}  // namespace
}  // namespace ferry
