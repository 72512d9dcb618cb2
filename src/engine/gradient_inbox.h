// Where the gradients of host-updated units land on the host, and when a landing place may be
// written again: the policy of planner/memory_model.h's gradient_landing(), owned in one place so
// that the memory model and the updater cannot disagree about it.
//
//  * WeightUpload::HostShadow: in the unit's pinned weight staging, over the weights its backward
//    upload already read (unit_updater.h).
//  * ConvertOnUpload: in a pinned buffer of the unit's own, or, for the decoder layers without
//    clipping, in a ring of layer-sized buffers taken in turn. A ring buffer may be written again
//    once the update of the gradient before it there has read it: reserve() issues that wait on
//    the copy's stream, consumed() ends it.
//  * The row-sparse embedding: its token rows' gradients, in a buffer given (an offloaded
//    boundary's, free at the step's end) or one of the inbox's own.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "device/device.h"
#include "model/unit_layout.h"
#include "planner/plan.h"

namespace ferry {

// Where a host-updated unit's gradient is to land (GradientInbox::reserve), handed back with the
// landing (UnitUpdater::gradient_landed).
struct GradientBuffer {
  void* data = nullptr;      // pinned, numel x grad dtype
  int64_t ring_ticket = -1;  // its place in the ring's sequence; -1 outside the ring
};

class GradientInbox {
 public:
  // `sparse_unit`: the row-sparse embedding's unit (SIZE_MAX: none), whose gradient has at most
  // `max_rows` rows of `row_len`; they land in `row_gradients` when given.
  GradientInbox(Device& device, const ModelLayout& layout, const Plan& plan, size_t sparse_unit,
                int64_t max_rows, size_t row_len, void* row_gradients);
  GradientInbox(const GradientInbox&) = delete;
  GradientInbox& operator=(const GradientInbox&) = delete;

  bool in_ring(size_t u) const { return in_ring_[u]; }
  // Where unit u's gradient lands outside the ring; `staging` is its weight staging (HostShadow).
  void* own(size_t u, void* staging) const;
  // Where unit u's gradient for the current step is to be copied. For a ring buffer, a wait until
  // the buffer's previous gradient has been read is issued to `stream` first, so the copy must
  // follow on that stream. Called from the thread that issues the copies.
  GradientBuffer reserve(size_t u, void* staging, StreamKind stream);
  // The ring gradient with this ticket (and every one before it) has been read by its update.
  void consumed(int64_t ticket);
  // No gradient will be consumed any more (the updater stopped or failed): waits end at once.
  void abandon();

  void* row_gradients() const { return row_gradients_; }
  size_t row_gradient_bytes() const { return row_gradient_bytes_; }

 private:
  Device& device_;
  std::vector<bool> in_ring_;            // per unit
  std::vector<PinnedBuffer> dedicated_;  // per unit: its own buffer, where the policy gives one
  std::vector<PinnedBuffer> ring_;
  PinnedBuffer own_row_gradients_;
  void* row_gradients_ = nullptr;
  size_t row_gradient_bytes_ = 0;
  size_t sparse_unit_;
  int64_t ring_reserved_ = 0;  // tickets handed out (issuing thread)

  std::mutex mutex_;
  std::condition_variable consumed_changed_;
  int64_t ring_consumed_ = 0;  // ring gradients read by their update, in ticket order
  bool abandoned_ = false;
};

}  // namespace ferry
