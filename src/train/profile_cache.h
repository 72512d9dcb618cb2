// Where a run's machine profile comes from (DESIGN.md §3: profile → cost model → search):
//
//   1. `profile: FILE` in the config: a profile saved by `ferry profile` on another machine (the
//      lent H200's are in bench/profiles/), to plan for that machine.
//   2. the cache, <cache dir>/<device>-<shape key>.json: measured on this machine before.
//   3. a measurement now (seconds), saved to the cache atomically.
//
// A profile file describes a machine for one model shape. Planning a different model with it would
// predict its step time from another network's compute times, so a file measured for another shape
// is refused; one measured only at another seq_len is used with a warning (the GEMMs' cost per
// token does not depend on the sequence length; attention's grows with it, so the prediction is
// approximate).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "device/device.h"
#include "model/model_config.h"
#include "ops/ops.h"
#include "planner/profile.h"
#include "profiler/machine_profiler.h"
#include "train/train_config.h"

namespace ferry {

enum class ProfileOrigin { File, Cache, Measured };

// $FERRY_CACHE_DIR/<what>, else ${XDG_CACHE_HOME:-$HOME/.cache}/ferry/<what>; empty when none of
// these variables is set (nothing is cached then).
std::filesystem::path default_cache_dir(const std::string& what);
// `name` as part of a cache file's name: lower case, letters, digits and '.' kept, every other run
// of characters one '-' ("NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"); "device" if nothing is left.
std::string cache_file_name_part(const std::string& name);
// default_cache_dir("profiles").
std::filesystem::path default_profile_cache_dir();

// <dir>/<device name in lower case, [a-z0-9.] kept, other runs as '-'>-<shape key>.json
std::filesystem::path profile_cache_path(const std::filesystem::path& dir, const std::string& device_name,
                                         const std::string& shape_key);

// Refuses (ferry::Error) a profile measured for another model shape; warns when only the sequence
// length differs. The model shape is compared in the profile's own weight dtype: the machine it
// describes runs its own.
void check_profile_matches_model(const MachineProfile& profile, const ModelConfig& model, int64_t seq_len,
                                 const std::string& source);

// The profile file `config.profile` (another machine's, or this one's saved), checked against the
// model as above; warns when an older ferry measured it (MachineProfile::method).
MachineProfile load_profile_file(const TrainConfig& config, const ModelConfig& model);

struct ObtainProfileOptions {
  // How to measure when nothing usable is cached; unset: default_profile_options(device).
  std::optional<ProfileOptions> measure;
  std::filesystem::path cache_dir = default_profile_cache_dir();  // empty: no cache
};

// The profile for a run of `model` with `config` (its seq_len, `profile`, `threads`) on `device`,
// from the three sources above in that order. A measurement times the GEMM algorithms kept for
// `ops` (train/gemm_choice_cache.h) and keeps those it chooses. A cached file that cannot be read, is
// corrupt, or was measured with another CPU thread count is reported and measured again, never fatal; a cache
// that cannot be written is reported. `origin`, when given, receives where the profile came from.
MachineProfile obtain_profile(const TrainConfig& config, const ModelConfig& model, Device& device, Ops& ops,
                              const ObtainProfileOptions& options = {}, ProfileOrigin* origin = nullptr);

// Which directions of attention a run's ops (`ops`, or others of the same kernels) on `device` run
// on ferry's own kernels by `profile`: those it found faster with them (ComputeProfile::
// own_attention_forward, own_attention_backward) on this device, with these kernels. A profile of
// another machine says nothing of this one's; without a library's attention there is nothing to
// choose.
struct AttentionChoice {
  bool own_forward = false, own_backward = false;
  bool any() const { return own_forward || own_backward; }
  // "both directions", "the forward" or "the backward": those on ferry's own kernels (any()).
  const char* own_directions() const {
    return own_forward && own_backward ? "both directions" : own_forward ? "the forward" : "the backward";
  }
};
AttentionChoice attention_choice(const MachineProfile& profile, const Device& device, const Ops& ops);

}  // namespace ferry
