#include "engine/device_choice.h"

#include "core/error.h"
#include "device/sim_device.h"
#include "planner/profile.h"

namespace ferry {

namespace {

std::string auto_kind(const TrainConfig& config, DeviceUse use) {
  if (use == DeviceUse::PlanNominal) return "cuda";
  if (use == DeviceUse::Plan && !config.profile.empty())
    return load_profile(config.profile).weight_dtype == DType::F32 ? "sim" : "cuda";
  if (cuda_available()) return "cuda";
  return use == DeviceUse::Train ? "cpu" : "sim";
}

}  // namespace

DeviceChoice choose_device(const TrainConfig& config, DeviceUse use) {
  DeviceChoice c;
  c.kind = config.device == "auto" ? auto_kind(config, use) : config.device;
  FERRY_CHECK(c.kind == "cpu" || c.kind == "sim" || c.kind == "cuda", "device",
              "unknown device '{}'; use auto, cpu, sim or cuda", c.kind);
  FERRY_CHECK(
      c.kind != "cpu" || use == DeviceUse::Train, "device",
      "device: cpu trains the fp32 reference in host memory, without a plan or a device to measure; use "
      "device=cuda or device=sim");
  if (!config.gpu_memory.empty())
    c.gpu_memory = static_cast<size_t>(parse_byte_size(config.gpu_memory, "gpu_memory"));
  c.target.device = c.kind;
  c.target.weight_dtype = c.kind == "cuda" ? DType::BF16 : DType::F32;  // sim runs the fp32 reference ops
  c.target.gpu_adamw = c.kind == "cuda";
  c.target.device_memory_on_host = c.kind == "sim";
  return c;
}

std::unique_ptr<Device> make_chosen_device(const DeviceChoice& choice) {
  FERRY_ASSERT(choice.kind == "sim" || choice.kind == "cuda", "a device is made for sim or cuda only");
  if (choice.kind == "cuda") return make_cuda_device(0, choice.gpu_memory);
  SimDeviceOptions options;
  if (choice.gpu_memory > 0) options.memory_capacity = choice.gpu_memory;
  return make_sim_device(options);
}

}  // namespace ferry
