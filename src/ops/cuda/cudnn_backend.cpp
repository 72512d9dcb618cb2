#include "ops/cuda/cudnn_backend.h"

#include <fmt/format.h>

#include <utility>

namespace ferry::cudnn {

namespace {

// The operation graph's and the plan's handle attributes, deprecated in late 9.x headers (which
// then take the handle from elsewhere) but still read by the 9.x libraries in use: set by value.
constexpr auto kOperationGraphHandle = static_cast<cudnnBackendAttributeName_t>(800);
constexpr auto kExecutionPlanHandle = static_cast<cudnnBackendAttributeName_t>(400);

}  // namespace

void check(const Library& lib, cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  char detail[1024] = {};
  lib.get_last_error_string(detail, sizeof(detail));
  throw Failure(fmt::format("cuDNN {}: {} ({})", what, lib.get_error_string(status), detail));
}

Descriptor::Descriptor(const Library& lib, cudnnBackendDescriptorType_t type) : lib_(&lib) {
  check(lib, lib.create_descriptor(type, &desc_), "create descriptor");
}

Descriptor::~Descriptor() {
  if (desc_ != nullptr) lib_->destroy_descriptor(desc_);
}

Descriptor::Descriptor(Descriptor&& other) noexcept
    : lib_(other.lib_), desc_(std::exchange(other.desc_, nullptr)) {}

Descriptor& Descriptor::operator=(Descriptor&& other) noexcept {
  if (this != &other) {
    if (desc_ != nullptr) lib_->destroy_descriptor(desc_);
    lib_ = other.lib_;
    desc_ = std::exchange(other.desc_, nullptr);
  }
  return *this;
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                            const void* values) {
  const cudnnStatus_t status = lib_->set_attribute(desc_, name, type, count, values);
  if (status != CUDNN_STATUS_SUCCESS) {
    const std::string what = fmt::format("set attribute {}", static_cast<int>(name));
    check(*lib_, status, what.c_str());
  }
  return *this;
}

Descriptor& Descriptor::set_int64(cudnnBackendAttributeName_t name, int64_t value) {
  return set(name, CUDNN_TYPE_INT64, 1, &value);
}

Descriptor& Descriptor::set_int64s(cudnnBackendAttributeName_t name, const std::vector<int64_t>& values) {
  return set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(values.size()), values.data());
}

Descriptor& Descriptor::set_bool(cudnnBackendAttributeName_t name, bool value) {
  return set(name, CUDNN_TYPE_BOOLEAN, 1, &value);
}

Descriptor& Descriptor::set_data_type(cudnnBackendAttributeName_t name, cudnnDataType_t value) {
  return set(name, CUDNN_TYPE_DATA_TYPE, 1, &value);
}

Descriptor& Descriptor::set_descriptor(cudnnBackendAttributeName_t name, const Descriptor& value) {
  cudnnBackendDescriptor_t d = value.get();
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
}

Descriptor& Descriptor::set_descriptors(cudnnBackendAttributeName_t name,
                                        const std::vector<const Descriptor*>& values) {
  std::vector<cudnnBackendDescriptor_t> raw;
  raw.reserve(values.size());
  for (const Descriptor* d : values) raw.push_back(d->get());
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()), raw.data());
}

Descriptor& Descriptor::finalize() {
  check(*lib_, lib_->finalize(desc_), "finalize");
  return *this;
}

std::vector<int64_t> packed_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  return strides;
}

Descriptor make_tensor(const Library& lib, const TensorSpec& spec) {
  Descriptor t(lib, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set_data_type(CUDNN_ATTR_TENSOR_DATA_TYPE, spec.type)
      .set_int64s(CUDNN_ATTR_TENSOR_DIMENSIONS, spec.dims)
      .set_int64s(CUDNN_ATTR_TENSOR_STRIDES, spec.strides.empty() ? packed_strides(spec.dims) : spec.strides)
      .set_int64(CUDNN_ATTR_TENSOR_UNIQUE_ID, spec.uid)
      .set_int64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16)
      .set_bool(CUDNN_ATTR_TENSOR_IS_VIRTUAL, spec.is_virtual);
  if (spec.by_value) t.set_bool(CUDNN_ATTR_TENSOR_IS_BY_VALUE, true);
  if (spec.ragged_offset != nullptr)
    t.set_descriptor(CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, *spec.ragged_offset);
  return std::move(t.finalize());
}

Descriptor make_pointwise(const Library& lib, cudnnPointwiseMode_t mode, cudnnDataType_t precision,
                          const Descriptor& x, const Descriptor* b, const Descriptor* t, const Descriptor& y,
                          int64_t axis) {
  Descriptor pw(lib, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
      .set_data_type(CUDNN_ATTR_POINTWISE_MATH_PREC, precision);
  if (axis >= 0) pw.set_int64(CUDNN_ATTR_POINTWISE_AXIS, axis);
  pw.finalize();
  Descriptor op(lib, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
      .set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (b != nullptr) op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
  if (t != nullptr) op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t);
  op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  // The fused engines match patterns as cuDNN's own frontend emits them, which sets both alphas.
  const float one = 1.0f;
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
  return std::move(op.finalize());
}

Descriptor make_reduction(const Library& lib, cudnnReduceTensorOp_t reduce, const Descriptor& x,
                          const Descriptor& y) {
  Descriptor r(lib, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce)
      .set_data_type(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT);
  if (lib.version >= 91100) r.set_bool(CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, false);
  r.finalize();
  Descriptor op(lib, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r)
      .set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x)
      .set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
  return std::move(op.finalize());
}

Descriptor make_matmul(const Library& lib, const Descriptor& a, const Descriptor& b, const Descriptor& c,
                       const MatmulOverrides& overrides) {
  Descriptor mm(lib, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const double padding = 0.0;
  mm.set_data_type(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT)
      .set(CUDNN_ATTR_MATMUL_PADDING_VALUE, CUDNN_TYPE_DOUBLE, 1, &padding)
      .finalize();
  Descriptor op(lib, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a)
      .set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b)
      .set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c)
      .set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
  if (overrides.m != nullptr)
    op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, *overrides.m);
  if (overrides.n != nullptr)
    op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, *overrides.n);
  if (overrides.k != nullptr)
    op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, *overrides.k);
  return std::move(op.finalize());
}

Descriptor make_reshape(const Library& lib, const Descriptor& x, const Descriptor& y) {
  Descriptor op(lib, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op.set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x)
      .set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
  return std::move(op.finalize());
}

namespace {

// The engine configurations the heuristics of `mode` propose for `graph`, best first.
std::vector<Descriptor> engine_configs(const Library& lib, const Descriptor& graph,
                                       cudnnBackendHeurMode_t mode) {
  Descriptor heur(lib, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set_descriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode)
      .finalize();
  int64_t count = 0;
  check(lib,
        lib.get_attribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                          nullptr),
        "count heuristic results");
  std::vector<Descriptor> configs;
  for (int64_t i = 0; i < count; ++i) configs.emplace_back(lib, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> raw;
  for (auto& c : configs) raw.push_back(c.get());
  int64_t got = 0;
  check(lib,
        lib.get_attribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                          &got, raw.data()),
        "read heuristic results");
  configs.resize(static_cast<size_t>(got));
  return configs;
}

}  // namespace

Plan make_plan(const Library& lib, cudnnHandle_t handle, const std::vector<const Descriptor*>& operations) {
  Descriptor graph(lib, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set_descriptors(CUDNN_ATTR_OPERATIONGRAPH_OPS, operations)
      .set(kOperationGraphHandle, CUDNN_TYPE_HANDLE, 1, &handle)
      .finalize();
  std::string refusals;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Descriptor> configs;
    try {
      configs = engine_configs(lib, graph, mode);
    } catch (const Failure& e) {
      refusals += fmt::format("\n  heuristics mode {}: {}", static_cast<int>(mode), e.what());
      continue;
    }
    for (size_t i = 0; i < configs.size(); ++i) {
      try {
        Plan p;
        p.plan = Descriptor(lib, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        p.plan.set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i])
            .set(kExecutionPlanHandle, CUDNN_TYPE_HANDLE, 1, &handle)
            .finalize();
        int64_t got = 0;
        check(lib,
              lib.get_attribute(p.plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                &got, &p.workspace_bytes),
              "read workspace size");
        p.engine = fmt::format("heuristics mode {}, configuration {} of {}", static_cast<int>(mode), i + 1,
                               configs.size());
        return p;
      } catch (const Failure& e) {
        refusals += fmt::format("\n  heuristics mode {}, configuration {}: {}", static_cast<int>(mode), i + 1,
                                e.what());
      }
    }
    if (configs.empty())
      refusals += fmt::format("\n  heuristics mode {}: no configuration", static_cast<int>(mode));
  }
  throw Failure("no cuDNN engine runs this graph:" + refusals);
}

void execute(const Library& lib, cudnnHandle_t handle, const Plan& plan, const std::vector<int64_t>& uids,
             const std::vector<void*>& pointers, void* workspace) {
  Descriptor pack(lib, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set_int64s(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, uids)
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(pointers.size()),
           pointers.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace)
      .finalize();
  check(lib, lib.execute(handle, plan.plan.get(), pack.get()), "execute");
}

}  // namespace ferry::cudnn
