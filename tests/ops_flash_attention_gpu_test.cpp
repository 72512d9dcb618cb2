// The CUDA flash attention (ops/cuda/flash_attention.h) against the CPU reference attention
// (make_cpu_ops(), fp32), which is fed the very bf16-rounded inputs the GPU gets. Forward and
// backward, head_dim 8 and 16 (simple kernels) and 64 and 128 (tensor cores), awkward token
// counts around the 64/128 tile edges, MHA and GQA, one document, packed documents of uneven
// lengths, and document boundaries inside tiles. Every output buffer has guard bytes on both
// sides and starts as NaN, so out-of-bounds writes and rows never written fail too. On a compute
// capability 9.0 device the cases of flash_attention_forward/_backward test the wgmma kernels
// (flash_attention.h; unless FERRY_FLASH_WGMMA=0), the _sm80 cases the mma.sync kernels.
//
// Tolerances, from bf16 precision (unit roundoff u = 2^-9 for round-to-nearest with 8 bits of
// mantissa; 2^-8 is one bf16 ulp at 1):
// * out: a row is a convex combination of v rows. The tensor-core kernel rounds each weight to
//   bf16 before the P V product (relative error <= u per weight, so <= u max|v| in the sum) and
//   rounds the row once to bf16 (<= u |out| <= u max|v|): |err| <= 2^-8 max|v| over the rows the
//   query attends, plus fp32 noise. We allow twice that: |err| <= 2 * 2^-8 * max|v|.
// * lse: computed in fp32 from the same bf16 inputs on both sides; only summation order differs
//   (~1e-6 relative), so 1e-3 absolute.
// * dq, dk, dv: sums over many queries or keys of products with P and dS, each rounded to bf16
//   once before a tensor-core product, and delta = rowsum(dout * out) uses the bf16 out (the CPU
//   uses its fp32 out). Each element is then off by a few u of the magnitude of the terms it sums,
//   so we require |err| <= 2^-5 max|ref| elementwise (over the whole tensor) and the relative RMS
//   error sqrt(sum err^2 / sum ref^2) <= 2^-6, which a wrong mask or a dropped term far exceeds.
// NaN or Inf never passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "core/env_switch.h"
#include "ops/ops.h"
#include "test_util.h"

#if FERRY_HAVE_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/flash_attention.h"
#include "ops/cuda_ops_sizes.h"
#endif

namespace ferry {
namespace {

#if !FERRY_HAVE_CUDA

TEST(FlashAttentionGpu, NeedsCudaBuild) {
  GTEST_SKIP() << "built without CUDA";
}

#else

constexpr double kOutUlps = 2.0;  // |err| <= kOutUlps * 2^-8 * max|v|
constexpr double kLseAtol = 1e-3;
constexpr double kGradMaxRel = 1.0 / 32;  // |err| <= 2^-5 max|ref|
constexpr double kGradRmsRel = 1.0 / 64;  // rms(err) <= 2^-6 rms(ref)

std::string cuda_error(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

#define CUDA_OK(call)                                                \
  do {                                                               \
    const cudaError_t e_ = (call);                                   \
    ASSERT_EQ(e_, cudaSuccess) << #call << " -> " << cuda_error(e_); \
  } while (0)

bool gpu_available(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    *why = e != cudaSuccess ? "cudaGetDeviceCount: " + cuda_error(e) : "no CUDA device";
    return false;
  }
  return true;
}

#define SKIP_WITHOUT_GPU()                           \
  do {                                               \
    std::string why_;                                \
    if (!gpu_available(&why_)) GTEST_SKIP() << why_; \
  } while (0)

// A device allocation with kGuard bytes of 0xff on both sides of the usable region, which starts
// as 0xff bytes too (NaN in bf16 and fp32). guards_intact() says whether anything wrote outside.
class DeviceBuffer {
 public:
  static constexpr size_t kGuard = 256;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&base_, bytes + 2 * kGuard) != cudaSuccess) base_ = nullptr;
    if (base_) cudaMemset(base_, 0xff, bytes + 2 * kGuard);
  }
  ~DeviceBuffer() {
    if (base_) cudaFree(base_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  bool ok() const { return base_ != nullptr; }
  void* get() const { return static_cast<char*>(base_) + kGuard; }
  size_t bytes() const { return bytes_; }
  void upload(const void* host) const { cudaMemcpy(get(), host, bytes_, cudaMemcpyHostToDevice); }
  void download(void* host) const { cudaMemcpy(host, get(), bytes_, cudaMemcpyDeviceToHost); }
  bool guards_intact() const {
    std::vector<unsigned char> g(kGuard);
    for (size_t offset : {size_t{0}, kGuard + bytes_}) {
      cudaMemcpy(g.data(), static_cast<char*>(base_) + offset, kGuard, cudaMemcpyDeviceToHost);
      for (unsigned char c : g)
        if (c != 0xff) return false;
    }
    return true;
  }

 private:
  void* base_ = nullptr;
  size_t bytes_;
};

enum class Docs { kOne, kPacked, kBoundaries, kRows };

const char* docs_name(Docs d) {
  switch (d) {
    case Docs::kOne:
      return "one";
    case Docs::kPacked:
      return "packed";
    case Docs::kBoundaries:
      return "boundaries";
    case Docs::kRows:
      return "rows";
  }
  return "?";
}

// doc_start of T tokens.
// kPacked: uneven lengths 1..~150 from a fixed generator, with some documents of one token.
// kBoundaries: documents starting at 100 (inside the first 128-query and the second 64-key tile),
// 130 and 131 (a one-token document), 300, 700 -- those below T.
std::vector<int32_t> make_doc_start(Docs docs, int64_t T, int64_t row) {
  std::vector<int32_t> starts = {0};
  if (docs == Docs::kPacked) {
    uint64_t state = 0x9e3779b97f4a7c15ull;
    int64_t t = 0;
    while (true) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const int64_t r = static_cast<int64_t>(state >> 33);
      const int64_t len = (r % 5 == 0) ? 1 : 1 + r % 150;
      t += len;
      if (t >= T) break;
      starts.push_back(static_cast<int32_t>(t));
    }
  } else if (docs == Docs::kRows) {
    for (int64_t s = row; s < T; s += row) starts.push_back(static_cast<int32_t>(s));
  } else if (docs == Docs::kBoundaries) {
    for (int32_t s : {100, 130, 131, 300, 700})
      if (s < T) starts.push_back(s);
  }
  std::vector<int32_t> ds(static_cast<size_t>(T));
  size_t doc = 0;
  for (int64_t t = 0; t < T; ++t) {
    while (doc + 1 < starts.size() && starts[doc + 1] <= t) ++doc;
    ds[static_cast<size_t>(t)] = starts[doc];
  }
  return ds;
}

struct Case {
  int D;
  int64_t T;
  int Hq, Hkv;
  Docs docs;
  float sharpness;  // scale = sharpness / sqrt(D); 1 gives flat softmaxes on these inputs, 8 peaked ones
  int64_t row = 0;  // kRows: tokens per row (each row one document)
};

std::string case_name(const Case& c) {
  std::ostringstream s;
  s << "D" << c.D << "_T" << c.T << "_H" << c.Hq << "x" << c.Hkv << "_" << docs_name(c.docs);
  if (c.docs == Docs::kRows) s << c.row;
  if (c.sharpness != 1.0f) s << "_sharp";
  return s.str();
}

// Random values in [lo, hi) rounded to bf16: the bits for the GPU, the same values as fp32 for the CPU.
struct Bf16Data {
  std::vector<float> f32;
  std::vector<uint16_t> bits;
};
Bf16Data random_bf16(size_t count, uint64_t seed, float lo, float hi) {
  Bf16Data d;
  d.f32 = test::random_vector(count, seed, lo, hi);
  d.bits.resize(count);
  for (size_t i = 0; i < count; ++i) {
    d.bits[i] = f32_to_bf16(d.f32[i]);
    d.f32[i] = bf16_to_f32(d.bits[i]);
  }
  return d;
}

std::vector<float> to_f32(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_f32(bits[i]);
  return out;
}

// out (T,Hq,D) against the reference, row by row with the row's own bound 2 * 2^-8 * max|v| over
// the v rows it attends.
::testing::AssertionResult out_close(const std::vector<float>& out, const std::vector<float>& ref,
                                     const std::vector<float>& v, const std::vector<int32_t>& ds,
                                     const Case& c) {
  const int64_t T = c.T, D = c.D, group = c.Hq / c.Hkv;
  // token_max[j * Hkv + g] = max_d |v[j, g, d]|
  std::vector<float> token_max(static_cast<size_t>(T * c.Hkv), 0.0f);
  for (int64_t j = 0; j < T; ++j)
    for (int64_t g = 0; g < c.Hkv; ++g)
      for (int64_t d = 0; d < D; ++d)
        token_max[j * c.Hkv + g] = std::max(token_max[j * c.Hkv + g], std::fabs(v[(j * c.Hkv + g) * D + d]));
  int64_t bad = 0;
  double worst_ratio = -1;
  std::ostringstream first;
  int64_t wt = 0, wh = 0, wd = 0;
  double wtol = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < c.Hq; ++h) {
      float vmax = 0.0f;
      for (int64_t j = ds[t]; j <= t; ++j) vmax = std::max(vmax, token_max[j * c.Hkv + h / group]);
      const double tol = kOutUlps * std::ldexp(1.0, -8) * vmax + 1e-6;
      for (int64_t d = 0; d < D; ++d) {
        const size_t i = static_cast<size_t>((t * c.Hq + h) * D + d);
        const double err = std::fabs(static_cast<double>(out[i]) - ref[i]);
        const bool ok = std::isfinite(out[i]) && err <= tol;
        const double ratio = std::isfinite(out[i]) ? err / tol : INFINITY;
        if (!ok && bad++ < 5)
          first << "\n  out[t=" << t << ", h=" << h << ", d=" << d << "] = " << out[i] << ", reference "
                << ref[i] << ", |err| " << err << " > tol " << tol << " (doc_start " << ds[t] << ")";
        if (ratio > worst_ratio) {
          worst_ratio = ratio;
          wt = t, wh = h, wd = d, wtol = tol;
        }
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  const size_t wi = static_cast<size_t>((wt * c.Hq + wh) * D + wd);
  return ::testing::AssertionFailure()
         << case_name(c) << ": out has " << bad << " of " << out.size()
         << " elements beyond tolerance; worst out[t=" << wt << ", h=" << wh << ", d=" << wd
         << "] = " << out[wi] << " vs " << ref[wi] << " (tol " << wtol << ")" << first.str();
}

::testing::AssertionResult lse_close(const std::vector<float>& lse, const std::vector<float>& ref,
                                     const Case& c) {
  int64_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < lse.size(); ++i) {
    const double err = std::fabs(static_cast<double>(lse[i]) - ref[i]);
    if (!(std::isfinite(lse[i]) && err <= kLseAtol) && bad++ < 5)
      first << "\n  lse[h=" << i / c.T << ", t=" << i % c.T << "] = " << lse[i] << ", reference " << ref[i];
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << case_name(c) << ": lse has " << bad << " of " << lse.size()
                                       << " elements off by more than " << kLseAtol << first.str();
}

// A gradient (T, heads, D) against the reference: elementwise |err| <= 2^-5 max|ref| and relative
// RMS error <= 2^-6.
::testing::AssertionResult grad_close(const char* what, const std::vector<float>& got,
                                      const std::vector<float>& ref, int64_t heads, const Case& c) {
  double ref_max = 0, err2 = 0, ref2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    ref_max = std::max(ref_max, std::fabs(static_cast<double>(ref[i])));
    ref2 += static_cast<double>(ref[i]) * ref[i];
  }
  const double tol = kGradMaxRel * ref_max + 1e-6;
  int64_t bad = 0;
  size_t worst = 0;
  double worst_err = -1;
  std::ostringstream first;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    const bool finite = std::isfinite(got[i]);
    if (finite) err2 += err * err;
    const double e = finite ? err : INFINITY;
    if (e > worst_err) worst_err = e, worst = i;
    if (!(finite && err <= tol) && bad++ < 5) {
      const int64_t d = static_cast<int64_t>(i) % c.D, row = static_cast<int64_t>(i) / c.D;
      first << "\n  " << what << "[t=" << row / heads << ", head=" << row % heads << ", d=" << d
            << "] = " << got[i] << ", reference " << ref[i];
    }
  }
  const double rms_rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  if (bad == 0 && rms_rel <= kGradRmsRel) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << case_name(c) << ": " << what << ": " << bad << " of " << ref.size() << " elements beyond " << tol
         << " (2^-5 max|ref|, max|ref| " << ref_max << "), relative rms error " << rms_rel << " (limit "
         << kGradRmsRel << "); worst at " << worst << ": " << got[worst] << " vs " << ref[worst]
         << first.str();
}

// Everything one case needs on the host and the device.
struct Problem {
  Case c;
  float scale;
  std::vector<int32_t> ds;
  Bf16Data q, k, v, dout;
  std::unique_ptr<DeviceBuffer> dq_in, dk_in, dv_in, d_ds, d_out, d_lse, d_dout, d_dq, d_dk, d_dv, d_ws;

  explicit Problem(const Case& cs, uint64_t seed = 1) : c(cs) {
    const size_t nq = static_cast<size_t>(c.T * c.Hq * c.D), nk = static_cast<size_t>(c.T * c.Hkv * c.D);
    scale = c.sharpness / std::sqrt(static_cast<float>(c.D));
    ds = make_doc_start(c.docs, c.T, c.row);
    q = random_bf16(nq, seed * 10 + 1, -1.0f, 1.0f);
    k = random_bf16(nk, seed * 10 + 2, -1.0f, 1.0f);
    v = random_bf16(nk, seed * 10 + 3, -1.0f, 1.0f);
    dout = random_bf16(nq, seed * 10 + 4, -1.0f, 1.0f);
    auto make = [](size_t bytes) { return std::make_unique<DeviceBuffer>(std::max<size_t>(bytes, 16)); };
    dq_in = make(nq * 2), dk_in = make(nk * 2), dv_in = make(nk * 2), d_dout = make(nq * 2);
    d_ds = make(ds.size() * 4), d_out = make(nq * 2), d_lse = make(static_cast<size_t>(c.Hq * c.T) * 4);
    d_dq = make(nq * 2), d_dk = make(nk * 2), d_dv = make(nk * 2);
    d_ws = make(flash_attention_backward_workspace(c.T, c.Hq, c.Hkv, c.D));
    dq_in->upload(q.bits.data());
    dk_in->upload(k.bits.data());
    dv_in->upload(v.bits.data());
    d_dout->upload(dout.bits.data());
    d_ds->upload(ds.data());
  }
  bool allocated() const {
    for (auto* b : {&dq_in, &dk_in, &dv_in, &d_ds, &d_out, &d_lse, &d_dout, &d_dq, &d_dk, &d_dv, &d_ws})
      if (!(*b)->ok()) return false;
    return true;
  }
  FlashAttentionParams params() const {
    return FlashAttentionParams{dq_in->get(),
                                dk_in->get(),
                                dv_in->get(),
                                d_out->get(),
                                static_cast<float*>(d_lse->get()),
                                static_cast<const int32_t*>(d_ds->get()),
                                c.T,
                                c.Hq,
                                c.Hkv,
                                c.D,
                                scale,
                                c.Hq};
  }
  FlashAttentionBackwardParams backward_params() const {
    return FlashAttentionBackwardParams{params(),    d_dout->get(), d_dq->get(),  d_dk->get(),
                                        d_dv->get(), d_ws->get(),   d_ws->bytes()};
  }
  std::vector<float> download_bf16(const DeviceBuffer& b) const {
    std::vector<uint16_t> bits(b.bytes() / 2);
    b.download(bits.data());
    return to_f32(bits);
  }
  std::vector<float> download_f32(const DeviceBuffer& b) const {
    std::vector<float> x(b.bytes() / 4);
    b.download(x.data());
    return x;
  }
};

struct Reference {
  std::vector<float> out, lse, dq, dk, dv;
};

Reference cpu_reference(Problem& p) {
  const Case& c = p.c;
  Reference r;
  const size_t nq = p.q.f32.size(), nk = p.k.f32.size();
  r.out.resize(nq), r.lse.resize(static_cast<size_t>(c.Hq * c.T)), r.dq.resize(nq), r.dk.resize(nk),
      r.dv.resize(nk);
  auto ops = make_cpu_ops();
  const Tensor q = Tensor::f32(p.q.f32.data(), {c.T, c.Hq, c.D});
  const Tensor k = Tensor::f32(p.k.f32.data(), {c.T, c.Hkv, c.D});
  const Tensor v = Tensor::f32(p.v.f32.data(), {c.T, c.Hkv, c.D});
  const Tensor out = Tensor::f32(r.out.data(), {c.T, c.Hq, c.D});
  const Tensor lse = Tensor::f32(r.lse.data(), {c.Hq, c.T});
  ops->attention_forward(q, k, v, p.ds.data(), p.scale, out, lse);
  ops->attention_backward(
      q, k, v, p.ds.data(), p.scale, out, lse, Tensor::f32(p.dout.f32.data(), {c.T, c.Hq, c.D}),
      Tensor::f32(r.dq.data(), {c.T, c.Hq, c.D}), Tensor::f32(r.dk.data(), {c.T, c.Hkv, c.D}),
      Tensor::f32(r.dv.data(), {c.T, c.Hkv, c.D}));
  return r;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const int64_t Ts[] = {1, 31, 33, 127, 128, 257, 1000};
  for (int D : {8, 16, 64, 128}) {
    for (int64_t T : Ts) {
      cases.push_back({D, T, 4, 2, Docs::kOne, 1.0f});
      if (T >= 31) cases.push_back({D, T, 4, 2, Docs::kPacked, 1.0f});
    }
    for (int64_t T : {int64_t{127}, int64_t{257}, int64_t{1000}}) {
      cases.push_back({D, T, 8, 8, Docs::kBoundaries, 1.0f});
      cases.push_back({D, T, 32, 8, Docs::kPacked, 1.0f});
    }
    cases.push_back({D, 257, 4, 2, Docs::kBoundaries, 8.0f});
    cases.push_back({D, 1000, 8, 8, Docs::kOne, 8.0f});
  }
  return cases;
}

// Every output of `p` against the reference, and no write outside the buffers (`more` too).
void expect_matches_reference(const Problem& p, const Reference& ref, const Case& c,
                              const DeviceBuffer* more = nullptr) {
  const std::vector<const DeviceBuffer*> buffers = {p.d_out.get(), p.d_lse.get(), p.d_dq.get(), p.d_dk.get(),
                                                    p.d_dv.get(),  p.d_ws.get(),  more};
  for (const DeviceBuffer* b : buffers) {
    if (b == nullptr) continue;
    EXPECT_TRUE(b->guards_intact()) << case_name(c) << ": a kernel wrote outside its buffer";
  }
  EXPECT_TRUE(out_close(p.download_bf16(*p.d_out), ref.out, p.v.f32, p.ds, c));
  EXPECT_TRUE(lse_close(p.download_f32(*p.d_lse), ref.lse, c));
  EXPECT_TRUE(grad_close("dq", p.download_bf16(*p.d_dq), ref.dq, c.Hq, c));
  EXPECT_TRUE(grad_close("dk", p.download_bf16(*p.d_dk), ref.dk, c.Hkv, c));
  EXPECT_TRUE(grad_close("dv", p.download_bf16(*p.d_dv), ref.dv, c.Hkv, c));
}

class FlashAttentionGpu : public ::testing::TestWithParam<Case> {};

TEST_P(FlashAttentionGpu, ForwardAndBackwardMatchCpuReference) {
  SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  Problem p(c);
  ASSERT_TRUE(p.allocated()) << "cudaMalloc failed";
  const Reference ref = cpu_reference(p);

  ASSERT_NO_THROW(flash_attention_forward(p.params(), nullptr));
  ASSERT_NO_THROW(flash_attention_backward(p.backward_params(), nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  expect_matches_reference(p, ref, c);
}

INSTANTIATE_TEST_SUITE_P(Cases, FlashAttentionGpu, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// The mma.sync kernels against the CPU reference at every case of a tensor-core head dim: a
// compute capability 9.0 device runs the wgmma kernels in the cases above instead (next test).
class FlashAttentionSm80 : public ::testing::TestWithParam<Case> {};

TEST_P(FlashAttentionSm80, ForwardAndBackwardMatchCpuReference) {
  SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  Problem p(c);
  ASSERT_TRUE(p.allocated()) << "cudaMalloc failed";
  const Reference ref = cpu_reference(p);
  ASSERT_NO_THROW(flash_attention_forward_sm80(p.params(), nullptr));
  ASSERT_NO_THROW(flash_attention_backward_sm80(p.backward_params(), nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  expect_matches_reference(p, ref, c);
}

std::vector<Case> tensor_core_cases() {
  std::vector<Case> cases;
  for (const Case& c : all_cases())
    if (c.D == 64 || c.D == 128) cases.push_back(c);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, FlashAttentionSm80, ::testing::ValuesIn(tensor_core_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// A build that targets sm_90 runs the wgmma kernels on a compute capability 9.0 device (H100,
// H200) unless FERRY_FLASH_WGMMA=0, so that the cases above test them there; other head dims keep
// their kernels.
TEST(FlashAttentionGpuKernels, HopperRunsTheWgmmaKernels) {
  SKIP_WITHOUT_GPU();
  int device = 0, major = 0, minor = 0;
  CUDA_OK(cudaGetDevice(&device));
  CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_OK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  EXPECT_FALSE(flash_attention_forward_uses_wgmma(16));
  if (!flash_attention_wgmma_built()) {
    EXPECT_FALSE(flash_attention_forward_uses_wgmma(128));
    GTEST_SKIP() << "this build does not target sm_90: it has no wgmma kernels";
  }
  const bool hopper = major == 9 && minor == 0 && env_switch_on("FERRY_FLASH_WGMMA");
  EXPECT_EQ(flash_attention_forward_uses_wgmma(64), hopper);
  EXPECT_EQ(flash_attention_forward_uses_wgmma(128), hopper);
}

// The tensor-core kernels against the simple ones on the GPU, at sizes where the CPU reference
// would be slow: several tiles of queries and keys, packed documents, GQA.
class FlashAttentionTensorCoreVsSimple : public ::testing::TestWithParam<Case> {};

TEST_P(FlashAttentionTensorCoreVsSimple, Match) {
  SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  Problem fast(c), simple(c);
  ASSERT_TRUE(fast.allocated() && simple.allocated()) << "cudaMalloc failed";
  ASSERT_NO_THROW(flash_attention_forward(fast.params(), nullptr));
  ASSERT_NO_THROW(flash_attention_backward(fast.backward_params(), nullptr));
  ASSERT_NO_THROW(flash_attention_forward_simple(simple.params(), nullptr));
  ASSERT_NO_THROW(flash_attention_backward_simple(simple.backward_params(), nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  // The simple kernels round only their outputs; they play the reference here.
  const std::vector<float> ref_out = simple.download_bf16(*simple.d_out);
  EXPECT_TRUE(out_close(fast.download_bf16(*fast.d_out), ref_out, fast.v.f32, fast.ds, c));
  EXPECT_TRUE(lse_close(fast.download_f32(*fast.d_lse), simple.download_f32(*simple.d_lse), c));
  EXPECT_TRUE(grad_close("dq", fast.download_bf16(*fast.d_dq), simple.download_bf16(*simple.d_dq), c.Hq, c));
  EXPECT_TRUE(grad_close("dk", fast.download_bf16(*fast.d_dk), simple.download_bf16(*simple.d_dk), c.Hkv, c));
  EXPECT_TRUE(grad_close("dv", fast.download_bf16(*fast.d_dv), simple.download_bf16(*simple.d_dv), c.Hkv, c));
}

INSTANTIATE_TEST_SUITE_P(Large, FlashAttentionTensorCoreVsSimple,
                         ::testing::Values(Case{64, 4099, 16, 4, Docs::kPacked, 1.0f},
                                           Case{128, 4099, 16, 4, Docs::kBoundaries, 1.0f},
                                           Case{128, 3000, 8, 1, Docs::kOne, 8.0f}),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// cuDNN's fused attention (ops/cuda/cudnn_attention.h) on rows that are causal sequences, against
// the same reference and tolerances: GQA and MHA, head_dim 64 and 128, one row and several (whose
// statistics cuDNN keeps in its own layout), flat and peaked softmaxes. Skipped where cuDNN is not
// installed; where it is, a refusal fails the test.
// What both cuDNN suites set up: cuDNN (skipped where it is not installed), the case's problem
// and its CPU reference.
class CudnnGpuCase : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    cudnn_ = CudnnAttention::make(nullptr);
    if (cudnn_ == nullptr) GTEST_SKIP() << "cuDNN is not available: " << CudnnAttention::unavailable_reason();
    problem_ = std::make_unique<Problem>(GetParam());
    ASSERT_TRUE(problem_->allocated()) << "cudaMalloc failed";
    ref_ = cpu_reference(*problem_);
  }
  std::unique_ptr<CudnnAttention> cudnn_;
  std::unique_ptr<Problem> problem_;
  Reference ref_;
};

class CudnnAttentionGpu : public CudnnGpuCase {};

// cuDNN's backward (`backward`, given the params) from the statistics of ferry's own forward of a
// fresh problem of case c, against the reference: the two may mix in a step.
template <class Backward>
void expect_backward_from_own_forward(const Case& c, const Reference& ref, const DeviceBuffer& ws,
                                      const Backward& backward, const CudnnAttention& cudnn) {
  Problem own(c);
  ASSERT_TRUE(own.allocated());
  flash_attention_forward(own.params(), nullptr);
  FlashAttentionBackwardParams obp = own.backward_params();
  obp.workspace = ws.get();
  obp.workspace_bytes = ws.bytes();
  ASSERT_TRUE(backward(obp)) << cudnn.last_refusal();
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(grad_close("dq (own forward)", own.download_bf16(*own.d_dq), ref.dq, c.Hq, c));
  EXPECT_TRUE(grad_close("dk (own forward)", own.download_bf16(*own.d_dk), ref.dk, c.Hkv, c));
  EXPECT_TRUE(grad_close("dv (own forward)", own.download_bf16(*own.d_dv), ref.dv, c.Hkv, c));
}

TEST_P(CudnnAttentionGpu, ForwardAndBackwardMatchCpuReference) {
  const Case c = GetParam();
  Problem& p = *problem_;
  const Reference& ref = ref_;
  CudnnAttention* cudnn = cudnn_.get();
  DeviceBuffer ws(attention_workspace_bytes(c.T, c.Hq, c.D));
  ASSERT_TRUE(ws.ok());
  FlashAttentionBackwardParams bp = p.backward_params();
  bp.workspace = ws.get();
  bp.workspace_bytes = ws.bytes();
  // Rows that do not divide the tokens are refused, and nothing runs.
  EXPECT_FALSE(cudnn->forward(p.params(), c.row + 1, ws.get(), ws.bytes()));
  ASSERT_TRUE(cudnn->forward(p.params(), c.row, ws.get(), ws.bytes())) << cudnn->last_refusal();
  ASSERT_TRUE(cudnn->backward(bp, c.row)) << cudnn->last_refusal();
  CUDA_OK(cudaDeviceSynchronize());
  expect_matches_reference(p, ref, c, &ws);

  // Statistics from ferry's own forward serve cuDNN's backward (the two may mix in a step).
  expect_backward_from_own_forward(
      c, ref, ws, [&](const FlashAttentionBackwardParams& obp) { return cudnn->backward(obp, c.row); },
      *cudnn);
}

INSTANTIATE_TEST_SUITE_P(Rows, CudnnAttentionGpu,
                         ::testing::Values(Case{128, 2048, 32, 8, Docs::kRows, 1.0f, 1024},
                                           Case{128, 2048, 8, 8, Docs::kRows, 1.0f, 2048},
                                           Case{64, 768, 4, 2, Docs::kRows, 1.0f, 256},
                                           Case{128, 1024, 8, 2, Docs::kRows, 8.0f, 256},
                                           Case{128, 384, 4, 1, Docs::kRows, 1.0f, 128}),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// cuDNN's fused attention on packed documents as a ragged batch (AttentionMask::segment_bounds:
// one segment per document, the batch rounded up to a power of two with empty entries), against
// the same reference: documents of 1 to 150 tokens, documents across the kernels' tiles, one
// whole sequence, GQA and MHA, head_dim 64 and 128, flat and peaked softmaxes; and cuDNN's backward
// from the own forward's statistics. Both directions run in the ops' attention workspace.
// Skipped where cuDNN is not installed; a refusal fails it.
class CudnnSegmentsGpu : public CudnnGpuCase {};

// The documents of doc_start as segment bounds: where each starts, then T.
std::vector<int32_t> document_bounds(const std::vector<int32_t>& ds) {
  std::vector<int32_t> bounds;
  for (size_t t = 0; t < ds.size(); ++t)
    if (ds[t] == static_cast<int32_t>(t)) bounds.push_back(static_cast<int32_t>(t));
  bounds.push_back(static_cast<int32_t>(ds.size()));
  return bounds;
}

TEST_P(CudnnSegmentsGpu, ForwardAndBackwardMatchCpuReference) {
  const Case c = GetParam();
  Problem& p = *problem_;
  const Reference& ref = ref_;
  CudnnAttention* cudnn = cudnn_.get();
  const std::vector<int32_t> bounds = document_bounds(p.ds);
  DeviceBuffer d_bounds(bounds.size() * sizeof(int32_t));
  ASSERT_TRUE(d_bounds.ok());
  d_bounds.upload(bounds.data());
  AttentionSegments segments{static_cast<const int32_t*>(d_bounds.get()),
                             static_cast<int64_t>(bounds.size()) - 1, 0};
  for (size_t i = 0; i + 1 < bounds.size(); ++i)
    segments.longest = std::max<int64_t>(segments.longest, bounds[i + 1] - bounds[i]);
  // The backward fits the working memory CudaOps gives attention, and gets exactly what it asks
  // for: its own tensors come last, so a write past them reaches the buffer's guard.
  const size_t need = cudnn->backward_workspace_bytes(p.params(), segments);
  ASSERT_GT(need, 0u) << cudnn->last_refusal();
  EXPECT_LE(need, attention_workspace_bytes(c.T, c.Hq, c.D));
  DeviceBuffer ws(attention_workspace_bytes(c.T, c.Hq, c.D)), bws(need);
  ASSERT_TRUE(ws.ok() && bws.ok());
  FlashAttentionBackwardParams bp = p.backward_params();
  bp.workspace = bws.get();
  bp.workspace_bytes = bws.bytes();
  EXPECT_FALSE(cudnn->forward(p.params(), AttentionSegments{}, ws.get(), ws.bytes()));
  // Too little workspace is refused before anything runs.
  FlashAttentionBackwardParams short_bp = bp;
  short_bp.workspace_bytes = need - 1;
  EXPECT_FALSE(cudnn->backward(short_bp, segments));
  ASSERT_TRUE(cudnn->forward(p.params(), segments, ws.get(), ws.bytes())) << cudnn->last_refusal();
  ASSERT_TRUE(cudnn->backward(bp, segments)) << cudnn->last_refusal();
  CUDA_OK(cudaDeviceSynchronize());
  expect_matches_reference(p, ref, c, &ws);
  EXPECT_TRUE(bws.guards_intact()) << case_name(c) << ": cuDNN's backward wrote past its workspace";
  EXPECT_TRUE(d_bounds.guards_intact());

  expect_backward_from_own_forward(
      c, ref, bws, [&](const FlashAttentionBackwardParams& obp) { return cudnn->backward(obp, segments); },
      *cudnn);
  EXPECT_TRUE(bws.guards_intact()) << case_name(c) << ": cuDNN's backward wrote past its workspace";
}

INSTANTIATE_TEST_SUITE_P(Documents, CudnnSegmentsGpu,
                         ::testing::Values(Case{128, 2048, 32, 8, Docs::kPacked, 1.0f},
                                           Case{128, 1000, 8, 8, Docs::kBoundaries, 1.0f},
                                           Case{64, 1000, 4, 2, Docs::kPacked, 1.0f},
                                           Case{128, 1000, 8, 2, Docs::kPacked, 8.0f},
                                           Case{128, 2048, 8, 8, Docs::kOne, 1.0f},
                                           Case{64, 257, 4, 1, Docs::kBoundaries, 8.0f}),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// Forward, dk and dv are deterministic; dq of the tensor-core path is summed with atomics and may
// differ in its last bits. The simple path is deterministic throughout.
TEST(FlashAttentionGpuDeterminism, RepeatedRunsGiveTheSameBits) {
  SKIP_WITHOUT_GPU();
  for (int D : {16, 128}) {
    const Case c{D, 777, 8, 2, Docs::kPacked, 1.0f};
    Problem p(c);
    ASSERT_TRUE(p.allocated());
    std::vector<std::vector<float> > first;
    for (int run = 0; run < 2; ++run) {
      flash_attention_forward(p.params(), nullptr);
      flash_attention_backward(p.backward_params(), nullptr);
      CUDA_OK(cudaDeviceSynchronize());
      std::vector<std::vector<float> > now = {p.download_bf16(*p.d_out), p.download_f32(*p.d_lse),
                                              p.download_bf16(*p.d_dk), p.download_bf16(*p.d_dv)};
      if (D != 64 && D != 128) now.push_back(p.download_bf16(*p.d_dq));
      if (run == 0) {
        first = now;
        continue;
      }
      const char* names[] = {"out", "lse", "dk", "dv", "dq"};
      for (size_t i = 0; i < now.size(); ++i)
        EXPECT_EQ(0, std::memcmp(now[i].data(), first[i].data(), now[i].size() * sizeof(float)))
            << case_name(c) << ": " << names[i] << " differs between two runs";
    }
  }
}

TEST(FlashAttentionGpuErrors, BadArgumentsRaise) {
  SKIP_WITHOUT_GPU();
  Problem p(Case{64, 40, 4, 2, Docs::kOne, 1.0f});
  ASSERT_TRUE(p.allocated());
  FlashAttentionParams bad = p.params();
  bad.head_dim = 257;
  EXPECT_THROW(flash_attention_forward(bad, nullptr), Error);
  bad = p.params();
  bad.q_heads = 3;  // not a multiple of kv_heads = 2
  EXPECT_THROW(flash_attention_forward(bad, nullptr), Error);
  bad = p.params();
  bad.q = static_cast<const char*>(bad.q) + 2;  // rows no longer 16-byte aligned
  EXPECT_THROW(flash_attention_forward(bad, nullptr), Error);
  FlashAttentionBackwardParams bbad = p.backward_params();
  bbad.workspace_bytes -= 4;
  EXPECT_THROW(flash_attention_backward(bbad, nullptr), Error);
  // Zero tokens is a no-op, not an error.
  FlashAttentionParams empty = p.params();
  empty.tokens = 0;
  EXPECT_NO_THROW(flash_attention_forward(empty, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
}

#endif  // FERRY_HAVE_CUDA

}  // namespace
}  // namespace ferry
