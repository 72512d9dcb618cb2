#include "engine/device_group_engine.h"

#include <algorithm>
#include <exception>
#include <thread>

#include "core/error.h"

namespace ferry {

int64_t chunks_per_device(int64_t chunks, int devices) {
  FERRY_CHECK(devices >= 1, "gpus", "gpus: {}: give 1 or more devices", devices);
  FERRY_CHECK(chunks % devices == 0, "gpus",
              "a step of {} micro-chunks cannot be split evenly over {} devices: make global_batch a "
              "multiple of micro_batch x gpus ({} x micro_batch or {} x micro_batch sequences)",
              chunks, devices, (chunks / devices) * devices, (chunks / devices + 1) * devices);
  return chunks / devices;
}

DeviceGroupEngine::DeviceGroupEngine(
    const ModelConfig& config, const ModelLayout& layout, const std::vector<Device*>& devices,
    const std::vector<Ops*>& ops,
    const std::vector<std::array<Collective*, kCollectiveStreamCount>>& collectives, const Plan& plan,
    int64_t chunk_tokens, int64_t max_chunks, bool decay_all)
    : devices_(devices), max_chunks_(max_chunks), vocab_(config.vocab_size) {
  const int n = static_cast<int>(devices.size());
  FERRY_CHECK(n >= 1 && ops.size() == devices.size() && collectives.size() == devices.size(), "engine",
              "a group of devices needs one device, one ops and one set of collectives per rank");
  const int64_t share_chunks = chunks_per_device(max_chunks, n);
  for (int r = 0; r < n; ++r) {
    DeviceShare share;
    share.rank = r;
    share.size = n;
    share.collectives = collectives[static_cast<size_t>(r)];
    share.host = r == 0 ? nullptr : &engines_.front()->host();
    share.group_max_chunks = max_chunks;
    devices[static_cast<size_t>(r)]->bind_thread();
    engines_.push_back(std::make_unique<SlidingEngine>(config, layout, *devices[static_cast<size_t>(r)],
                                                       *ops[static_cast<size_t>(r)], plan, chunk_tokens,
                                                       share_chunks, decay_all, &share));
  }
}

DeviceGroupEngine::~DeviceGroupEngine() {
  while (!engines_.empty()) engines_.pop_back();  // rank 0, which holds the host state, last
}

void DeviceGroupEngine::weights_changed(int64_t step) {
  for (size_t r = 0; r < engines_.size(); ++r) {  // rank 0 first: it refreshes the staging
    devices_[r]->bind_thread();
    engines_[r]->weights_changed(step);
  }
}

void DeviceGroupEngine::finish_updates() {
  for (size_t r = 0; r < engines_.size(); ++r) {
    devices_[r]->bind_thread();
    engines_[r]->finish_updates();
  }
}

SlidingStepResult DeviceGroupEngine::step(int64_t step, const StepBatch& batch, const AdamWHyper& hyper,
                                          double max_grad_norm) {
  const int n = size();
  const int64_t each = chunks_per_device(batch.chunks(), n);
  FERRY_CHECK(batch.chunks() <= max_chunks_, "engine", "a step of {} micro-chunks, planned for {} at most",
              batch.chunks(), max_chunks_);
  GroupStep group;
  group.counted_tokens = batch.counted_tokens();
  group.rows = distinct_ids(std::span<const int32_t>(batch.ids.data(), batch.ids.size()), vocab_);
  std::vector<StepBatch> shares;
  for (int r = 0; r < n; ++r) shares.push_back(chunk_slice(batch, r * each, each));

  std::vector<SlidingStepResult> results(static_cast<size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  auto run = [&](int r) {
    try {
      devices_[static_cast<size_t>(r)]->bind_thread();
      results[static_cast<size_t>(r)] = engines_[static_cast<size_t>(r)]->step(
          step, shares[static_cast<size_t>(r)], group, hyper, max_grad_norm);
    } catch (...) {
      errors[static_cast<size_t>(r)] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < n; ++r) threads.emplace_back(run, r);
  run(0);
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return results.front();
}

StepLoss DeviceGroupEngine::evaluate(const StepBatch& batch) {
  const int64_t piece = max_chunks_ / size();
  devices_.front()->bind_thread();
  StepLoss total;
  for (int64_t first = 0; first < batch.chunks(); first += piece) {
    const StepLoss part =
        engines_.front()->evaluate(chunk_slice(batch, first, std::min(piece, batch.chunks() - first)));
    total.loss_sum += part.loss_sum;
    total.counted_tokens += part.counted_tokens;
  }
  return total;
}

}  // namespace ferry
