#include "train/device_group.h"

#include "core/error.h"
#include "device/nccl_collective.h"

namespace ferry {

DeviceGroup::~DeviceGroup() {
  collectives.clear();  // before the communicators and the devices they issue to
  for (auto& c : thread_comms) c.reset();
}

std::vector<Device*> DeviceGroup::device_pointers() const {
  std::vector<Device*> out;
  for (const auto& d : devices) out.push_back(d.get());
  return out;
}

std::vector<std::array<Collective*, kCollectiveStreamCount>> DeviceGroup::collective_pointers() const {
  std::vector<std::array<Collective*, kCollectiveStreamCount>> out;
  for (const auto& rank : collectives) {
    std::array<Collective*, kCollectiveStreamCount> handles{};
    for (size_t s = 0; s < handles.size(); ++s) handles[s] = rank[s].get();
    out.push_back(handles);
  }
  return out;
}

DeviceGroup join_devices(const DeviceChoice& choice, std::vector<std::unique_ptr<Device>> devices) {
  DeviceGroup g;
  g.devices = std::move(devices);
  const size_t n = g.devices.size();
  g.collectives.resize(n);
  // One device runs the plain engine, which issues no collectives. On CUDA a communicator costs
  // ~350 MiB of host memory (NCCL's buffers, three communicators): made for a run of one GPU, it
  // raised the flagship's host use beside the engine from 129 to 478 MiB.
  if (n == 1) return g;
  if (choice.kind == DeviceKind::Sim) {
    for (size_t s = 0; s < kCollectiveStreamCount; ++s) {
      g.thread_comms[s] = std::make_unique<ThreadCommunicator>(static_cast<int>(n));
      for (size_t r = 0; r < n; ++r)
        g.collectives[r][s] = g.thread_comms[s]->join(static_cast<int>(r), *g.devices[r]);
    }
    return g;
  }
  const std::string why = nccl_unavailable_reason();
  FERRY_CHECK(why.empty(), "gpus", "gpus: {} needs NCCL between the GPUs: {}", n, why);
  for (size_t s = 0; s < kCollectiveStreamCount; ++s) {
    std::vector<std::unique_ptr<Collective>> comm = nccl_collectives(g.device_pointers());
    for (size_t r = 0; r < n; ++r) g.collectives[r][s] = std::move(comm[r]);
  }
  return g;
}

}  // namespace ferry
