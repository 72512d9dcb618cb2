#include "planner/scaled_profile.h"

#include "core/error.h"
#include "planner/nominal_profile.h"

namespace ferry {

namespace {

// The measured time with its per-token part scaled as the nominal per-token times scale.
LinearTime scaled(const LinearTime& measured, const LinearTime& nominal_from, const LinearTime& nominal_to) {
  FERRY_ASSERT(nominal_from.per_token_s > 0);
  return {measured.fixed_s, measured.per_token_s * nominal_to.per_token_s / nominal_from.per_token_s};
}

}  // namespace

MachineProfile scale_profile(const MachineProfile& measured, const ModelConfig& measured_shape,
                             const ModelConfig& target, const std::string& measured_name) {
  FERRY_CHECK(model_shape_key(measured_shape, measured.seq_len, measured.weight_dtype) == measured.shape_key,
              "profile",
              "the profile was measured for {}, not for {}'s shape; name the shape it was measured for",
              measured.shape_key, measured_name);
  const MachineProfile from = nominal_profile(measured_shape, measured.seq_len, measured.weight_dtype);
  const MachineProfile to = nominal_profile(target, measured.seq_len, measured.weight_dtype);
  MachineProfile p = measured;
  p.shape_key = to.shape_key;
  p.device_name = measured.device_name + ", compute scaled by FLOPs from its " + measured_name + " profile";
  ComputeProfile& c = p.compute;
  const ComputeProfile &m = measured.compute, &f = from.compute, &t = to.compute;
  c.embedding_forward = scaled(m.embedding_forward, f.embedding_forward, t.embedding_forward);
  c.embedding_backward = scaled(m.embedding_backward, f.embedding_backward, t.embedding_backward);
  c.layer_forward = scaled(m.layer_forward, f.layer_forward, t.layer_forward);
  c.layer_backward = scaled(m.layer_backward, f.layer_backward, t.layer_backward);
  // The nominal profile has no kept-internals backward; it scales as the backward's GEMMs do.
  if (m.layer_backward_kept.per_token_s > 0)
    c.layer_backward_kept = scaled(m.layer_backward_kept, f.layer_backward, t.layer_backward);
  if (m.layer_backward_kept_all.per_token_s > 0)
    c.layer_backward_kept_all = scaled(m.layer_backward_kept_all, f.layer_backward, t.layer_backward);
  c.head = scaled(m.head, f.head, t.head);
  c.head_f32_grads = scaled(m.head_f32_grads, f.head, t.head);
  c.head_grouped = scaled(m.head_grouped, f.head, t.head);
  c.head_f32_grads_grouped = scaled(m.head_f32_grads_grouped, f.head, t.head);
  return p;
}

}  // namespace ferry
