// A model opened for generation on the CPU or a GPU: the device, its ops, the resident weights, the
// cached decoder and what generation_config.json says. The CPU backend runs the fp32 reference ops
// on a simulated device (host memory, the ops queued on a worker thread: the same code path as the
// GPU's); a GPU holds the whole model in bf16.
#pragma once

#include <filesystem>
#include <memory>

#include "device/device.h"
#include "generate/cached_decoder.h"
#include "generate/generation_config.h"
#include "generate/resident_model.h"
#include "ops/ops.h"

namespace ferry {

enum class GenerationBackend { Auto, Cpu, Cuda };
// "auto", "cpu", "cuda"; errors list them.
GenerationBackend parse_generation_backend(const std::string& name);

struct GenerationModel {
  std::unique_ptr<Device> device;
  std::unique_ptr<Ops> ops;
  std::unique_ptr<ResidentModel> model;
  std::unique_ptr<CachedDecoder> decoder;
  GenerationDefaults defaults;
  bool on_gpu = false;
};

// Opens DIR for `context` tokens of conversation (0: max_position_embeddings, at most
// kDefaultContext). Errors before anything large is allocated: no model there, a context past the
// model's, a model (with its cache) that does not fit the GPU's free memory or the host's.
GenerationModel open_generation_model(const std::filesystem::path& model_dir, GenerationBackend backend,
                                      int64_t context);

// The context when none is given: enough for long conversations, a modest cache for an 8B model
// (1 GiB in bf16 for Llama-3.1-8B).
inline constexpr int64_t kDefaultContext = 8192;

}  // namespace ferry
