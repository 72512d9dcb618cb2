// The CPU side of a step: fp32 masters and AdamW state of every unit in host memory, and a worker
// thread that turns gradients arriving from the device into updated weights (DESIGN.md §2).
//
// For each unit the engine announces "its gradient for step s lands in grad_host when event e
// completes". The worker waits for the event, adds the unit's squared-norm partials, and then
//  * UpdateSchedule::DuringBackward: updates the unit at once (no clipping);
//  * UpdateSchedule::AfterBackward: once every unit has landed, computes the global norm and the
//    clip coefficient, then updates the units embedding first, layer 0 next, ... so the next
//    step's forward can start on the first units while the last ones are still being updated.
// Each update writes the fp32 master, m and v, and the weights in the device's dtype into the
// pinned `shadow` the next upload reads. The engine waits for a unit's update before uploading it.
//
// The math is exactly UnitOptimizer's (the plain trainer's): the same AdamW per parameter, the same
// global norm (gradient partials are concatenated in unit order), the same clip coefficient.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "device/device.h"
#include "model/unit_layout.h"
#include "optim/adamw.h"
#include "optim/cpu_adamw.h"
#include "planner/plan.h"

namespace ferry {

struct HostUnitState {
  std::vector<float> master, m, v;  // fp32, laid out as the unit
  PinnedBuffer grad;                // gradient from the device, in the plan's grad dtype
  PinnedBuffer shadow;              // weights to upload, in the plan's weight dtype
};

class UnitUpdater {
 public:
  UnitUpdater(Device& device, const ModelLayout& layout, const Plan& plan, bool decay_all);
  ~UnitUpdater();
  UnitUpdater(const UnitUpdater&) = delete;
  UnitUpdater& operator=(const UnitUpdater&) = delete;

  HostUnitState& unit(size_t u) { return units_[u]; }
  // The unit's parameters as AdamW segments (offset, count, weight decay or not).
  const std::vector<AdamWSegment>& segments(size_t u) const { return segments_[u]; }
  size_t unit_count() const { return units_.size(); }

  // Writes every unit's shadow from its master (after loading or resuming) and marks the state
  // as updated through step `step`.
  void refresh_shadows(int64_t step);

  // Step `step` (1-based) is about to be issued with these hyperparameters.
  void begin_step(int64_t step, const AdamWHyper& hyper, double max_grad_norm);
  // The gradient of unit u for the current step lands in unit(u).grad when `event` completes.
  void gradient_landed(size_t u, EventId event);

  // Blocks until unit u holds the update of step `step` (step 0: the initial weights).
  void wait_updated(size_t u, int64_t step);
  // Blocks until every unit holds the update of step `step`.
  void wait_all_updated(int64_t step);
  // The global gradient norm of step `step` (before clipping); blocks until known.
  double grad_norm(int64_t step);

 private:
  // Everything the worker needs travels with the landing: begin_step() of the next step may run
  // while this step's updates are still going.
  struct Landing {
    size_t unit;
    int64_t step;
    EventId event;
    AdamWHyper hyper;
    double max_grad_norm;
  };
  void run();
  void update_unit(size_t u, int64_t step, const AdamWHyper& hyper, float clip);
  void refresh_shadow(size_t u);
  void rethrow_if_failed();

  Device& device_;
  ModelLayout layout_;
  Plan plan_;
  std::vector<HostUnitState> units_;
  std::vector<std::vector<AdamWSegment>> segments_;  // per unit: its parameters and their decay
  std::vector<float> grad_f32_;  // conversion scratch when gradients arrive in bf16

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Landing> queue_;
  std::vector<int64_t> updated_step_;  // per unit: the last step whose update it holds
  int64_t current_step_ = 0;
  AdamWHyper hyper_;
  double max_grad_norm_ = 0.0;
  std::vector<std::vector<double>> partials_;  // per unit, the current step's norm partials
  size_t landed_ = 0;
  int64_t norm_step_ = 0;
  double norm_ = 0.0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace ferry
