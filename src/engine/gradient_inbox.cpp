#include "engine/gradient_inbox.h"

#include <algorithm>

#include "core/check.h"
#include "core/dtype.h"
#include "planner/memory_model.h"

namespace ferry {

GradientInbox::GradientInbox(Device& device, const ModelLayout& layout, const Plan& plan, size_t sparse_unit,
                             int64_t max_rows, size_t row_len, void* row_gradients)
    : device_(device), sparse_unit_(sparse_unit) {
  const GradientLanding landing = gradient_landing(layout, plan);
  in_ring_ = landing.in_ring;
  dedicated_.resize(layout.units.size());
  for (size_t u = 0; u < layout.units.size(); ++u)
    if (landing.dedicated[u])
      dedicated_[u] =
          PinnedBuffer(device_, static_cast<size_t>(layout.units[u].numel) * dtype_size(plan.grad_dtype),
                       "gradient landing");
  if (sparse_unit_ != SIZE_MAX) {
    row_gradient_bytes_ = static_cast<size_t>(max_rows) * row_len * dtype_size(plan.grad_dtype);
    if (row_gradients == nullptr) {
      own_row_gradients_ = PinnedBuffer(device_, row_gradient_bytes_, "embedding row gradients");
      row_gradients = own_row_gradients_.data();
    }
    row_gradients_ = row_gradients;
  }
  for (size_t k = 0; k < landing.ring_buffers; ++k)
    ring_.emplace_back(device_, landing.ring_elements * dtype_size(plan.grad_dtype), "gradient ring");
}

void* GradientInbox::own(size_t u, void* staging) const {
  if (u == sparse_unit_) return row_gradients_;
  return dedicated_[u].data() != nullptr ? dedicated_[u].data() : staging;
}

GradientBuffer GradientInbox::reserve(size_t u, void* staging, StreamKind stream) {
  if (!in_ring_[u]) return {own(u, staging), -1};
  const int64_t ticket = ring_reserved_++;
  const int64_t buffers = static_cast<int64_t>(ring_.size());
  if (ticket >= buffers) {
    // The buffer's previous gradient (ticket - buffers) must have been read by its update. Updates
    // consume tickets in order, so a count is enough. An abandoned inbox ends the wait: the
    // updater's error surfaces where the engine next waits on it.
    device_.host_task(stream, [this, needed = ticket - buffers + 1] {
      std::unique_lock<std::mutex> lock(mutex_);
      consumed_changed_.wait(lock, [&] { return abandoned_ || ring_consumed_ >= needed; });
    });
  }
  return {ring_[static_cast<size_t>(ticket % buffers)].data(), ticket};
}

void GradientInbox::consumed(int64_t ticket) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ring_consumed_ = std::max(ring_consumed_, ticket + 1);
  }
  consumed_changed_.notify_all();
}

void GradientInbox::abandon() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    abandoned_ = true;
  }
  consumed_changed_.notify_all();
}

}  // namespace ferry
