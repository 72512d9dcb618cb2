#include "engine/unit_optimizer.h"

#include "core/error.h"
#include "core/log.h"
#include "optim/clip.h"
#include "optim/cpu_adamw.h"

namespace ferry {

UnitOptimizer::UnitOptimizer(const ModelLayout& layout, bool decay_all, OptimizerStateFormat format,
                             uint64_t seed)
    : layout_(layout), decay_all_(decay_all), format_(format) {
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    const size_t n = static_cast<size_t>(layout_.units[u].numel);
    if (is_exact(format_)) {
      m_.emplace_back(n, 0.0f);
      v_.emplace_back(n, 0.0f);
      continue;
    }
    std::vector<std::vector<char>> arrays;
    std::vector<void*> bases;
    for (const StateArraySpec& spec : state_arrays(format_)) {
      arrays.emplace_back(state_array_bytes(spec.kind, n), 0);
      bases.push_back(arrays.back().data());
    }
    lean_.push_back(std::move(arrays));
    views_.push_back(lean_unit_view(format_, n, bases, lean_unit_seed(seed, u)));
  }
}

void UnitOptimizer::assign_masters(const std::vector<float*>& params) {
  if (is_exact(format_)) return;
  for (size_t u = 0; u < views_.size(); ++u) lean_write_masters(views_[u], params[u], 0, views_[u].numel);
  read_masters(params);
}

void UnitOptimizer::read_masters(const std::vector<float*>& params) const {
  if (is_exact(format_)) return;
  for (size_t u = 0; u < views_.size(); ++u) lean_read_masters(views_[u], params[u], 0, views_[u].numel);
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
    if (!is_exact(format_)) {
      // The sliding engine's updater makes the same call with the same segments (unit_updater.cpp).
      std::vector<AdamWSegment> segments;
      for (const auto& p : layout_.units[u].params)
        segments.push_back(
            {static_cast<size_t>(p.offset), static_cast<size_t>(p.numel), p.decay || decay_all_});
      const LeanStepStats lean = lean_adamw_step(views_[u], segments, grads[u], DType::F32, nullptr, hyper,
                                                 step, stats.clip_coefficient);
      if (lean.lost > 0 && !warned_lost_updates_) {
        warned_lost_updates_ = true;
        log_warn("{}", lost_updates_warning(format_, lean, layout_.units[u].name, step));
      }
      lean_read_masters(views_[u], params[u], 0, views_[u].numel);
      continue;
    }
    for (const auto& p : layout_.units[u].params) {
      const size_t o = static_cast<size_t>(p.offset);
      adamw_step(params[u] + o, m_[u].data() + o, v_[u].data() + o, grads[u] + o,
                 static_cast<size_t>(p.numel), hyper, step, p.decay || decay_all_, stats.clip_coefficient);
    }
  }
  return stats;
}

}  // namespace ferry
