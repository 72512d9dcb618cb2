#include "engine/unit_optimizer.h"

#include "core/error.h"
#include "optim/clip.h"

namespace ferry {

UnitOptimizer::UnitOptimizer(const ModelLayout& layout, bool decay_all)
    : layout_(layout), decay_all_(decay_all) {
  for (const auto& u : layout_.units) {
    m_.emplace_back(static_cast<size_t>(u.numel), 0.0f);
    v_.emplace_back(static_cast<size_t>(u.numel), 0.0f);
  }
}

UpdateStats UnitOptimizer::step(const std::vector<float*>& params, const std::vector<const float*>& grads,
                                const AdamWHyper& hyper, double max_grad_norm, int64_t step) {
  FERRY_ASSERT(params.size() == layout_.units.size() && grads.size() == layout_.units.size());
  std::vector<std::pair<const float*, size_t>> spans;
  for (size_t u = 0; u < layout_.units.size(); ++u)
    for (const auto& p : layout_.units[u].params)
      spans.emplace_back(grads[u] + p.offset, static_cast<size_t>(p.numel));
  UpdateStats stats;
  stats.grad_norm = global_grad_norm(spans);
  stats.clip_coefficient = max_grad_norm > 0 ? clip_coefficient(stats.grad_norm, max_grad_norm) : 1.0f;
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    for (const auto& p : layout_.units[u].params) {
      const size_t o = static_cast<size_t>(p.offset);
      adamw_step(params[u] + o, m_[u].data() + o, v_[u].data() + o, grads[u] + o,
                 static_cast<size_t>(p.numel), hyper, step, p.decay || decay_all_, stats.clip_coefficient);
    }
  }
  return stats;
}

}  // namespace ferry
