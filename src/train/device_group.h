// The devices of a run of `gpus: N` and the collectives that join them: N simulated devices over
// thread collectives, or N GPUs over NCCL; one communicator per stream (engine/device_share.h).
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "device/collective.h"
#include "device/device.h"
#include "device/thread_collective.h"
#include "train/device_choice.h"

namespace ferry {

struct DeviceGroup {
  std::vector<std::unique_ptr<Device>> devices;
  std::array<std::unique_ptr<ThreadCommunicator>, kCollectiveStreamCount> thread_comms;  // sim only
  // Per rank, one handle per stream (StreamKind order); destroyed before the devices.
  std::vector<std::array<std::unique_ptr<Collective>, kCollectiveStreamCount>> collectives;

  DeviceGroup() = default;
  DeviceGroup(DeviceGroup&&) = default;
  DeviceGroup& operator=(DeviceGroup&&) = default;
  ~DeviceGroup();

  std::vector<Device*> device_pointers() const;
  std::vector<std::array<Collective*, kCollectiveStreamCount>> collective_pointers() const;
};

// Joins `devices` (made by make_chosen_devices(choice)) with collectives of the choice's kind;
// one device gets none (the plain engine issues no collectives).
// Throws ferry::Error where NCCL cannot be opened, saying why.
DeviceGroup join_devices(const DeviceChoice& choice, std::vector<std::unique_ptr<Device>> devices);

}  // namespace ferry
