#include "generate/generation_model.h"

#include "core/byte_size.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/log.h"
#include "ops/cuda_ops_sizes.h"
#include "ops/device_ops.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "generate";
// Beside the weights, the cache and the buffers: CUDA's context and the ops' lazily sized scratch.
constexpr size_t kGpuHeadroom = size_t{512} << 20;

}  // namespace

GenerationBackend parse_generation_backend(const std::string& name) {
  if (name == "auto") return GenerationBackend::Auto;
  if (name == "cpu") return GenerationBackend::Cpu;
  if (name == "cuda" || name == "gpu") return GenerationBackend::Cuda;
  fail(kWhere, "unknown device '{}'; give auto, cpu or cuda", name);
}

GenerationModel open_generation_model(const std::filesystem::path& model_dir, GenerationBackend backend,
                                      int64_t context) {
  std::error_code ec;
  FERRY_CHECK(
      std::filesystem::is_regular_file(model_dir / "config.json", ec), kWhere,
      "{} is not a model directory (it has no config.json); give a Hugging Face model directory, such "
      "as a download or a ferry run's output",
      model_dir.string());
  const ModelConfig config = load_model_config(model_dir);
  const int64_t max_context = config.max_position_embeddings;
  if (context == 0) context = std::min(max_context, kDefaultContext);
  FERRY_CHECK(context > 0 && context <= max_context, kWhere,
              "--context {} is beyond what the model takes: 1 to {} tokens (max_position_embeddings)",
              context, max_context);
  if (config.sliding_window && context > *config.sliding_window) {
    // Past the window the model's attention is banded, which the cached attention does not do.
    FERRY_CHECK(
        false, kWhere,
        "the model attends within a sliding window of {} tokens, which generation does not implement; "
        "give --context {} or less",
        *config.sliding_window, *config.sliding_window);
  }

  GenerationModel g;
  g.defaults = load_generation_defaults(model_dir, config);
  const ModelLayout layout = build_model_layout(config);
  const bool want_gpu =
      backend == GenerationBackend::Cuda || (backend == GenerationBackend::Auto && cuda_available());
  const DType dtype = want_gpu ? DType::BF16 : DType::F32;
  const size_t weights = resident_weight_bytes(layout, dtype);
  const size_t working = CachedDecoder::device_bytes(config, dtype, context);
  if (want_gpu) {
    g.device = make_cuda_device(0, 0);
    const size_t free_bytes = g.device->memory().capacity;
    const size_t needed = weights + working + kCudaGemmWorkspaceBytes + kGpuHeadroom;
    FERRY_CHECK(
        needed <= free_bytes, kWhere,
        "{} does not fit GPU 0 for generation: its bf16 weights take {}, a KV cache and buffers for {} "
        "tokens {} more, and the GPU has {} free; give a smaller --context, free the GPU, or use "
        "--device cpu",
        model_dir.string(), format_bytes(weights), context, format_bytes(working), format_bytes(free_bytes));
    g.on_gpu = true;
  } else {
    const size_t needed = weights + working;
    const HostMemoryAvailable host = host_memory_available(0);
    FERRY_CHECK(
        needed <= host.bytes, kWhere,
        "{} does not fit host memory for generation on the CPU: its fp32 weights take {}, a KV cache and "
        "buffers for {} tokens {} more, and {} allows {}; give a smaller --context or use a GPU",
        model_dir.string(), format_bytes(weights), context, format_bytes(working), host.source,
        format_bytes(host.bytes));
    SimDeviceOptions options;
    options.memory_capacity = needed + (size_t{64} << 20);
    options.require_pinned_host = false;
    g.device = make_sim_device(options);
  }
  g.ops = make_device_ops(*g.device);
  log_info("generate: loading {} ({} of {} weights) onto {}", model_dir.string(), format_bytes(weights),
           dtype_name(dtype), g.on_gpu ? g.device->name() : std::string("the CPU"));
  g.model = std::make_unique<ResidentModel>(ResidentModel::load(*g.device, model_dir, dtype));
  g.decoder = std::make_unique<CachedDecoder>(*g.model, *g.device, *g.ops, context);
  return g;
}

}  // namespace ferry
