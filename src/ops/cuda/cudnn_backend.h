// A thin C++ face on cuDNN's backend (graph) API, over the run-time loaded library
// (cudnn_library.h): descriptors that destroy themselves, typed attribute setters, the three kinds
// of operation an attention graph is made of (matmul, pointwise, reduction), and an execution plan
// chosen by cuDNN's heuristics. Every failure throws cudnn::Failure with cuDNN's own message, so a
// caller can fall back to its own kernels.
#pragma once

#include <cudnn_graph.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/cuda/cudnn_library.h"

namespace ferry::cudnn {

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws Failure when status is not CUDNN_STATUS_SUCCESS; `what` names the call.
void check(const Library& lib, cudnnStatus_t status, const char* what);

class Descriptor {
 public:
  Descriptor() = default;
  Descriptor(const Library& lib, cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(Descriptor&& other) noexcept;
  Descriptor& operator=(Descriptor&& other) noexcept;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }
  explicit operator bool() const { return desc_ != nullptr; }

  Descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                  const void* values);
  Descriptor& set_int64(cudnnBackendAttributeName_t name, int64_t value);
  Descriptor& set_int64s(cudnnBackendAttributeName_t name, const std::vector<int64_t>& values);
  Descriptor& set_bool(cudnnBackendAttributeName_t name, bool value);
  Descriptor& set_data_type(cudnnBackendAttributeName_t name, cudnnDataType_t value);
  Descriptor& set_descriptor(cudnnBackendAttributeName_t name, const Descriptor& value);
  Descriptor& set_descriptors(cudnnBackendAttributeName_t name, const std::vector<const Descriptor*>& values);
  Descriptor& finalize();

 private:
  const Library* lib_ = nullptr;
  cudnnBackendDescriptor_t desc_ = nullptr;
};

// A tensor of the graph. Virtual tensors live only inside the fused kernel; by-value tensors are
// host scalars handed to the plan at execution (their dims and strides all 1).
struct TensorSpec {
  int64_t uid = 0;
  std::vector<int64_t> dims, strides;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  bool is_virtual = false;
  bool by_value = false;
  // A ragged batch: where each batch entry starts, an int64 [b + 1, 1, 1, 1] tensor of element
  // offsets (the batch stride is then not used).
  const Descriptor* ragged_offset = nullptr;
};
Descriptor make_tensor(const Library& lib, const TensorSpec& spec);

// Packed strides of `dims`, last dimension fastest.
std::vector<int64_t> packed_strides(const std::vector<int64_t>& dims);

// y = op(x [, b [, t]]) elementwise with broadcasting; math in `precision`. axis is GEN_INDEX's.
Descriptor make_pointwise(const Library& lib, cudnnPointwiseMode_t mode, cudnnDataType_t precision,
                          const Descriptor& x, const Descriptor* b, const Descriptor* t, const Descriptor& y,
                          int64_t axis = -1);
// y = reduce(x) over the dimensions where y has extent 1 and x does not.
Descriptor make_reduction(const Library& lib, cudnnReduceTensorOp_t op, const Descriptor& x,
                          const Descriptor& y);
// Per-batch extents of a product over a ragged batch: int32 [b, 1, 1, 1] tensors of the m, n or
// k each batch entry really has (the dims give the most); null where the dims hold for every entry.
struct MatmulOverrides {
  const Descriptor *m = nullptr, *n = nullptr, *k = nullptr;
};
// c = a @ b over the last two dimensions, batched (and broadcast) over the others; fp32 math.
Descriptor make_matmul(const Library& lib, const Descriptor& a, const Descriptor& b, const Descriptor& c,
                       const MatmulOverrides& overrides = {});

// y = x seen through other dims and strides (a transposed view), no data moved.
Descriptor make_reshape(const Library& lib, const Descriptor& x, const Descriptor& y);

// A finalized execution plan for a graph of operations, and the workspace it needs.
struct Plan {
  Descriptor plan;
  int64_t workspace_bytes = 0;
  std::string engine;  // what was chosen, for logs
};
// Tries the heuristics' engine configurations in order (mode A, then the fallback list) and
// returns the first whose plan finalizes. Throws Failure when none does.
Plan make_plan(const Library& lib, cudnnHandle_t handle, const std::vector<const Descriptor*>& operations);

// Runs `plan` with the tensors' device (or, for by-value tensors, host) addresses.
void execute(const Library& lib, cudnnHandle_t handle, const Plan& plan, const std::vector<int64_t>& uids,
             const std::vector<void*>& pointers, void* workspace);

}  // namespace ferry::cudnn
