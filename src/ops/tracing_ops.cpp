#include "ops/tracing_ops.h"

namespace ferry {

namespace {
// "x (65536, 2048), w (8192, 2048)": the operands that are given, by name.
std::string operands(std::initializer_list<std::pair<const char*, const Tensor*>> named) {
  std::string out;
  for (const auto& [name, tensor] : named) {
    if (tensor->empty()) continue;
    out += (out.empty() ? "" : ", ") + std::string(name) + " " + tensor->shape_string();
  }
  return out;
}
}  // namespace

TracingOps::TracingOps(std::unique_ptr<Ops> inner, Tracer& tracer, StreamKind stream)
    : WrappingOps(std::move(inner)), tracer_(tracer), stream_(stream) {}

void TracingOps::embedding_forward(const int32_t* ids, Tensor table, Tensor out) {
  traced("embedding_forward", [&](Ops& ops) { ops.embedding_forward(ids, table, out); });
}

void TracingOps::embedding_backward(const int32_t* ids, Tensor dout, Tensor dtable) {
  traced("embedding_backward", [&](Ops& ops) { ops.embedding_backward(ids, dout, dtable); });
}

void TracingOps::rmsnorm_forward(Tensor x, Tensor weight, float eps, Tensor out, Tensor rstd) {
  traced("rmsnorm_forward", [&](Ops& ops) { ops.rmsnorm_forward(x, weight, eps, out, rstd); });
}

void TracingOps::rmsnorm_backward(Tensor x, Tensor weight, Tensor rstd, Tensor dout, Tensor dresidual,
                                  Tensor dx, Tensor dweight) {
  traced("rmsnorm_backward",
         [&](Ops& ops) { ops.rmsnorm_backward(x, weight, rstd, dout, dresidual, dx, dweight); });
}

void TracingOps::rope(Tensor x, const int32_t* positions, const float* inv_freq, bool inverse) {
  traced(inverse ? "rope_inverse" : "rope", [&](Ops& ops) { ops.rope(x, positions, inv_freq, inverse); });
}

void TracingOps::attention_forward(Tensor q, Tensor k, Tensor v, AttentionMask mask, float scale, Tensor out,
                                   Tensor lse) {
  traced(
      "attention_forward",
      [&] {
        return operands({{"q", &q}, {"k", &k}});
      },
      [&](Ops& ops) { ops.attention_forward(q, k, v, mask, scale, out, lse); });
}

void TracingOps::attention_backward(Tensor q, Tensor k, Tensor v, AttentionMask mask, float scale, Tensor out,
                                    Tensor lse, Tensor dout, Tensor dq, Tensor dk, Tensor dv) {
  traced(
      "attention_backward",
      [&] {
        return operands({{"q", &q}, {"k", &k}});
      },
      [&](Ops& ops) { ops.attention_backward(q, k, v, mask, scale, out, lse, dout, dq, dk, dv); });
}

void TracingOps::attention_cached(Tensor q, Tensor k, Tensor v, float scale, Tensor out) {
  traced("attention_cached", [&](Ops& ops) { ops.attention_cached(q, k, v, scale, out); });
}

void TracingOps::swiglu_forward(Tensor gate, Tensor up, Tensor out) {
  traced("swiglu_forward", [&](Ops& ops) { ops.swiglu_forward(gate, up, out); });
}

void TracingOps::swiglu_backward(Tensor gate, Tensor up, Tensor dout, Tensor dgate, Tensor dup, Tensor out) {
  traced("swiglu_backward", [&](Ops& ops) { ops.swiglu_backward(gate, up, dout, dgate, dup, out); });
}

void TracingOps::linear_forward(Tensor x, Tensor w, Tensor bias, Tensor residual, Tensor y) {
  traced(
      "linear_forward",
      [&] {
        return operands({{"x", &x}, {"w", &w}}) + (residual.empty() ? "" : ", + residual");
      },
      [&](Ops& ops) { ops.linear_forward(x, w, bias, residual, y); });
}

void TracingOps::linear_backward(Tensor x, Tensor w, Tensor dy, Tensor dx, Tensor dw, Tensor dbias,
                                 bool accumulate_dx) {
  traced(
      "linear_backward",
      [&] {
        return operands({{"x", &x}, {"w", &w}}) +
               (dx.empty()      ? ""
                : accumulate_dx ? ", dx +="
                                : ", dx") +
               (dw.empty() ? "" : std::string(", dw ") + std::string(dtype_name(dw.dtype)));
      },
      [&](Ops& ops) { ops.linear_backward(x, w, dy, dx, dw, dbias, accumulate_dx); });
}

void TracingOps::linear_cross_entropy(Tensor x, Tensor w, const int32_t* targets, float grad_scale, Tensor dx,
                                      Tensor dw, Tensor loss_sum, Tensor logits, int64_t weight_grad_chunks) {
  traced(
      "linear_cross_entropy",
      [&] {
        return operands({{"x", &x}, {"w", &w}});
      },
      [&](Ops& ops) {
        ops.linear_cross_entropy(x, w, targets, grad_scale, dx, dw, loss_sum, logits, weight_grad_chunks);
      });
}

void TracingOps::add(Tensor a, Tensor b, Tensor out) {
  traced("add", [&](Ops& ops) { ops.add(a, b, out); });
}

void TracingOps::zero(Tensor x) {
  traced("zero", [&](Ops& ops) { ops.zero(x); });
}

void TracingOps::copy(Tensor src, Tensor dst) {
  traced("copy", [&](Ops& ops) { ops.copy(src, dst); });
}

}  // namespace ferry
