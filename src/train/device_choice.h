// The device a config runs on, resolved once for `ferry train`, `ferry plan` and `ferry profile`,
// so that what `plan` prints is what `train` runs on the same machine by construction.
//
// `device: auto` is cuda where a GPU answers, else sim -- except when planning for a machine other
// than this one: `--nominal` plans the lent H200 its rates describe (cuda), and `profile: FILE`
// plans the device the profile was measured on (fp32 weights: sim, else cuda).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "device/device.h"
#include "train/plan_selection.h"
#include "train/train_config.h"

namespace ferry {

// What the device is asked for.
enum class DeviceUse {
  Train,        // train on it (cpu allowed: the plain reference trainer)
  Plan,         // plan for it with this machine's profile, or `profile: FILE`'s
  PlanNominal,  // plan for it with the nominal H200 rates (--nominal)
  Profile,      // measure it
};

struct DeviceChoice {
  DeviceKind kind = DeviceKind::Cpu;  // never Auto
  size_t gpu_memory = 0;              // the config's gpu_memory in bytes; 0: the device's own memory
  int devices = 1;                    // the config's gpus, `auto` resolved (target.devices too)
  // The plan's target on it (device budget left 0: the device's memory when made, else gpu_memory).
  PlanTarget target;
};

// Throws ferry::Error for a device the use cannot take (cpu for plan or profile).
DeviceChoice choose_device(const TrainConfig& config, DeviceUse use);

// The device of `choice` (sim or cuda), capped at gpu_memory when given.
std::unique_ptr<Device> make_chosen_device(const DeviceChoice& choice);
// The choice's `devices` devices (indices 0..devices-1), each capped at gpu_memory; simulated
// ones share their pinned memory (make_sim_devices).
std::vector<std::unique_ptr<Device>> make_chosen_devices(const DeviceChoice& choice);

}  // namespace ferry
