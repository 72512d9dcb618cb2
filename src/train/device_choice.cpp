#include "train/device_choice.h"

#include "core/error.h"
#include "device/sim_device.h"
#include "planner/profile.h"

namespace ferry {

namespace {

DeviceKind auto_kind(const TrainConfig& config, DeviceUse use) {
  if (use == DeviceUse::PlanNominal) return DeviceKind::Cuda;
  if (use == DeviceUse::Plan && !config.profile.empty())
    return load_profile(config.profile).weight_dtype == DType::F32 ? DeviceKind::Sim : DeviceKind::Cuda;
  if (cuda_available()) return DeviceKind::Cuda;
  return use == DeviceUse::Train ? DeviceKind::Cpu : DeviceKind::Sim;
}

}  // namespace

DeviceChoice choose_device(const TrainConfig& config, DeviceUse use) {
  DeviceChoice c;
  c.kind = config.device == DeviceKind::Auto ? auto_kind(config, use) : config.device;
  FERRY_CHECK(
      c.kind != DeviceKind::Cpu || use == DeviceUse::Train, "device",
      "device: cpu trains the fp32 reference in host memory, without a plan or a device to measure; use "
      "device=cuda or device=sim");
  c.gpu_memory = static_cast<size_t>(config.gpu_memory.value_or(0));
  c.target.device = device_kind_name(c.kind);
  // sim runs the fp32 reference ops
  c.target.weight_dtype = c.kind == DeviceKind::Cuda ? DType::BF16 : DType::F32;
  c.target.gpu_adamw = c.kind == DeviceKind::Cuda;
  c.target.device_memory_on_host = c.kind == DeviceKind::Sim;
  c.devices = static_cast<int>(config.gpus);
  if (config.gpus == 0) {  // auto
    FERRY_CHECK(
        c.kind == DeviceKind::Cuda && use != DeviceUse::PlanNominal && config.profile.empty(), "gpus",
        "gpus: auto counts the GPUs this machine has; give a number for device: {}{}", c.target.device,
        use == DeviceUse::PlanNominal || !config.profile.empty() ? " or a machine known by its profile" : "");
    c.devices = cuda_device_count();
    FERRY_CHECK(c.devices > 0, "gpus", "gpus: auto found no GPU; check CUDA_VISIBLE_DEVICES and the driver");
  }
  FERRY_CHECK(
      c.devices == 1 || c.kind != DeviceKind::Cpu, "gpus",
      "gpus: {} trains on several devices; device: cpu is the one-process reference (use device: sim or "
      "cuda)",
      c.devices);
  FERRY_CHECK(c.devices == 1 || use != DeviceUse::Profile, "gpus",
              "ferry profile measures one device; run it with gpus=1 (every device of a host is alike)");
  c.target.devices = c.devices;
  return c;
}

std::unique_ptr<Device> make_chosen_device(const DeviceChoice& choice) {
  FERRY_ASSERT(choice.kind == DeviceKind::Sim || choice.kind == DeviceKind::Cuda,
               "a device is made for sim or cuda only");
  if (choice.kind == DeviceKind::Cuda) return make_cuda_device(0, choice.gpu_memory);
  SimDeviceOptions options;
  if (choice.gpu_memory > 0) options.memory_capacity = choice.gpu_memory;
  return make_sim_device(options);
}

std::vector<std::unique_ptr<Device>> make_chosen_devices(const DeviceChoice& choice) {
  FERRY_ASSERT(choice.kind == DeviceKind::Sim || choice.kind == DeviceKind::Cuda,
               "devices are made for sim or cuda only");
  std::vector<std::unique_ptr<Device>> devices;
  if (choice.kind == DeviceKind::Cuda) {
    const int visible = cuda_device_count();
    FERRY_CHECK(choice.devices <= visible, "gpus",
                "gpus: {} asks for more GPUs than this process sees ({}); lower gpus or check "
                "CUDA_VISIBLE_DEVICES",
                choice.devices, visible);
    for (int r = 0; r < choice.devices; ++r) devices.push_back(make_cuda_device(r, choice.gpu_memory));
    return devices;
  }
  SimDeviceOptions options;
  if (choice.gpu_memory > 0) options.memory_capacity = choice.gpu_memory;
  return make_sim_devices(choice.devices, options);
}

}  // namespace ferry
