// The sliding engine over several devices of one process with one host state (docs/several_gpus.md):
// one SlidingEngine per device, each running its share of every step's micro-chunks through its
// own slots and buffers, joined by collectives (engine/device_share.h). Rank 0's engine holds the
// fp32 masters and AdamW state (the UnitUpdater and its threads, once for the host); the others
// upload from and send into its pinned buffers.
//
// The split: a step's C micro-chunks go to the devices in order, C / N each (rank r the chunks
// [r C / N, (r + 1) C / N)); a step whose chunks do not divide by N is refused, naming the
// global_batch that would. The gradient is the devices' partial sums added in rank order in fp32,
// so it differs from one device's (every micro-chunk added onto one buffer in order) only in where
// the partial sums are added; with the CPU backends' collectives the result is deterministic.
//
// Each rank's calls come from a thread of its own (NCCL's rule, and the ranks meet inside their
// streams' collectives): rank 0 on the caller's thread, the others on threads started per step.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "device/collective.h"
#include "device/device.h"
#include "engine/sliding_engine.h"

namespace ferry {

class DeviceGroupEngine {
 public:
  // devices[r], ops[r] and collectives[r] (one handle per stream, StreamKind order) are rank r's;
  // `max_chunks` micro-chunks a step at most, over the whole group.
  DeviceGroupEngine(const ModelConfig& config, const ModelLayout& layout, const std::vector<Device*>& devices,
                    const std::vector<Ops*>& ops,
                    const std::vector<std::array<Collective*, kCollectiveStreamCount>>& collectives,
                    const Plan& plan, int64_t chunk_tokens, int64_t max_chunks, bool decay_all);
  ~DeviceGroupEngine();
  DeviceGroupEngine(const DeviceGroupEngine&) = delete;
  DeviceGroupEngine& operator=(const DeviceGroupEngine&) = delete;

  int size() const { return static_cast<int>(engines_.size()); }
  // The group's host state (SlidingEngine::host): after changing it, weights_changed(step).
  UnitUpdater& host() { return engines_.front()->host(); }
  void weights_changed(int64_t step);
  // Runs step `step` over the devices, each its share of `batch`; the group's loss and norm.
  SlidingStepResult step(int64_t step, const StepBatch& batch, const AdamWHyper& hyper, double max_grad_norm);
  void finish_updates();
  // Forward only, on rank 0 alone (no collectives), in pieces of its share's micro-chunks: the
  // summed loss of `batch`, the pieces' fp32 sums added in double.
  StepLoss evaluate(const StepBatch& batch);

 private:
  std::vector<Device*> devices_;
  int64_t max_chunks_;  // the group's
  int64_t vocab_;
  // Rank order; rank 0 first, destroyed last (the others use its host state).
  std::vector<std::unique_ptr<SlidingEngine>> engines_;
};

// The micro-chunks of a step each of `devices` devices runs; refuses a count that does not divide.
int64_t chunks_per_device(int64_t chunks, int devices);

}  // namespace ferry
