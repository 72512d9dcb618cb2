// The CUDA backend (ops/cuda/cuda_ops.h) against the CPU reference (make_cpu_ops(), fp32), op by
// op, and the GPU AdamW / gradient norm (optim/gpu_adamw.h) against optim/adamw.h and clip.h.
//
// Inputs are drawn in fp32 and rounded to bf16; the CPU ops get those very rounded values (as
// fp32), so the only differences are the GPU's own roundings and summation orders. Sizes are
// awkward on purpose (T = 31, 33, 127, 128, 257; hidden 64, 96, 4095, 4096, 4104; V = 1000 and
// 32003; rows not a multiple of 8; views one element off alignment), so the vector and scalar
// paths, tails, and partial tiles all run. Every device output sits between guard bytes and
// starts as NaN bytes: an out-of-bounds write or an element never written fails.
//
// Tolerances come from the precision, element by element: |gpu - cpu| <= bound, with
//   u = 2^-8   the bf16 unit roundoff (8 significant bits, round to nearest even),
//   F = 2^-24  the fp32 unit roundoff,
//   mag        the sum of the magnitudes of the terms an element adds up (|x| |w| for a product),
// and, unless stated, bound = 2 u |ref| + 2 (K + 2) F mag for an element that sums K terms in
// fp32 and is rounded once to bf16: the rounding costs at most u |exact|, and each side's fp32
// summation at most (K + 2) F mag (the standard bound for recursive or pairwise summation); the
// factor 2 is margin (|exact| vs |ref|, both sides' sums). F32 outputs use 2 F instead of 2 u.
// On top, the relative RMS error over the tensor must stay below u for bf16 outputs: rounding to
// nearest gives about 0.4 u, so a systematic error (a wrong term, a dropped scale) fails it even
// where the elementwise bound is loose. NaN or Inf never passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/ops.h"
#include "optim/adamw.h"
#include "optim/clip.h"

#if FERRY_HAVE_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/cuda_ops.h"
#include "ops_cuda_test_util.h"
#include "optim/gpu_adamw.h"
#endif

namespace ferry {
namespace {

#if !FERRY_HAVE_CUDA

TEST(CudaParity, NeedsCudaBuild) {
  GTEST_SKIP() << "built without CUDA";
}

#else

using cudatest::abs_of;
using cudatest::bounds;
using cudatest::DeviceTensor;
using cudatest::kBf16U;
using cudatest::kF16U;
using cudatest::kF32U;
using cudatest::round_bf16;
using cudatest::uniform;
using cudatest::Vec;
using cudatest::within;

constexpr double u = kBf16U;
constexpr double F = kF32U;

Tensor H1(Vec& v, int64_t a) {
  return Tensor::f32(v.data(), {a});
}
Tensor H2(Vec& v, int64_t a, int64_t b) {
  return Tensor::f32(v.data(), {a, b});
}
Tensor H3(Vec& v, int64_t a, int64_t b, int64_t c) {
  return Tensor::f32(v.data(), {a, b, c});
}

// The unit roundoff of an output dtype.
double out_u(DType dtype) {
  return dtype == DType::BF16 ? u : dtype == DType::F16 ? kF16U : F;
}

// (rows, cols) -> (cols, rows).
Vec transpose(const Vec& a, int64_t rows, int64_t cols) {
  Vec t(a.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = a[r * cols + c];
  return t;
}

class CudaParity : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cudatest::gpu_available(&why)) GTEST_SKIP() << why;
    CUDA_OK(cudaStreamCreate(&stream_));
    gpu_ = std::make_unique<CudaOps>(stream_);
  }
  void TearDown() override {
    if (gpu_) {
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      EXPECT_EQ(gpu_->device_error(), "");
      gpu_.reset();
    }
    if (stream_) cudaStreamDestroy(stream_);
  }
  // Waits for the ops and fails on an asynchronous CUDA error.
  void sync() {
    const cudaError_t e = cudaStreamSynchronize(stream_);
    ASSERT_EQ(e, cudaSuccess) << cudatest::cuda_error(e);
  }
  DeviceTensor upload(DType dtype, std::vector<int64_t> dims, const Vec& host, size_t offset = 0) {
    DeviceTensor t(dtype, std::move(dims), offset);
    EXPECT_TRUE(t.ok());
    t.upload(host);
    return t;
  }

  std::unique_ptr<Ops> cpu_ = make_cpu_ops();
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CudaOps> gpu_;
};

// Integer device arrays (ids, targets, positions).
struct DeviceInts {
  DeviceTensor t;
  explicit DeviceInts(const std::vector<int32_t>& v) : t(DType::I32, {static_cast<int64_t>(v.size())}) {
    t.upload_raw(v.data());
  }
  const int32_t* get() const { return static_cast<const int32_t*>(t.data()); }
};

// ------------------------------------------------------------------------------------- linear

struct LinearCase {
  int64_t T, in, out;
  bool bias;
  DType y_dtype;     // forward output
  DType grad_dtype;  // dw and dbias
};

std::string describe(const LinearCase& c) {
  return "T=" + std::to_string(c.T) + " in=" + std::to_string(c.in) + " out=" + std::to_string(c.out) +
         (c.bias ? " bias" : "") + " y=" + std::string(dtype_name(c.y_dtype)) +
         " grads=" + std::string(dtype_name(c.grad_dtype));
}

const LinearCase kLinearCases[] = {
    {31, 64, 96, true, DType::BF16, DType::F32},      {33, 96, 64, false, DType::BF16, DType::BF16},
    {127, 4096, 96, true, DType::BF16, DType::F32},   {128, 96, 4096, false, DType::F32, DType::BF16},
    {257, 4096, 4104, true, DType::BF16, DType::F32}, {33, 4095, 96, true, DType::BF16, DType::BF16},
    {31, 64, 4097, true, DType::F32, DType::BF16},
};

// y = x w^T + b: K = in terms (plus the bias) per element.
TEST_F(CudaParity, LinearForward) {
  uint32_t seed = 100;
  for (const LinearCase& c : kLinearCases) {
    SCOPED_TRACE(describe(c));
    const int64_t T = c.T, in = c.in, out = c.out;
    const float ws = 1.0f / std::sqrt(static_cast<float>(in));
    Vec x = uniform(T * in, ++seed), w = uniform(out * in, ++seed, -ws, ws), b = uniform(out, ++seed);
    round_bf16(x), round_bf16(w), cudatest::round_to(b, c.y_dtype);
    Vec ref(T * out), mag(T * out);
    Vec ax = abs_of(x), aw = abs_of(w), ab = abs_of(b);
    cpu_->linear_forward(H2(x, T, in), H2(w, out, in), c.bias ? H1(b, out) : Tensor(), Tensor(),
                         H2(ref, T, out));
    cpu_->linear_forward(H2(ax, T, in), H2(aw, out, in), c.bias ? H1(ab, out) : Tensor(), Tensor(),
                         H2(mag, T, out));

    DeviceTensor dx = upload(DType::BF16, {T, in}, x), dw = upload(DType::BF16, {out, in}, w);
    DeviceTensor db = upload(c.y_dtype, {out}, b);
    DeviceTensor dy(c.y_dtype, {T, out});
    gpu_->linear_forward(dx.view(), dw.view(), c.bias ? db.view() : Tensor(), Tensor(), dy.view());
    sync();
    // F32 output: no rounding, only the summation orders differ (relative rms far below 4e-5).
    const double rms = c.y_dtype == DType::BF16 ? u : 4e-5;
    EXPECT_TRUE(
        within("y", dy.download(), ref, bounds(ref, 2 * out_u(c.y_dtype), mag, 2 * (in + 3) * F), rms));
    EXPECT_TRUE(dy.guards());
  }
}

// dx = dy w (K = out), dw += dy^T x (K = T, plus the old value), dbias += column sums of dy.
TEST_F(CudaParity, LinearBackward) {
  uint32_t seed = 200;
  for (const LinearCase& c : kLinearCases) {
    SCOPED_TRACE(describe(c));
    const int64_t T = c.T, in = c.in, out = c.out;
    const float ws = 1.0f / std::sqrt(static_cast<float>(in));
    Vec x = uniform(T * in, ++seed), w = uniform(out * in, ++seed, -ws, ws), dy = uniform(T * out, ++seed);
    Vec dw0 = uniform(out * in, ++seed), db0 = uniform(out, ++seed);
    round_bf16(x), round_bf16(w), round_bf16(dy);
    cudatest::round_to(dw0, c.grad_dtype), cudatest::round_to(db0, c.grad_dtype);

    Vec dx_ref(T * in), dw_ref = dw0, db_ref = db0;
    cpu_->linear_backward(H2(x, T, in), H2(w, out, in), H2(dy, T, out), H2(dx_ref, T, in),
                          H2(dw_ref, out, in), c.bias ? H1(db_ref, out) : Tensor(), false);
    Vec ax = abs_of(x), aw = abs_of(w), ady = abs_of(dy);
    Vec dx_mag(T * in), dw_mag = abs_of(dw0), db_mag = abs_of(db0);
    cpu_->linear_backward(H2(ax, T, in), H2(aw, out, in), H2(ady, T, out), H2(dx_mag, T, in),
                          H2(dw_mag, out, in), c.bias ? H1(db_mag, out) : Tensor(), false);

    DeviceTensor gx = upload(DType::BF16, {T, in}, x), gw = upload(DType::BF16, {out, in}, w);
    DeviceTensor gdy = upload(DType::BF16, {T, out}, dy);
    DeviceTensor gdx(DType::BF16, {T, in});
    DeviceTensor gdw = upload(c.grad_dtype, {out, in}, dw0), gdb = upload(c.grad_dtype, {out}, db0);
    gpu_->linear_backward(gx.view(), gw.view(), gdy.view(), gdx.view(), gdw.view(),
                          c.bias ? gdb.view() : Tensor(), false);
    sync();
    const double gu = out_u(c.grad_dtype);
    const double rms_grad = c.grad_dtype == DType::BF16 ? u : 1e-4;
    EXPECT_TRUE(within("dx", gdx.download(), dx_ref, bounds(dx_ref, 2 * u, dx_mag, 2 * (out + 3) * F), u));
    EXPECT_TRUE(
        within("dw", gdw.download(), dw_ref, bounds(dw_ref, 2 * gu, dw_mag, 2 * (T + 3) * F), rms_grad));
    if (c.bias) {
      EXPECT_TRUE(
          within("dbias", gdb.download(), db_ref, bounds(db_ref, 2 * gu, db_mag, 2 * (T + 3) * F), rms_grad));
    }
    EXPECT_TRUE(gdx.guards() && gdw.guards() && gdb.guards());
  }
}

// y = residual + (x w^T + b), the residual as cuBLASLt's C (beta = 1), given apart from y and as y
// itself (in place). The GPU rounds residual + product + bias once, so the bound is the forward's
// with one more term in the sum: 2 u |ref| + 2 (K + 4) F mag, K = in, mag counting |residual|. This
// is tighter than the unfused product-then-add(), which rounds the product to bf16 first (an error
// of u |product| where residual and product cancel): a path that rounded twice fails here. In place
// (C = D), cuBLASLt on the H200 does round the product to the output type first (measured: 3-8% of
// the elements past the one-rounding bound, by up to 44x), so that case is held to the unfused
// path's bound: one more u |product| <= u mag.
TEST_F(CudaParity, LinearForwardResidual) {
  uint32_t seed = 150;
  for (const LinearCase& c : kLinearCases) {
    SCOPED_TRACE(describe(c));
    const int64_t T = c.T, in = c.in, out = c.out;
    const float ws = 1.0f / std::sqrt(static_cast<float>(in));
    Vec x = uniform(T * in, ++seed), w = uniform(out * in, ++seed, -ws, ws), b = uniform(out, ++seed);
    Vec r = uniform(T * out, ++seed);
    round_bf16(x), round_bf16(w), cudatest::round_to(b, c.y_dtype), cudatest::round_to(r, c.y_dtype);
    Vec ref(T * out), mag(T * out);
    Vec ax = abs_of(x), aw = abs_of(w), ab = abs_of(b), ar = abs_of(r);
    const Tensor bias = c.bias ? H1(b, out) : Tensor(), abias = c.bias ? H1(ab, out) : Tensor();
    cpu_->linear_forward(H2(x, T, in), H2(w, out, in), bias, H2(r, T, out), H2(ref, T, out));
    cpu_->linear_forward(H2(ax, T, in), H2(aw, out, in), abias, H2(ar, T, out), H2(mag, T, out));

    DeviceTensor gx = upload(DType::BF16, {T, in}, x), gw = upload(DType::BF16, {out, in}, w);
    DeviceTensor gb = upload(c.y_dtype, {out}, b), gr = upload(c.y_dtype, {T, out}, r);
    DeviceTensor gy(c.y_dtype, {T, out}), gy_in_place = upload(c.y_dtype, {T, out}, r);
    const Tensor gbias = c.bias ? gb.view() : Tensor();
    gpu_->linear_forward(gx.view(), gw.view(), gbias, gr.view(), gy.view());
    gpu_->linear_forward(gx.view(), gw.view(), gbias, gy_in_place.view(), gy_in_place.view());
    sync();
    const Vec bound = bounds(ref, 2 * out_u(c.y_dtype), mag, 2 * (in + 4) * F);
    const double rms = c.y_dtype == DType::BF16 ? u : 4e-5;
    EXPECT_TRUE(within("y = residual + product", gy.download(), ref, bound, rms));
    const Vec bound_in_place = bounds(ref, 2 * out_u(c.y_dtype), mag, 2 * (in + 4) * F + out_u(c.y_dtype));
    EXPECT_TRUE(within("y += product", gy_in_place.download(), ref, bound_in_place, rms));
    EXPECT_TRUE(gy.guards() && gy_in_place.guards() && gr.guards());
  }
}

// dx += dy w (accumulate_dx: C = D = dx, beta = 1): dx0 + K = out products. In place, cuBLASLt
// rounds the product to bf16 before adding dx0 (as LinearForwardResidual's in-place case), which
// is the unfused path's error: the backward's dx bound with |dx0| in the magnitude, one more term,
// and u |product| <= u mag.
TEST_F(CudaParity, LinearBackwardAccumulateDx) {
  uint32_t seed = 250;
  for (const LinearCase& c : kLinearCases) {
    SCOPED_TRACE(describe(c));
    const int64_t T = c.T, in = c.in, out = c.out;
    const float ws = 1.0f / std::sqrt(static_cast<float>(in));
    Vec x = uniform(T * in, ++seed), w = uniform(out * in, ++seed, -ws, ws), dy = uniform(T * out, ++seed);
    Vec dx0 = uniform(T * in, ++seed);
    round_bf16(x), round_bf16(w), round_bf16(dy), round_bf16(dx0);

    Vec dx_ref = dx0, dx_mag = abs_of(dx0);
    cpu_->linear_backward(H2(x, T, in), H2(w, out, in), H2(dy, T, out), H2(dx_ref, T, in), Tensor(), Tensor(),
                          true);
    Vec ax = abs_of(x), aw = abs_of(w), ady = abs_of(dy);
    cpu_->linear_backward(H2(ax, T, in), H2(aw, out, in), H2(ady, T, out), H2(dx_mag, T, in), Tensor(),
                          Tensor(), true);

    DeviceTensor gx = upload(DType::BF16, {T, in}, x), gw = upload(DType::BF16, {out, in}, w);
    DeviceTensor gdy = upload(DType::BF16, {T, out}, dy), gdx = upload(DType::BF16, {T, in}, dx0);
    gpu_->linear_backward(gx.view(), gw.view(), gdy.view(), gdx.view(), Tensor(), Tensor(), true);
    sync();
    EXPECT_TRUE(within("dx += dy w", gdx.download(), dx_ref,
                       bounds(dx_ref, 2 * u, dx_mag, 2 * (out + 4) * F + u), u));
    EXPECT_TRUE(gdx.guards());
  }
}

// --------------------------------------------------------------------------------- embedding

// Ids with many repeats (a few frequent tokens), both ends of the vocabulary, and the rest spread.
std::vector<int32_t> make_ids(int64_t T, int64_t V, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> ids(T);
  for (int64_t t = 0; t < T; ++t) {
    const uint32_t r = gen();
    ids[t] = (r % 3 == 0) ? static_cast<int32_t>(gen() % 5) : static_cast<int32_t>(gen() % V);
  }
  ids[0] = static_cast<int32_t>(V - 1);
  if (T > 2) ids[T / 2] = 0;
  return ids;
}

TEST_F(CudaParity, Embedding) {
  struct Case {
    int64_t T, V, H;
    DType grad_dtype;
  };
  uint32_t seed = 300;
  for (const Case& c : {Case{31, 1000, 64, DType::F32}, Case{257, 1000, 96, DType::BF16},
                        Case{127, 1000, 4096, DType::F32}, Case{33, 32003, 36, DType::BF16},
                        Case{128, 32003, 64, DType::F32}, Case{128, 1000, 4096, DType::BF16}}) {
    SCOPED_TRACE("T=" + std::to_string(c.T) + " V=" + std::to_string(c.V) + " H=" + std::to_string(c.H) +
                 " dtable " + std::string(dtype_name(c.grad_dtype)));
    const int64_t T = c.T, V = c.V, Hd = c.H;
    Vec table = uniform(V * Hd, ++seed), dout = uniform(T * Hd, ++seed), dt0 = uniform(V * Hd, ++seed);
    round_bf16(table), round_bf16(dout), cudatest::round_to(dt0, c.grad_dtype);
    const std::vector<int32_t> ids = make_ids(T, V, ++seed);

    Vec out_ref(T * Hd), dt_ref = dt0;
    cpu_->embedding_forward(ids.data(), H2(table, V, Hd), H2(out_ref, T, Hd));
    cpu_->embedding_backward(ids.data(), H2(dout, T, Hd), H2(dt_ref, V, Hd));
    Vec adout = abs_of(dout), dt_mag = abs_of(dt0);
    cpu_->embedding_backward(ids.data(), H2(adout, T, Hd), H2(dt_mag, V, Hd));

    DeviceInts gids(ids);
    DeviceTensor gtable = upload(DType::BF16, {V, Hd}, table), gout(DType::BF16, {T, Hd});
    DeviceTensor gdout = upload(DType::BF16, {T, Hd}, dout), gdt = upload(c.grad_dtype, {V, Hd}, dt0);
    gpu_->embedding_forward(gids.get(), gtable.view(), gout.view());
    gpu_->embedding_backward(gids.get(), gdout.view(), gdt.view());
    sync();
    // The forward is a copy: exact.
    EXPECT_TRUE(within("out", gout.download(), out_ref, Vec(out_ref.size(), 0.0f)));
    // An F32 table gets the CPU's additions in the CPU's order (token order per row): bit for bit
    // in principle; one ulp allowed. A BF16 table is rounded once.
    if (c.grad_dtype == DType::F32)
      EXPECT_TRUE(within("dtable", gdt.download(), dt_ref, bounds(dt_ref, 2 * F, {}, 0.0)));
    else
      EXPECT_TRUE(
          within("dtable", gdt.download(), dt_ref, bounds(dt_ref, 2 * u, dt_mag, 2 * (T + 3) * F), u));
    EXPECT_TRUE(gout.guards() && gdt.guards());
  }
}

// An id outside the vocabulary poisons its row and raises the device flag (no host sync in the op).
TEST_F(CudaParity, EmbeddingBadIdIsFlagged) {
  const int64_t V = 100, Hd = 16, T = 4;
  Vec table = uniform(V * Hd, 1);
  round_bf16(table);
  const std::vector<int32_t> ids = {3, static_cast<int32_t>(V), -7, 5};
  DeviceInts gids(ids);
  DeviceTensor gtable = upload(DType::BF16, {V, Hd}, table), gout(DType::BF16, {T, Hd});
  gpu_->embedding_forward(gids.get(), gtable.view(), gout.view());
  sync();
  const Vec out = gout.download();
  for (int64_t i = 0; i < Hd; ++i) {
    EXPECT_EQ(out[i], table[3 * Hd + i]);
    EXPECT_TRUE(std::isnan(out[Hd + i]));
    EXPECT_TRUE(std::isnan(out[2 * Hd + i]));
    EXPECT_EQ(out[3 * Hd + i], table[5 * Hd + i]);
  }
  const std::string error = gpu_->device_error();
  EXPECT_NE(error.find("token id"), std::string::npos) << error;
  EXPECT_EQ(gpu_->device_error(), "");  // cleared
}

// ----------------------------------------------------------------------------------- rmsnorm

TEST_F(CudaParity, RmsNorm) {
  struct Case {
    int64_t R, D;
    DType grad_dtype;
  };
  const float eps = 1e-6f;
  uint32_t seed = 400;
  for (const Case& c : {Case{31, 8, DType::F32}, Case{257, 16, DType::BF16}, Case{127, 32, DType::F32},
                        Case{33, 64, DType::BF16}, Case{128, 128, DType::F32}, Case{31, 12, DType::BF16},
                        Case{257, 96, DType::F32}, Case{33, 4096, DType::BF16}, Case{31, 4100, DType::F32},
                        // dx and dweight in one pass (whole warps of 8 columns, D <= 4096): one row,
                        // rows in several blocks with a partial last batch, and the largest D.
                        Case{1, 256, DType::F32}, Case{3001, 2048, DType::BF16}, Case{1029, 3072, DType::F32},
                        Case{517, 4096, DType::F32}, Case{33, 8192, DType::F32},
                        // The forward's row in registers: 2, 4, 8 and 16 chunks a lane (above).
                        Case{9, 512, DType::F32}, Case{65, 1024, DType::BF16}}) {
    SCOPED_TRACE("R=" + std::to_string(c.R) + " D=" + std::to_string(c.D) + " dweight " +
                 std::string(dtype_name(c.grad_dtype)));
    const int64_t R = c.R, D = c.D;
    Vec x = uniform(R * D, ++seed, -2, 2), w = uniform(D, ++seed, 0.5f, 1.5f), g = uniform(R * D, ++seed);
    Vec dw0 = uniform(D, ++seed);
    round_bf16(x), round_bf16(w), round_bf16(g), cudatest::round_to(dw0, c.grad_dtype);
    Vec out_ref(R * D), rstd_ref(R), dx_ref(R * D), dw_ref = dw0;
    cpu_->rmsnorm_forward(H2(x, R, D), H1(w, D), eps, H2(out_ref, R, D), H1(rstd_ref, R));
    cpu_->rmsnorm_backward(H2(x, R, D), H1(w, D), H1(rstd_ref, R), H2(g, R, D), Tensor(), H2(dx_ref, R, D),
                           H1(dw_ref, D));

    // Magnitudes: dx = s (w g) - x c sums |s w g| + |x| |c| with c from sum |x w g|; dweight sums
    // |g x s| over rows on top of |dweight0|.
    Vec dx_mag(R * D), dw_mag = abs_of(dw0);
    for (int64_t r = 0; r < R; ++r) {
      const float s = rstd_ref[r];
      double dot = 0;
      for (int64_t i = 0; i < D; ++i) dot += std::fabs(x[r * D + i] * w[i] * g[r * D + i]);
      const double cabs = dot / D * s * s * s;
      for (int64_t i = 0; i < D; ++i) {
        dx_mag[r * D + i] =
            static_cast<float>(std::fabs(s * w[i] * g[r * D + i]) + std::fabs(x[r * D + i]) * cabs);
        dw_mag[i] += std::fabs(g[r * D + i] * x[r * D + i] * s);
      }
    }

    DeviceTensor gx = upload(DType::BF16, {R, D}, x), gw = upload(DType::BF16, {D}, w);
    DeviceTensor gout(DType::BF16, {R, D}), grstd(DType::F32, {R});
    gpu_->rmsnorm_forward(gx.view(), gw.view(), eps, gout.view(), grstd.view());
    // The backward gets the CPU's rstd, so it is checked on its own.
    DeviceTensor grstd_ref = upload(DType::F32, {R}, rstd_ref), gg = upload(DType::BF16, {R, D}, g);
    DeviceTensor gdx(DType::BF16, {R, D}), gdw = upload(c.grad_dtype, {D}, dw0);
    gpu_->rmsnorm_backward(gx.view(), gw.view(), grstd_ref.view(), gg.view(), Tensor(), gdx.view(),
                           gdw.view());
    sync();
    // rstd: a sum of D positive squares in fp32 (relative error <= (D + 2) F), a division and a
    // square root; out = (x rstd) w rounded once to bf16.
    const double stat = 2 * (D + 4) * F;
    EXPECT_TRUE(within("rstd", grstd.download(), rstd_ref, bounds(rstd_ref, stat, {}, 0.0)));
    EXPECT_TRUE(within("out", gout.download(), out_ref, bounds(out_ref, 2 * u + stat, {}, 0.0), u));
    // dx: rstd^3 and the dot product carry fp32 errors of a few (D + 4) F of the magnitude.
    EXPECT_TRUE(within("dx", gdx.download(), dx_ref, bounds(dx_ref, 2 * u, dx_mag, 8 * (D + 4) * F), u));
    EXPECT_TRUE(within("dweight", gdw.download(), dw_ref,
                       bounds(dw_ref, 2 * out_u(c.grad_dtype), dw_mag, 4 * (R + 8) * F),
                       c.grad_dtype == DType::BF16 ? u : 1e-4));
    EXPECT_TRUE(gout.guards() && grstd.guards() && gdx.guards() && gdw.guards());
  }
}

// dx = dresidual + the norm's gradient, in one rounding, with dresidual apart from dx and as dx
// itself (the latter also with dweight, which a layer's backward asks for: one pass for both
// where D allows). The bound is RmsNorm's dx bound with |dresidual| added to the magnitude: the
// fp32 sum gains one term, inside its 8 (D + 4) F margin.
TEST_F(CudaParity, RmsNormBackwardResidual) {
  const float eps = 1e-6f;
  uint32_t seed = 450;
  for (auto [R, D] : {std::pair<int64_t, int64_t>{31, 8},
                      {257, 16},
                      {33, 64},
                      {31, 12},
                      {257, 96},
                      {33, 4096},
                      {31, 4100},
                      {1029, 2048}}) {
    SCOPED_TRACE("R=" + std::to_string(R) + " D=" + std::to_string(D));
    Vec x = uniform(R * D, ++seed, -2, 2), w = uniform(D, ++seed, 0.5f, 1.5f), g = uniform(R * D, ++seed);
    Vec res = uniform(R * D, ++seed);
    round_bf16(x), round_bf16(w), round_bf16(g), round_bf16(res);
    Vec out_ref(R * D), rstd_ref(R), dx_ref(R * D), dw_ref(D, 0.0f);
    cpu_->rmsnorm_forward(H2(x, R, D), H1(w, D), eps, H2(out_ref, R, D), H1(rstd_ref, R));
    cpu_->rmsnorm_backward(H2(x, R, D), H1(w, D), H1(rstd_ref, R), H2(g, R, D), H2(res, R, D),
                           H2(dx_ref, R, D), H1(dw_ref, D));
    Vec dx_mag(R * D), dw_mag(D, 0.0f);
    for (int64_t r = 0; r < R; ++r) {
      const float s = rstd_ref[r];
      double dot = 0;
      for (int64_t i = 0; i < D; ++i) dot += std::fabs(x[r * D + i] * w[i] * g[r * D + i]);
      const double cabs = dot / D * s * s * s;
      for (int64_t i = 0; i < D; ++i) {
        dx_mag[r * D + i] = static_cast<float>(
            std::fabs(res[r * D + i]) + std::fabs(s * w[i] * g[r * D + i]) + std::fabs(x[r * D + i]) * cabs);
        dw_mag[i] += std::fabs(g[r * D + i] * x[r * D + i] * s);
      }
    }

    DeviceTensor gx = upload(DType::BF16, {R, D}, x), gw = upload(DType::BF16, {D}, w);
    DeviceTensor grstd = upload(DType::F32, {R}, rstd_ref), gg = upload(DType::BF16, {R, D}, g);
    DeviceTensor gres = upload(DType::BF16, {R, D}, res), gdx(DType::BF16, {R, D});
    DeviceTensor gdx_in_place = upload(DType::BF16, {R, D}, res);
    DeviceTensor gdx_with_dw = upload(DType::BF16, {R, D}, res), gdw = upload(DType::F32, {D}, Vec(D, 0.0f));
    gpu_->rmsnorm_backward(gx.view(), gw.view(), grstd.view(), gg.view(), gres.view(), gdx.view(), Tensor());
    gpu_->rmsnorm_backward(gx.view(), gw.view(), grstd.view(), gg.view(), gdx_in_place.view(),
                           gdx_in_place.view(), Tensor());
    gpu_->rmsnorm_backward(gx.view(), gw.view(), grstd.view(), gg.view(), gdx_with_dw.view(),
                           gdx_with_dw.view(), gdw.view());
    sync();
    const Vec bound = bounds(dx_ref, 2 * u, dx_mag, 8 * (D + 4) * F);
    EXPECT_TRUE(within("dx = dresidual + grad", gdx.download(), dx_ref, bound, u));
    EXPECT_TRUE(within("dx += grad", gdx_in_place.download(), dx_ref, bound, u));
    EXPECT_TRUE(within("dx += grad, with dweight", gdx_with_dw.download(), dx_ref, bound, u));
    EXPECT_TRUE(within("dweight", gdw.download(), dw_ref,
                       bounds(dw_ref, 2 * out_u(DType::F32), dw_mag, 4 * (R + 8) * F), 1e-4));
    EXPECT_TRUE(gdx.guards() && gdx_in_place.guards() && gdx_with_dw.guards() && gdw.guards() &&
                gres.guards());
  }
}

// -------------------------------------------------------------------------------------- rope

TEST_F(CudaParity, Rope) {
  struct Case {
    int64_t T, heads, D;
    size_t offset;  // elements off 16-byte alignment
  };
  uint32_t seed = 500;
  for (const Case& c : {Case{31, 3, 8, 0}, Case{33, 8, 10, 0}, Case{127, 4, 12, 0}, Case{128, 8, 64, 0},
                        Case{257, 2, 128, 0}, Case{31, 5, 64, 1}, Case{33, 4, 128, 2}}) {
    for (bool inverse : {false, true}) {
      SCOPED_TRACE("T=" + std::to_string(c.T) + " heads=" + std::to_string(c.heads) + " D=" +
                   std::to_string(c.D) + " offset=" + std::to_string(c.offset) + (inverse ? " inverse" : ""));
      const int64_t T = c.T, Hh = c.heads, D = c.D, half = D / 2;
      Vec x = uniform(T * Hh * D, ++seed, -2, 2);
      round_bf16(x);
      std::mt19937 gen(++seed);
      std::vector<int32_t> pos(T);
      for (int64_t t = 0; t < T; ++t) pos[t] = static_cast<int32_t>(gen() % 8192);
      Vec inv_freq(half);
      for (int64_t i = 0; i < half; ++i)
        inv_freq[i] = 1.0f / std::pow(10000.0f, static_cast<float>(2 * i) / static_cast<float>(D));

      Vec ref = x;
      cpu_->rope(H3(ref, T, Hh, D), pos.data(), inv_freq.data(), inverse);
      Vec mag(x.size());  // |a| + |b| of each element's pair
      for (int64_t r = 0; r < T * Hh; ++r)
        for (int64_t i = 0; i < half; ++i) {
          const float m = std::fabs(x[r * D + i]) + std::fabs(x[r * D + half + i]);
          mag[r * D + i] = mag[r * D + half + i] = m;
        }

      DeviceTensor gx = upload(DType::BF16, {T, Hh, D}, x, c.offset);
      DeviceInts gpos(pos);
      DeviceTensor gf = upload(DType::F32, {half}, inv_freq);
      gpu_->rope(gx.view(), gpos.get(), static_cast<const float*>(gf.data()), inverse);
      sync();
      // One rounding to bf16; cos and sin of the same fp32 angle differ by a few ulps between
      // CUDA's sincosf and the C library.
      EXPECT_TRUE(within("x", gx.download(), ref, bounds(ref, 2 * u, mag, 16 * F), u));
      EXPECT_TRUE(gx.guards());
    }
  }
}

// ------------------------------------------------------------------------------------ swiglu

TEST_F(CudaParity, SwiGlu) {
  struct Case {
    int64_t T, Fd;
    size_t offset;
  };
  uint32_t seed = 600;
  for (const Case& c :
       {Case{33, 96, 0}, Case{127, 1000, 0}, Case{257, 4096, 0}, Case{33, 96, 1}, Case{31, 7, 0}}) {
    SCOPED_TRACE("T=" + std::to_string(c.T) + " F=" + std::to_string(c.Fd) +
                 " offset=" + std::to_string(c.offset));
    const int64_t T = c.T, Fd = c.Fd, n = T * Fd;
    Vec g = uniform(n, ++seed, -6, 6), up = uniform(n, ++seed, -2, 2), d = uniform(n, ++seed);
    round_bf16(g), round_bf16(up), round_bf16(d);
    Vec y_ref(n), dg_ref(n), du_ref(n);
    cpu_->swiglu_forward(H2(g, T, Fd), H2(up, T, Fd), H2(y_ref, T, Fd));
    cpu_->swiglu_backward(H2(g, T, Fd), H2(up, T, Fd), H2(d, T, Fd), H2(dg_ref, T, Fd), H2(du_ref, T, Fd),
                          Tensor());
    // dgate = d u sig (1 + g (1 - sig)) cancels near g = -1.28: its magnitude is the terms'.
    Vec dg_mag(n);
    for (int64_t i = 0; i < n; ++i) {
      const double sig = 1.0 / (1.0 + std::exp(-static_cast<double>(g[i])));
      dg_mag[i] = static_cast<float>(std::fabs(d[i] * up[i] * sig) * (1.0 + std::fabs(g[i] * (1.0 - sig))));
    }
    DeviceTensor gg = upload(DType::BF16, {T, Fd}, g, c.offset),
                 gu = upload(DType::BF16, {T, Fd}, up, c.offset);
    DeviceTensor gd = upload(DType::BF16, {T, Fd}, d, c.offset);
    DeviceTensor gy(DType::BF16, {T, Fd}, c.offset), gdg(DType::BF16, {T, Fd}, c.offset),
        gdu(DType::BF16, {T, Fd}, c.offset), gdg_only(DType::BF16, {T, Fd}, c.offset),
        gy_again(DType::BF16, {T, Fd}, c.offset);
    gpu_->swiglu_forward(gg.view(), gu.view(), gy.view());
    gpu_->swiglu_backward(gg.view(), gu.view(), gd.view(), gdg.view(), gdu.view(), Tensor());
    gpu_->swiglu_backward(gg.view(), gu.view(), gd.view(), gdg_only.view(), Tensor(), gy_again.view());
    sync();
    // exp (<= 2 ulp on CUDA), a division and products: a few F relative, then one bf16 rounding.
    EXPECT_TRUE(within("out", gy.download(), y_ref, bounds(y_ref, 2 * u + 16 * F, {}, 0.0), u));
    EXPECT_TRUE(within("dgate", gdg.download(), dg_ref, bounds(dg_ref, 2 * u, dg_mag, 32 * F), u));
    EXPECT_TRUE(within("dup", gdu.download(), du_ref, bounds(du_ref, 2 * u + 16 * F, {}, 0.0), u));
    EXPECT_EQ(gdg_only.download_raw(), gdg.download_raw());
    // The activation a backward writes is the forward's, bit for bit (down_proj's dw reads it).
    EXPECT_EQ(gy_again.download_raw(), gy.download_raw());
    EXPECT_TRUE(gy.guards() && gdg.guards() && gdu.guards() && gdg_only.guards() && gy_again.guards());
  }
}

// ------------------------------------------------------------------------- add, zero, copy

TEST_F(CudaParity, Add) {
  uint32_t seed = 700;
  for (DType dtype : {DType::BF16, DType::F16, DType::F32}) {
    for (int64_t n : {int64_t{1000}, int64_t{4099}}) {
      for (size_t offset : {size_t{0}, size_t{1}}) {
        for (bool alias : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " n=" + std::to_string(n) +
                       " offset=" + std::to_string(offset) + (alias ? " out=a" : ""));
          Vec a = uniform(n, ++seed), b = uniform(n, ++seed);
          cudatest::round_to(a, dtype), cudatest::round_to(b, dtype);
          Vec ref(n);
          for (int64_t i = 0; i < n; ++i) ref[i] = a[i] + b[i];
          DeviceTensor ga = upload(dtype, {n}, a, offset), gb = upload(dtype, {n}, b, offset);
          DeviceTensor gout(dtype, {n}, offset);
          const DeviceTensor& out = alias ? ga : gout;
          gpu_->add(ga.view(), gb.view(), out.view());
          sync();
          // The fp32 sum is the CPU's exactly; one rounding to the output dtype.
          EXPECT_TRUE(within("out", out.download(), ref, bounds(ref, out_u(dtype), {}, 0.0)));
          EXPECT_TRUE(ga.guards() && gb.guards() && gout.guards());
        }
      }
    }
  }
}

TEST_F(CudaParity, Zero) {
  for (DType dtype : {DType::BF16, DType::F32, DType::F64}) {
    const int64_t n = 1031;
    DeviceTensor t = upload(dtype, {n}, uniform(n, 1));
    gpu_->zero(t.view());
    sync();
    for (unsigned char byte : t.download_raw()) ASSERT_EQ(byte, 0);
    EXPECT_TRUE(t.guards());
  }
}

// Every conversion among F32, BF16, F16 and F64, against the CPU backend's copy, bit for bit
// (NaN: only NaN-ness, since payloads may differ): ties, subnormals, overflow, infinities.
TEST_F(CudaParity, CopyConverts) {
  std::vector<double> values = {
      0.0,     -0.0,         1.0,      -1.0,      1.0 + 1.0 / 256, 1.0 + 3.0 / 256, 1e-30,  -1e-42,
      6.1e-5,  5.9e-8,       65504.0,  65520.0,   70000.0,         -1e30,           3.4e38, 1e300,
      -1e-300, 1.0000000001, INFINITY, -INFINITY, std::nan(""),    0.333333333333,  1e-8,   2049.0};
  for (float f : uniform(1000, 7, -300, 300)) values.push_back(f);
  const int64_t n = static_cast<int64_t>(values.size());
  const DType dtypes[] = {DType::F32, DType::BF16, DType::F16, DType::F64};
  for (DType from : dtypes) {
    // The source values in `from`, written by the CPU's conversions.
    std::vector<unsigned char> src(n * dtype_size(from));
    {
      Tensor f64(values.data(), DType::F64, {n});
      cpu_->copy(f64, Tensor(src.data(), from, {n}));
    }
    for (DType to : dtypes) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)));
      std::vector<unsigned char> ref(n * dtype_size(to));
      cpu_->copy(Tensor(src.data(), from, {n}), Tensor(ref.data(), to, {n}));
      DeviceTensor gs(from, {n}), gd(to, {n}, 1);
      gs.upload_raw(src.data());
      gpu_->copy(gs.view(), gd.view());
      sync();
      const std::vector<unsigned char> got = gd.download_raw();
      std::vector<double> got_v(n), ref_v(n);
      cpu_->copy(Tensor(const_cast<unsigned char*>(got.data()), to, {n}),
                 Tensor(got_v.data(), DType::F64, {n}));
      cpu_->copy(Tensor(ref.data(), to, {n}), Tensor(ref_v.data(), DType::F64, {n}));
      const size_t es = dtype_size(to);
      int mismatches = 0;
      for (int64_t i = 0; i < n; ++i) {
        const bool same = std::isnan(ref_v[i])
                              ? std::isnan(got_v[i])
                              : std::memcmp(got.data() + i * es, ref.data() + i * es, es) == 0;
        if (!same && ++mismatches <= 5)
          ADD_FAILURE() << "element " << i << " (" << values[i] << "): got " << got_v[i] << " expected "
                        << ref_v[i];
      }
      EXPECT_EQ(mismatches, 0);
      EXPECT_TRUE(gd.guards());
    }
  }
}

// ------------------------------------------------------------ fused linear + cross-entropy

struct FlceCase {
  int64_t T, H, V;
  DType grad_dtype;
  int64_t chunk_tokens;  // 0: the default budget
  int64_t weight_grad_chunks = 1;
};

TEST_F(CudaParity, LinearCrossEntropy) {
  uint32_t seed = 800;
  for (const FlceCase& c :
       {FlceCase{127, 64, 1000, DType::F32, 0}, FlceCase{127, 64, 1000, DType::BF16, 40},
        FlceCase{257, 96, 32003, DType::F32, 0}, FlceCase{257, 96, 32003, DType::BF16, 3},
        FlceCase{33, 4096, 1000, DType::F32, 0}, FlceCase{31, 96, 32003, DType::F32, 1},
        // dw's product over groups of chunks: whole groups and a last one short (7 chunks in 3s),
        // a group longer than the tokens, and in bf16.
        FlceCase{257, 96, 32003, DType::F32, 40, 3}, FlceCase{127, 64, 1000, DType::F32, 40, 8},
        FlceCase{257, 96, 32003, DType::BF16, 3, 4}}) {
    SCOPED_TRACE("T=" + std::to_string(c.T) + " H=" + std::to_string(c.H) + " V=" + std::to_string(c.V) +
                 " dw " + std::string(dtype_name(c.grad_dtype)) + " chunk=" + std::to_string(c.chunk_tokens) +
                 " dw over " + std::to_string(c.weight_grad_chunks) + " chunks");
    const int64_t T = c.T, Hd = c.H, V = c.V, Vp = (V + 7) / 8 * 8;
    CudaOpsOptions options;
    if (c.chunk_tokens > 0) options.flce_chunk_bytes = static_cast<size_t>(c.chunk_tokens * Vp * 2);
    CudaOps ops(stream_, options);
    if (c.chunk_tokens > 0) {
      ASSERT_EQ(ops.flce_chunk_tokens(V), c.chunk_tokens);
    }

    // Logits ~ N(0, 1): x ~ U(-1, 1), w ~ U(-s, s) with s = 3 / sqrt(H).
    const float s = 3.0f / std::sqrt(static_cast<float>(Hd));
    Vec x = uniform(T * Hd, ++seed), w = uniform(V * Hd, ++seed, -s, s);
    round_bf16(x), round_bf16(w);
    std::mt19937 gen(++seed);
    std::vector<int32_t> targets(T);
    int64_t counted = 0;
    for (int64_t t = 0; t < T; ++t) {
      targets[t] = gen() % 5 == 0 ? kIgnoreIndex : static_cast<int32_t>(gen() % V);
      counted += targets[t] != kIgnoreIndex;
    }
    targets[1] = kIgnoreIndex;
    targets[0] = static_cast<int32_t>(V - 1);
    counted = std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t != kIgnoreIndex; });
    const float grad_scale = 1.0f / static_cast<float>(counted);
    // A small accumulated value, so that the new gradient dominates dw and is what gets checked.
    Vec dw0 = uniform(V * Hd, ++seed, -1e-3f * grad_scale, 1e-3f * grad_scale);
    cudatest::round_to(dw0, c.grad_dtype);

    Vec logits_ref(T * V), dx_ref(T * Hd), dw_ref = dw0;
    const double loss_ref = dynamic_cast<CpuOps&>(*cpu_).linear_cross_entropy_sum(
        H2(x, T, Hd), H2(w, V, Hd), targets.data(), grad_scale, H2(dx_ref, T, Hd), H2(dw_ref, V, Hd),
        H2(logits_ref, T, V));

    // Magnitudes. Logits: |x| |w|^T. The GPU's logits are bf16 (error <= u L with L = max |logit|
    // of the row), so its softmax is off by <= 2 u L p relative and dlogits by <= u (1 + 2 L) a,
    // a = grad_scale (p + onehot); then dx sums a |w| and dw sums a^T |x|.
    Vec ax = abs_of(x), aw = abs_of(w), logits_mag(T * V);
    cpu_->linear_forward(H2(ax, T, Hd), H2(aw, V, Hd), Tensor(), Tensor(), H2(logits_mag, T, V));
    Vec a(T * V, 0.0f);
    double L = 0.0, loss_bound = 0.0;
    for (int64_t t = 0; t < T; ++t) {
      if (targets[t] == kIgnoreIndex) continue;
      const float* row = &logits_ref[t * V];
      double m = row[0], Lt = 0.0;
      for (int64_t v = 0; v < V; ++v)
        m = std::max<double>(m, row[v]), Lt = std::max<double>(Lt, std::fabs(row[v]));
      double sum = 0.0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - m);
      for (int64_t v = 0; v < V; ++v)
        a[t * V + v] =
            static_cast<float>(grad_scale * (std::exp(row[v] - m) / sum + (v == targets[t] ? 1.0 : 0.0)));
      L = std::max(L, Lt);
      loss_bound +=
          2 * u * (Lt + std::fabs(row[targets[t]])) + 8 * F * (Lt + std::log(static_cast<double>(V)));
    }
    Vec dx_mag(T * Hd), dw_mag(V * Hd);
    {
      Vec awT = transpose(aw, V, Hd), aT = transpose(a, T, V), axT = transpose(ax, T, Hd);
      cpu_->linear_forward(H2(a, T, V), H2(awT, Hd, V), Tensor(), Tensor(), H2(dx_mag, T, Hd));
      cpu_->linear_forward(H2(aT, V, T), H2(axT, Hd, T), Tensor(), Tensor(), H2(dw_mag, V, Hd));
    }
    const double dl = u * (1 + 2 * L);  // relative error of a dlogit

    DeviceInts gt(targets);
    DeviceTensor gx = upload(DType::BF16, {T, Hd}, x), gw = upload(DType::BF16, {V, Hd}, w);
    DeviceTensor gdx(DType::BF16, {T, Hd}), gdw = upload(c.grad_dtype, {V, Hd}, dw0);
    DeviceTensor glogits(DType::F32, {T, V}), gloss = upload(DType::F32, {1}, Vec{1.5f});
    DeviceTensor gloss2 = upload(DType::F32, {1}, Vec{0.0f});
    ops.linear_cross_entropy(gx.view(), gw.view(), gt.get(), grad_scale, gdx.view(), gdw.view(), gloss.view(),
                             glogits.view(), c.weight_grad_chunks);
    // Without gradients: the same losses.
    ops.linear_cross_entropy(gx.view(), gw.view(), gt.get(), grad_scale, Tensor(), Tensor(), gloss2.view(),
                             Tensor(), c.weight_grad_chunks);
    sync();
    EXPECT_EQ(ops.device_error(), "");

    EXPECT_TRUE(within("logits", glogits.download(), logits_ref,
                       bounds(logits_ref, 2 * u, logits_mag, 2 * (Hd + 3) * F), u));
    const float loss = gloss.download()[0], loss_nograd = gloss2.download()[0];
    const double loss_expected = 1.5 + loss_ref;
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_NEAR(loss, loss_expected, loss_bound + 4 * F * std::fabs(loss_expected))
        << "sum over " << counted << " tokens";
    // loss_bound adds every token's worst case; the tokens' rounding errors are independent, so
    // the sum's error grows like sqrt(T): 0.3e-5 to 5e-5 relative in a CPU emulation of the
    // kernels' arithmetic on these inputs. 2e-4 relative catches a single wrong row.
    EXPECT_NEAR(loss, loss_expected, 2e-4 * std::fabs(loss_ref) + 4 * F * std::fabs(loss_expected));
    EXPECT_NEAR(loss_nograd, loss_ref, loss_bound + 4 * F * std::fabs(loss_ref));
    EXPECT_EQ(static_cast<float>(static_cast<double>(loss_nograd) + 1.5), loss)
        << "the no-gradient call must compute the same per-token losses";
    EXPECT_TRUE(
        within("dx", gdx.download(), dx_ref, bounds(dx_ref, 2 * u, dx_mag, 2 * (dl + (V + 3) * F)), 4 * u));
    Vec dw_all_mag = dw_mag;
    for (size_t i = 0; i < dw_all_mag.size(); ++i)
      dw_all_mag[i] += std::fabs(dw0[i]) * static_cast<float>(F / dl);
    EXPECT_TRUE(within("dw", gdw.download(), dw_ref,
                       bounds(dw_ref, 2 * out_u(c.grad_dtype), dw_all_mag, 2 * (dl + (T + 3) * F)), 4 * u));
    EXPECT_TRUE(gdx.guards() && gdw.guards() && glogits.guards() && gloss.guards());
  }
}

// A target outside the vocabulary (and not -100) makes the loss NaN and raises the device flag.
TEST_F(CudaParity, LinearCrossEntropyBadTargetIsFlagged) {
  const int64_t T = 3, Hd = 16, V = 50;
  Vec x = uniform(T * Hd, 1), w = uniform(V * Hd, 2);
  round_bf16(x), round_bf16(w);
  DeviceInts gt(std::vector<int32_t>{1, static_cast<int32_t>(V), kIgnoreIndex});
  DeviceTensor gx = upload(DType::BF16, {T, Hd}, x), gw = upload(DType::BF16, {V, Hd}, w);
  DeviceTensor gloss = upload(DType::F32, {1}, Vec{0.0f});
  gpu_->linear_cross_entropy(gx.view(), gw.view(), gt.get(), 1.0f, Tensor(), Tensor(), gloss.view(), Tensor(),
                             1);
  sync();
  EXPECT_TRUE(std::isnan(gloss.download()[0]));
  const std::string error = gpu_->device_error();
  EXPECT_NE(error.find("target"), std::string::npos) << error;
}

// --------------------------------------------------------------------------------- attention

// An attention problem in bf16-exact inputs from seeds seed..seed+3 (q, k, v, dout) and the CPU
// reference's forward and backward of it over the documents `doc`.
struct AttentionReference {
  Vec q, k, v, dout, out, lse, dq, dk, dv;
  AttentionReference(Ops& cpu, int64_t Hq, int64_t Hkv, int64_t D, const std::vector<int32_t>& doc,
                     uint32_t seed)
      : q(uniform(doc.size() * Hq * D, seed)),
        k(uniform(doc.size() * Hkv * D, seed + 1)),
        v(uniform(doc.size() * Hkv * D, seed + 2)),
        dout(uniform(doc.size() * Hq * D, seed + 3)),
        out(q.size()),
        lse(doc.size() * Hq),
        dq(q.size()),
        dk(k.size()),
        dv(v.size()) {
    const int64_t T = static_cast<int64_t>(doc.size());
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    round_bf16(q), round_bf16(k), round_bf16(v), round_bf16(dout);
    cpu.attention_forward(H3(q, T, Hq, D), H3(k, T, Hkv, D), H3(v, T, Hkv, D), doc.data(), scale,
                          H3(out, T, Hq, D), H2(lse, Hq, T));
    cpu.attention_backward(H3(q, T, Hq, D), H3(k, T, Hkv, D), H3(v, T, Hkv, D), doc.data(), scale,
                           H3(out, T, Hq, D), H2(lse, Hq, T), H3(dout, T, Hq, D), H3(dq, T, Hq, D),
                           H3(dk, T, Hkv, D), H3(dv, T, Hkv, D));
  }
  double v_max() const {
    double m = 0;
    for (float x : v) m = std::max<double>(m, std::fabs(x));
    return m;
  }
};

// A gradient against its reference: within 1/32 of the reference's largest magnitude, or 1/64
// relative.
::testing::AssertionResult gradient_close(const char* name, const Vec& got, const Vec& ref) {
  double m = 0;
  for (float x : ref) m = std::max<double>(m, std::fabs(x));
  return within(name, got, ref, bounds(ref, 0.0, {}, m / 32), 1.0 / 64);
}

// Attention through the CUDA ops, forward then backward, against the CPU reference: tokens of the
// documents `doc`, `row_tokens` as AttentionMask says, inputs from seeds seed..seed+3; with that
// test's tolerances (ops_flash_attention_gpu_test tests the kernels themselves).
class CudaAttentionParity : public CudaParity {
 protected:
  void expect_matches_reference(int64_t Hq, int64_t Hkv, int64_t D, const std::vector<int32_t>& doc,
                                int64_t row_tokens, uint32_t seed) {
    const int64_t T = static_cast<int64_t>(doc.size());
    const AttentionReference r(*cpu_, Hq, Hkv, D, doc, seed);
    DeviceInts gdoc(doc);
    DeviceTensor gq = upload(DType::BF16, {T, Hq, D}, r.q), gk = upload(DType::BF16, {T, Hkv, D}, r.k);
    DeviceTensor gv = upload(DType::BF16, {T, Hkv, D}, r.v), gdo = upload(DType::BF16, {T, Hq, D}, r.dout);
    DeviceTensor gout(DType::BF16, {T, Hq, D}), glse(DType::F32, {Hq, T});
    DeviceTensor gdq(DType::BF16, {T, Hq, D}), gdk(DType::BF16, {T, Hkv, D}), gdv(DType::BF16, {T, Hkv, D});
    const AttentionMask mask(gdoc.get(), row_tokens);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    gpu_->attention_forward(gq.view(), gk.view(), gv.view(), mask, scale, gout.view(), glse.view());
    gpu_->attention_backward(gq.view(), gk.view(), gv.view(), mask, scale, gout.view(), glse.view(),
                             gdo.view(), gdq.view(), gdk.view(), gdv.view());
    sync();
    EXPECT_TRUE(within("out", gout.download(), r.out, bounds(r.out, 0.0, {}, 2 * 2 * u * r.v_max())));
    EXPECT_TRUE(within("lse", glse.download(), r.lse, bounds(r.lse, 0.0, {}, 1e-3)));
    EXPECT_TRUE(gradient_close("dq", gdq.download(), r.dq));
    EXPECT_TRUE(gradient_close("dk", gdk.download(), r.dk));
    EXPECT_TRUE(gradient_close("dv", gdv.download(), r.dv));
    EXPECT_TRUE(gout.guards() && glse.guards() && gdq.guards() && gdk.guards() && gdv.guards());
  }
};

// CudaOps' attention is flash_attention.h's (tested in ops_flash_attention_gpu_test); this checks
// the wrapper's views (shapes, lse layout, GQA, documents).
TEST_F(CudaAttentionParity, AttentionThroughOps) {
  std::vector<int32_t> doc(77);
  for (int32_t t = 0; t < 77; ++t) doc[static_cast<size_t>(t)] = t < 30 ? 0 : (t < 31 ? 30 : 31);
  expect_matches_reference(4, 2, 64, doc, 0, 11);
}

// Attention as a profile may choose it for each direction (Ops::use_library_attention): the
// library's (cuDNN, where it runs: rows of whole sequences) or ferry's own kernels for the forward
// and for the backward, each pair against the reference; the backward reads the forward's lse
// whichever wrote it.
TEST_F(CudaAttentionParity, AttentionChosenForEachDirectionMatchesTheReference) {
  const bool library = gpu_->has_library_attention();
  for (const int64_t D : {64, 128})
    for (const bool library_forward : {false, true})
      for (const bool library_backward : {false, true}) {
        if (!library && (library_forward || library_backward)) continue;
        SCOPED_TRACE(::testing::Message()
                     << "head_dim " << D << ", forward on "
                     << (library_forward ? "the library" : "ferry's kernels") << ", backward on "
                     << (library_backward ? "the library" : "ferry's kernels"));
        gpu_->use_library_attention(library_forward, library_backward);
        expect_matches_reference(4, 2, D, std::vector<int32_t>(256, 0), 256, 31);
      }
  gpu_->use_library_attention(true, true);
}

// One group of KV heads' attention (decoder_layer.h, head_groups): q, k, v hold the group's heads
// only, out and dout are the layer's full (T, Hq, D) tensors seen from the group's first head
// (ops.h). The group's columns must match the ungrouped reference's, every other column keep what
// it held, for the own kernels (document mask; head_dim 64 and 128 on tensor cores, 40 on the
// simple path) and cuDNN where it runs (rows that are whole sequences).
TEST_F(CudaParity, AttentionOfOneHeadGroupWritesItsColumns) {
  const int64_t T = 256, Hq = 8, Hkv = 4, G = 4, gHq = Hq / G, gHkv = Hkv / G;
  for (const int64_t D : {64, 128, 40}) {
    for (const bool whole_rows : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "head_dim " << D << (whole_rows ? ", rows of whole sequences" : ""));
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      std::vector<int32_t> doc(T);
      for (int64_t t = 0; t < T; ++t) doc[t] = whole_rows ? 0 : (t < 100 ? 0 : 100);
      const AttentionReference r(*cpu_, Hq, Hkv, D, doc, 21);
      const Vec &q = r.q, &k = r.k, &v = r.v, &dout = r.dout, &out_ref = r.out, &lse_ref = r.lse;
      const Vec &dq_ref = r.dq, &dk_ref = r.dk, &dv_ref = r.dv;
      const int64_t g = 2;  // heads 4..5 of q, KV head 2
      // Columns [c0, c0 + width) of every row of a (T, row) array.
      auto columns = [&](const Vec& x, int64_t row, int64_t c0, int64_t width) {
        Vec out(static_cast<size_t>(T * width));
        for (int64_t t = 0; t < T; ++t) std::copy_n(x.begin() + t * row + c0, width, out.begin() + t * width);
        return out;
      };
      const Vec qg = columns(q, Hq * D, g * gHq * D, gHq * D),
                kg = columns(k, Hkv * D, g * gHkv * D, gHkv * D),
                vg = columns(v, Hkv * D, g * gHkv * D, gHkv * D);
      Vec lse_g(lse_ref.begin() + g * gHq * T, lse_ref.begin() + (g + 1) * gHq * T);
      const Vec sentinel(static_cast<size_t>(T * Hq * D), 7.0f);
      DeviceInts gdoc(doc);
      DeviceTensor gq = upload(DType::BF16, {T, gHq, D}, qg), gk = upload(DType::BF16, {T, gHkv, D}, kg);
      DeviceTensor gv = upload(DType::BF16, {T, gHkv, D}, vg), gdo = upload(DType::BF16, {T, Hq, D}, dout);
      DeviceTensor gout = upload(DType::BF16, {T, Hq, D}, sentinel), glse(DType::F32, {gHq, T});
      DeviceTensor gdq(DType::BF16, {T, gHq, D}), gdk(DType::BF16, {T, gHkv, D}),
          gdv(DType::BF16, {T, gHkv, D});
      auto from_group = [&](DeviceTensor& full) {
        return Tensor(static_cast<char*>(full.view().data) + static_cast<size_t>(g * gHq * D) * 2,
                      DType::BF16, {T, Hq, D});
      };
      const AttentionMask mask(gdoc.get(), whole_rows ? T : 0);
      gpu_->attention_forward(gq.view(), gk.view(), gv.view(), mask, scale, from_group(gout), glse.view());
      gpu_->attention_backward(gq.view(), gk.view(), gv.view(), mask, scale, from_group(gout), glse.view(),
                               from_group(gdo), gdq.view(), gdk.view(), gdv.view());
      sync();
      const Vec out = gout.download();
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < Hq * D; ++c)
          if (c < g * gHq * D || c >= (g + 1) * gHq * D) {
            ASSERT_EQ(out[static_cast<size_t>(t * Hq * D + c)], 7.0f) << "token " << t << ", column " << c;
          }
      const double vmax = r.v_max();
      const Vec out_g_ref = columns(out_ref, Hq * D, g * gHq * D, gHq * D);
      EXPECT_TRUE(within("out", columns(out, Hq * D, g * gHq * D, gHq * D), out_g_ref,
                         bounds(out_g_ref, 0.0, {}, 2 * 2 * u * vmax)));
      EXPECT_TRUE(within("lse", glse.download(), lse_g, bounds(lse_g, 0.0, {}, 1e-3)));
      EXPECT_TRUE(gradient_close("dq", gdq.download(), columns(dq_ref, Hq * D, g * gHq * D, gHq * D)));
      EXPECT_TRUE(gradient_close("dk", gdk.download(), columns(dk_ref, Hkv * D, g * gHkv * D, gHkv * D)));
      EXPECT_TRUE(gradient_close("dv", gdv.download(), columns(dv_ref, Hkv * D, g * gHkv * D, gHkv * D)));
      EXPECT_TRUE(gout.guards() && glse.guards() && gdq.guards() && gdk.guards() && gdv.guards());
    }
  }
}

// ------------------------------------------------------------------------- GPU AdamW, clipping

std::string first_difference(const char* name, const Vec& got, const Vec& ref) {
  size_t count = 0, first = 0;
  int64_t max_ulp = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &ref[i], 4);
    if (a == b) continue;
    if (count++ == 0) first = i;
    max_ulp = std::max<int64_t>(max_ulp, std::llabs(static_cast<int64_t>(a) - static_cast<int64_t>(b)));
  }
  if (count == 0) return "";
  return std::string(name) + ": " + std::to_string(count) + " elements differ, max " +
         std::to_string(max_ulp) + " ulp; first [" + std::to_string(first) + "] got " +
         std::to_string(got[first]) + " expected " + std::to_string(ref[first]);
}

// GpuAdamW::step is adamw_step bit for bit (same fp32 operations in the same order): tolerance 0.
TEST_F(CudaParity, GpuAdamWMatchesReference) {
  const size_t n = 100003;
  const std::vector<AdamWSegment> aligned = {{0, 40000, true}, {40064, 19936, false}, {60032, 39971, true}};
  const std::vector<AdamWSegment> odd = {{1, 39999, true}, {40001, 20000, false}, {60003, 40000, true}};
  AdamWHyper h1;
  h1.lr = 1e-3, h1.beta1 = 0.9, h1.beta2 = 0.999, h1.eps = 1e-8, h1.weight_decay = 0.1;
  AdamWHyper h2;
  h2.lr = 3e-2, h2.beta1 = 0.3, h2.beta2 = 0.95, h2.eps = 1e-6, h2.weight_decay = 0.0;  // lerp weight >= 0.5
  GpuAdamW adamw(stream_);
  uint32_t seed = 900;
  for (const auto* segments : {&aligned, &odd}) {
    for (DType grad_dtype : {DType::F32, DType::BF16}) {
      for (const AdamWHyper* hyper : {&h1, &h2}) {
        for (bool scaled : {false, true}) {
          SCOPED_TRACE(std::string(segments == &aligned ? "aligned" : "odd") + " segments, grads " +
                       std::string(dtype_name(grad_dtype)) + ", beta1 " + std::to_string(hyper->beta1) +
                       (scaled ? ", grad_scale 0.73" : ""));
          Vec master = uniform(n, ++seed), m = uniform(n, ++seed, -1e-3f, 1e-3f),
              v = uniform(n, ++seed, 0, 1e-5f);
          DeviceTensor gm = upload(DType::F32, {int64_t(n)}, master),
                       gmm = upload(DType::F32, {int64_t(n)}, m);
          DeviceTensor gv = upload(DType::F32, {int64_t(n)}, v), gout(DType::BF16, {int64_t(n)});
          DeviceTensor gscale = upload(DType::F32, {1}, Vec{0.73f});
          for (int64_t step = 1; step <= 3; ++step) {
            Vec grad = uniform(n, ++seed, -1e-2f, 1e-2f);
            for (size_t i = 0; i < n; i += 997) grad[i] = i % 2 ? 0.0f : 3.0f;  // zeros and large values
            cudatest::round_to(grad, grad_dtype);
            DeviceTensor gg = upload(grad_dtype, {int64_t(n)}, grad);
            AdamWUnitBuffers unit;
            unit.master = static_cast<float*>(gm.data());
            unit.m = static_cast<float*>(gmm.data());
            unit.v = static_cast<float*>(gv.data());
            unit.grad = gg.data();
            unit.grad_dtype = grad_dtype;
            unit.bf16_out = static_cast<uint16_t*>(gout.data());
            adamw.step(unit, *segments, *hyper, step,
                       scaled ? static_cast<const float*>(gscale.data()) : nullptr);
            for (const AdamWSegment& s : *segments)
              adamw_step(master.data() + s.offset, m.data() + s.offset, v.data() + s.offset,
                         grad.data() + s.offset, s.count, *hyper, step, s.decay, scaled ? 0.73f : 1.0f);
            sync();
            const std::string diff = first_difference("master", gm.download(), master) +
                                     first_difference(" m", gmm.download(), m) +
                                     first_difference(" v", gv.download(), v);
            EXPECT_EQ(diff, "") << "step " << step;
            // The bf16 copy: f32_to_bf16 of the new master inside the segments, untouched (NaN
            // bytes) outside.
            const std::vector<unsigned char> raw = gout.download_raw();
            size_t bad = 0;
            std::vector<bool> inside(n, false);
            for (const AdamWSegment& s : *segments)
              for (size_t i = s.offset; i < s.offset + s.count; ++i) inside[i] = true;
            for (size_t i = 0; i < n; ++i) {
              uint16_t got;
              std::memcpy(&got, raw.data() + 2 * i, 2);
              const uint16_t want = inside[i] ? f32_to_bf16(master[i]) : uint16_t{0xffff};
              bad += got != want;
            }
            EXPECT_EQ(bad, 0u) << "bf16 copy, step " << step;
            EXPECT_TRUE(gm.guards() && gmm.guards() && gv.guards() && gout.guards());
          }
        }
      }
    }
  }
}

// add_grad_sumsq over units, then clip_coefficient, is clip.cpp's computation bit for bit.
TEST_F(CudaParity, GpuGradNormAndClipMatchReference) {
  GpuAdamW adamw(stream_);
  const size_t sizes[] = {1, 65536, 65537, 300001, 131077};
  std::vector<Vec> spans;
  std::vector<std::unique_ptr<DeviceTensor> > device;
  DeviceTensor gsum = upload(DType::F64, {1}, Vec{0.0f});
  uint32_t seed = 1000;
  for (size_t k = 0; k < std::size(sizes); ++k) {
    const DType dtype = k % 2 ? DType::BF16 : DType::F32;
    Vec g = uniform(sizes[k], ++seed, -0.5f, 0.5f);
    for (float& x : g) x *= static_cast<float>(k + 1);
    cudatest::round_to(g, dtype);
    device.push_back(std::make_unique<DeviceTensor>(dtype, std::vector<int64_t>{int64_t(sizes[k])}));
    device.back()->upload(g);
    adamw.add_grad_sumsq(device.back()->data(), dtype, sizes[k], static_cast<double*>(gsum.data()));
    spans.push_back(std::move(g));
  }
  std::vector<std::pair<const float*, size_t> > host;
  for (const Vec& s : spans) host.emplace_back(s.data(), s.size());
  const std::vector<double> partials = grad_sumsq_partials(host);
  double total = 0.0;
  for (double p : partials) total += p;
  const double norm = norm_from_partials(partials);
  sync();
  double got = 0.0;
  const std::vector<unsigned char> raw = gsum.download_raw();
  std::memcpy(&got, raw.data(), 8);
  EXPECT_EQ(got, total) << "sum of squares differs by " << (got - total);
  EXPECT_EQ(std::sqrt(got), norm);

  for (double max_norm : {1.0, 0.5 * norm, norm, 1e9, 0.0, -1.0}) {
    DeviceTensor gcoef(DType::F32, {1});
    adamw.clip_coefficient(static_cast<const double*>(gsum.data()), max_norm,
                           static_cast<float*>(gcoef.data()));
    sync();
    const float coef = gcoef.download()[0];
    const float want = clip_coefficient(norm, max_norm);
    EXPECT_EQ(std::memcmp(&coef, &want, 4), 0)
        << "max_norm " << max_norm << ": got " << coef << " want " << want;
  }
}

#endif  // FERRY_HAVE_CUDA

}  // namespace
}  // namespace ferry
