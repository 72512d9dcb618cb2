// measure_compute (profiler/machine_profiler.h): the compute stream's times for one model shape.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

#include "core/error.h"
#include "core/log.h"
#include "device/memory_ledger.h"
#include "model/decoder_layer.h"
#include "model/lm_head.h"
#include "model/unit_params.h"
#include "ops/cuda_ops_sizes.h"
#include "optim/clip.h"
#include "optim/device_adamw.h"
#include "planner/head_groups.h"
#include "planner/memory_model.h"
#include "planner/sequence_tile.h"
#include "profiler/machine_profiler.h"
#include "profiler/random_device_fill.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "profile";

size_t round_up(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

size_t free_device_bytes(Device& device) {
  const MemoryStats m = device.memory();
  return m.capacity - std::min(m.capacity, m.in_use);
}

// The sizes of one measurement: the model's units and micro-chunks of whole sequences.
struct Shape {
  const ModelConfig& config;
  ModelLayout layout;
  int64_t seq_len;
  DType wd, gd;  // weights/activations, gradients

  size_t unit_bytes(size_t unit, DType dtype) const {
    return round_up(static_cast<size_t>(layout.units[unit].numel) * dtype_size(dtype));
  }
  size_t activation_bytes(int64_t tokens) const {
    return round_up(static_cast<size_t>(tokens * config.hidden_size) * dtype_size(wd));
  }
  static size_t token_bytes(int64_t tokens) {
    return round_up(4 * static_cast<size_t>(tokens) * sizeof(int32_t));
  }
  // One layer's weights, gradients, scratch (its token-local tensors in tiles of `tile` tokens; 0:
  // untiled; attention in `head_groups` groups of KV heads), four activations (x_in, x_out, dx_out,
  // dx_in), tokens.
  size_t layer_phase_bytes(int64_t tokens, int64_t tile = 0, int64_t head_groups = 1) const {
    Arena measure = Arena::measuring();
    carve_layer_scratch(measure, config, tokens, wd, true, tile, head_groups);
    const size_t u = layout.layer_unit(0);
    return unit_bytes(u, wd) + unit_bytes(u, gd) + measure.used() + Arena::kAlignment +
           4 * activation_bytes(tokens) + token_bytes(tokens) + 1024;
  }
  // The embedding and the head (weights, gradients), the head's scratch, three activations, tokens.
  size_t ends_phase_bytes(int64_t tokens) const {
    Arena measure = Arena::measuring();
    carve_head_scratch(measure, config, tokens, wd);
    const size_t e = layout.embedding_unit(), h = layout.head_unit();
    return unit_bytes(e, wd) + unit_bytes(e, gd) + unit_bytes(h, wd) + unit_bytes(h, gd) + measure.used() +
           Arena::kAlignment + 3 * activation_bytes(tokens) + token_bytes(tokens) + 256;
  }
};

// The token arrays of micro-chunks of up to `capacity` tokens: sequences of seq_len tokens, each one
// document (full causal attention, the most a sequence costs), random ids and targets.
class ChunkTokens {
 public:
  ChunkTokens(Device& device, RandomDeviceFill& fill, const Shape& shape, int64_t capacity)
      : capacity_(capacity),
        seq_len_(shape.seq_len),
        buffer_(device, Shape::token_bytes(capacity), "profile tokens") {
    const size_t n = static_cast<size_t>(capacity);
    const int32_t vocab = static_cast<int32_t>(shape.config.vocab_size);
    fill.indices(ids(), n, vocab);
    fill.indices(ids() + n, n, vocab);
    PinnedBuffer host(device, 2 * n * sizeof(int32_t), "profile token staging");
    int32_t* positions = host.as<int32_t>();
    int32_t* doc_start = positions + n;
    for (size_t t = 0; t < n; ++t) {
      positions[t] = static_cast<int32_t>(static_cast<int64_t>(t) % shape.seq_len);
      doc_start[t] = static_cast<int32_t>(static_cast<int64_t>(t) - positions[t]);
    }
    device.copy_to_device(ids() + 2 * n, host.data(), 2 * n * sizeof(int32_t), StreamKind::HostToDevice);
    device.synchronize(device.record(StreamKind::HostToDevice));
  }

  TokenChunk chunk(int64_t tokens) const {
    FERRY_ASSERT(tokens <= capacity_);
    const size_t n = static_cast<size_t>(capacity_);
    TokenChunk c;
    c.tokens = tokens;
    c.ids = ids();
    c.targets = ids() + n;
    c.positions = ids() + 2 * n;
    c.doc_start = ids() + 3 * n;
    // Whole sequences of one document each: the attention the training step runs on such rows.
    c.row_tokens = tokens % seq_len_ == 0 ? seq_len_ : 0;
    return c;
  }

 private:
  int32_t* ids() const { return buffer_.as<int32_t>(); }
  int64_t capacity_;
  int64_t seq_len_;
  DeviceBuffer buffer_;
};

Tensor rows(const DeviceBuffer& buffer, DType dtype, int64_t tokens, int64_t hidden) {
  return Tensor(buffer.data(), dtype, {tokens, hidden});
}

struct LayerTimes {
  LinearTime forward, backward, backward_kept, backward_kept_all;
};

// The layer's times at each of `tokens`; with `tile` > 0 its token-local tensors run in tiles of
// that many tokens (as a plan with seq_tile runs them), and with `head_groups` > 1 its attention
// in groups of KV heads (as a plan with head_groups runs it); each time is taken back to the
// untiled layer's of one group by the planner's charges for tiles (planner/sequence_tile.h) and
// groups (planner/head_groups.h), which add them again for what a plan chooses.
LayerTimes time_layer(Device& device, Ops& ops, const Shape& s, const std::vector<int64_t>& tokens,
                      int64_t tile, int64_t head_groups, RandomDeviceFill& fill,
                      const TimingOptions& timing) {
  const int64_t most = tokens.back(), H = s.config.hidden_size;
  const UnitLayout& unit = s.layout.units[s.layout.layer_unit(0)];
  DeviceBuffer params(device, s.unit_bytes(s.layout.layer_unit(0), s.wd), "profile layer weights");
  DeviceBuffer grads(device, s.unit_bytes(s.layout.layer_unit(0), s.gd), "profile layer gradients");
  fill.unit(params.data(), s.wd, unit, static_cast<float>(s.config.initializer_range));
  device.fill_zero(grads.data(), grads.bytes(), StreamKind::Compute);
  Arena measure = Arena::measuring();
  carve_layer_scratch(measure, s.config, most, s.wd, true, tile, head_groups);
  DeviceBuffer scratch(device, measure.used() + Arena::kAlignment, "profile layer scratch");
  DeviceBuffer x_in(device, s.activation_bytes(most), "profile layer input");
  DeviceBuffer x_out(device, s.activation_bytes(most), "profile layer output");
  DeviceBuffer dx_out(device, s.activation_bytes(most), "profile output gradient");
  // The engine passes one buffer as both dx_out and dx_in (in place); a separate dx_in keeps every
  // repeat's input the same, at the same cost.
  DeviceBuffer dx_in(device, s.activation_bytes(most), "profile input gradient");
  fill.values(x_in.data(), s.wd, static_cast<size_t>(most * H), 1.0f);
  fill.values(dx_out.data(), s.wd, static_cast<size_t>(most * H), 1.0f);
  ChunkTokens chunk_tokens(device, fill, s, most);

  const std::vector<float> inv_freq = rope_inv_freq(s.config);
  DeviceBuffer inv_freq_device(device, round_up(inv_freq.size() * sizeof(float)), "profile rope frequencies");
  {
    PinnedBuffer host(device, inv_freq.size() * sizeof(float), "profile rope staging");
    std::memcpy(host.data(), inv_freq.data(), inv_freq.size() * sizeof(float));
    device.copy_to_device(inv_freq_device.data(), host.data(), host.bytes(), StreamKind::HostToDevice);
    device.synchronize(device.record(StreamKind::HostToDevice));
  }
  const LayerContext ctx{&s.config, inv_freq_device.as<float>()};
  const LayerParams p = layer_params(unit, params.data(), s.wd);
  const LayerParams g = layer_params(unit, grads.data(), s.gd);

  // The backward from kept internals reads what the forward left in the scratch (the full
  // backward recomputes the same values into it, so every repeat reads a forward's output), and so
  // does the one that recomputes nothing (the norms' outputs and the activation there too).
  std::vector<TimedTokens> forward, backward, backward_kept, backward_kept_all;
  for (const int64_t T : tokens) {
    Arena arena(scratch.data(), scratch.bytes());
    LayerScratch ls = carve_layer_scratch(arena, s.config, T, s.wd, true, tile, head_groups);
    const TokenChunk chunk = chunk_tokens.chunk(T);
    const Tensor in = rows(x_in, s.wd, T, H), out = rows(x_out, s.wd, T, H);
    const Tensor d_out = rows(dx_out, s.wd, T, H), d_in = rows(dx_in, s.wd, T, H);
    std::vector<std::function<void()>> runs = {
        [&] { layer_forward(ops, ctx, p, chunk, in, out, ls); },
        [&] { layer_backward(ops, ctx, p, g, chunk, in, d_out, d_in, ls); }};
    // Kept internals are whole chunks of every head (decoder_layer.h): a tiled or grouped layer has
    // no such backward.
    const bool plain = tile == 0 && head_groups == 1;
    if (plain) {
      runs.push_back(
          [&] { layer_backward(ops, ctx, p, g, chunk, in, d_out, d_in, ls, Recompute::NormsActivation); });
      runs.push_back([&] { layer_backward(ops, ctx, p, g, chunk, in, d_out, d_in, ls, Recompute::Nothing); });
    }
    const std::vector<double> seconds = time_each_on_device(device, runs, timing);
    // A tiled pass as the planner charges it (planner/sequence_tile.h, step_program.cpp): the
    // untiled per-token time over T plus kTileTailTokens a tile, the backward plus the shares of a
    // forward that a tiled backward and one in head groups run again. Inverted here, for one
    // measurement whose time is taken as proportional to the tokens.
    const int64_t tiles = tile_count(T, tile);
    const double to_untiled =
        tiles == 1 ? 1.0 : static_cast<double>(T) / static_cast<double>(T + tiles * kTileTailTokens);
    const double f = seconds[0] * to_untiled;
    const double again = tiled_backward_extra_share(s.config, T, tile) +
                         head_groups_backward_extra_share(s.config, head_groups);
    const double b = (seconds[1] - again * f) * to_untiled;
    forward.push_back({T, f});
    backward.push_back({T, b});
    // Without the kept-internals run, its time is the full backward's: an upper bound that no plan at
    // this length uses, since the kept internals of a chunk that needs tiles do not fit either.
    backward_kept.push_back({T, plain ? seconds[2] : b});
    backward_kept_all.push_back({T, plain ? seconds[3] : b});
  }
  return {fit_linear_time(forward, "layer forward"), fit_linear_time(backward, "layer backward"),
          fit_linear_time(backward_kept, "layer backward from kept internals"),
          fit_linear_time(backward_kept_all, "layer backward recomputing nothing")};
}

// For each direction, the own kernels are taken where the layer's pass that runs it (the forward;
// the backward recomputing nothing, which runs attention's backward and no forward) is faster with
// them by more than kOwnAttentionMargin at `tokens`: within it the library's stays, so that noise
// between two measurements of the same machine does not move a run between them.
constexpr double kOwnAttentionMargin = 0.005;

struct OwnAttention {
  bool forward = false, backward = false;
};

OwnAttention faster_attention(const LayerTimes& library, const LayerTimes& own, int64_t tokens) {
  const auto faster = [&](const LinearTime& mine, const LinearTime& lib) {
    return mine.at(tokens) < lib.at(tokens) * (1.0 - kOwnAttentionMargin);
  };
  return {faster(own.forward, library.forward), faster(own.backward_kept_all, library.backward_kept_all)};
}

// Where the ops have a library's attention beside ferry's own, the layer timed with each and,
// where each direction takes another, once more with the two as chosen; `layer` (the library's
// times) becomes those of the choice, which the ops are left running.
OwnAttention choose_attention(Ops& ops, LayerTimes& layer, const std::function<LayerTimes()>& time,
                              int64_t tokens) {
  if (!ops.has_library_attention()) return {};
  ops.use_library_attention(false, false);
  const LayerTimes own = time();
  const OwnAttention pick = faster_attention(layer, own, tokens);
  ops.use_library_attention(!pick.forward, !pick.backward);
  log_info(
      "profile: one layer at {} tokens with ferry's attention kernels: forward {:.4g} s (the library's "
      "{:.4g} s), backward recomputing nothing {:.4g} s (the library's {:.4g} s); attention's forward on "
      "{}, its backward on {}",
      tokens, own.forward.at(tokens), layer.forward.at(tokens), own.backward_kept_all.at(tokens),
      layer.backward_kept_all.at(tokens), pick.forward ? "ferry's kernels" : "the library",
      pick.backward ? "ferry's kernels" : "the library");
  if (pick.forward && pick.backward)
    layer = own;
  else if (pick.forward || pick.backward)
    layer = time();
  return pick;
}

struct EndTimes {
  LinearTime embedding_forward, embedding_backward, head, head_f32_grads, head_grouped,
      head_f32_grads_grouped;
};

// The head's weight gradient in fp32, as the engine keeps it for a head (or, tied, an embedding)
// updated on the device: the head unit's gradient, and the embedding's where tied (its table is the
// head's weight). Allocated only where the free device memory holds it with an eighth to spare;
// empty otherwise, and the profile then takes the head's time with gradients in `gd` for both.
struct F32HeadGradients {
  DeviceBuffer head, embedding;
  bool allocated = false;

  F32HeadGradients(Device& device, const Shape& s) {
    const size_t head_bytes = s.unit_bytes(s.layout.head_unit(), DType::F32);
    const size_t emb_bytes = s.layout.tied ? s.unit_bytes(s.layout.embedding_unit(), DType::F32) : 0;
    if ((head_bytes + emb_bytes) / 7 * 8 > free_device_bytes(device)) {
      log_info(
          "profile: the head with fp32 gradients needs {} more device memory than is free; timed with {} "
          "gradients only",
          format_bytes(head_bytes + emb_bytes), dtype_name(s.gd));
      return;
    }
    head = DeviceBuffer(device, head_bytes, "profile head fp32 gradients");
    device.fill_zero(head.data(), head_bytes, StreamKind::Compute);
    if (emb_bytes > 0) {
      embedding = DeviceBuffer(device, emb_bytes, "profile embedding fp32 gradients");
      device.fill_zero(embedding.data(), emb_bytes, StreamKind::Compute);
    }
    allocated = true;
  }
};

EndTimes time_ends(Device& device, Ops& ops, const Shape& s, const std::vector<int64_t>& tokens,
                   RandomDeviceFill& fill, const TimingOptions& timing) {
  const int64_t most = tokens.back(), H = s.config.hidden_size;
  const size_t E = s.layout.embedding_unit(), Hd = s.layout.head_unit();
  DeviceBuffer emb(device, s.unit_bytes(E, s.wd), "profile embedding weights");
  DeviceBuffer emb_grads(device, s.unit_bytes(E, s.gd), "profile embedding gradients");
  DeviceBuffer head(device, s.unit_bytes(Hd, s.wd), "profile head weights");
  DeviceBuffer head_grads(device, s.unit_bytes(Hd, s.gd), "profile head gradients");
  const float init = static_cast<float>(s.config.initializer_range);
  fill.unit(emb.data(), s.wd, s.layout.units[E], init);
  fill.unit(head.data(), s.wd, s.layout.units[Hd], init);
  device.fill_zero(emb_grads.data(), emb_grads.bytes(), StreamKind::Compute);
  device.fill_zero(head_grads.data(), head_grads.bytes(), StreamKind::Compute);
  Arena measure = Arena::measuring();
  carve_head_scratch(measure, s.config, most, s.wd);
  DeviceBuffer scratch(device, measure.used() + Arena::kAlignment, "profile head scratch");
  DeviceBuffer x(device, s.activation_bytes(most), "profile head input");
  DeviceBuffer dx(device, s.activation_bytes(most), "profile head input gradient");
  DeviceBuffer embedded(device, s.activation_bytes(most), "profile embedding output");
  DeviceBuffer loss(device, 256, "profile loss");
  fill.values(x.data(), s.wd, static_cast<size_t>(most * H), 1.0f);
  fill.values(dx.data(), s.wd, static_cast<size_t>(most * H), 1.0f);
  device.fill_zero(loss.data(), sizeof(float), StreamKind::Compute);
  ChunkTokens chunk_tokens(device, fill, s, most);

  const Tensor table = embedding_table(s.layout, emb.data(), s.wd);
  const Tensor dtable = embedding_table(s.layout, emb_grads.data(), s.gd);
  const HeadParams hp = head_params(s.layout, head.data(), emb.data(), s.wd);
  const HeadParams hg = head_params(s.layout, head_grads.data(), emb_grads.data(), s.gd);
  const Tensor loss_sum(loss.data(), DType::F32, {1});
  // What the ends of a micro-chunk of T tokens read and write: its tokens, the head's scratch, the
  // head's input and the gradient it returns (which the embedding's backward reads as the layers').
  struct Chunk {
    TokenChunk tokens;
    HeadScratch scratch;
    Tensor in, d_in;
    float grad_scale;
  };
  auto chunk_of = [&](int64_t T) {
    Arena arena(scratch.data(), scratch.bytes());
    return Chunk{chunk_tokens.chunk(T), carve_head_scratch(arena, s.config, T, s.wd), rows(x, s.wd, T, H),
                 rows(dx, s.wd, T, H), 1.0f / static_cast<float>(T)};
  };
  std::vector<TimedTokens> emb_forward, emb_backward;
  for (const int64_t T : tokens) {
    Chunk c = chunk_of(T);
    const Tensor out = rows(embedded, s.wd, T, H);
    // The gradient flowing into the embedding is the layers' dx: `dx` holds random values of that shape.
    const std::function<void()> runs[] = {[&] { ops.embedding_forward(c.tokens.ids, table, out); },
                                          [&] { ops.embedding_backward(c.tokens.ids, c.d_in, dtable); }};
    const std::vector<double> seconds = time_each_on_device(device, runs, timing);
    emb_forward.push_back({T, seconds[0]});
    emb_backward.push_back({T, seconds[1]});
  }

  // The head's variants: its weight gradient in `gd` or in fp32, its product over one logits chunk
  // or several. The head's first call at the most tokens takes the ops' workspace for it, so that
  // what is free after it is what the variants' own buffers can take.
  {
    Chunk c = chunk_of(most);
    head_forward_backward(ops, s.config, hp, &hg, c.tokens, c.in, c.grad_scale, c.d_in, c.scratch, loss_sum);
    device.synchronize_all();
  }
  // (With fp32 gradients already, as on the simulated device, this times the same work again.)
  const F32HeadGradients f32(device, s);
  const HeadParams f32_grads =
      f32.allocated ? head_params(s.layout, f32.head.data(), f32.embedding.data(), DType::F32) : HeadParams{};
  // The weight gradient's product over several logits chunks: only the CUDA ops (bf16) make the
  // logits in chunks, and only where the device has room for that many chunks' logits beside the
  // one chunk's the ops hold already, with an eighth to spare.
  bool grouped = false;
  if (s.wd == DType::BF16) {
    const size_t more_logits = cuda_ops_workspace_bytes(s.config, most, s.gd, 1, kHeadWeightGradChunks) -
                               cuda_ops_workspace_bytes(s.config, most, s.gd, 1, 1);
    grouped = more_logits > 0;  // else the largest micro-chunk is one logits chunk
    if (grouped && more_logits / 7 * 8 > free_device_bytes(device)) {
      grouped = false;
      log_info(
          "profile: the head's weight gradient over {} logits chunks needs {} more device memory than is "
          "free; not timed",
          kHeadWeightGradChunks, format_bytes(more_logits));
    }
  }
  struct HeadVariant {
    const HeadParams* grads;
    int64_t weight_grad_chunks;
    std::string what;
    LinearTime* time;
    std::vector<TimedTokens> points;
  };
  EndTimes times{fit_linear_time(emb_forward, "embedding forward"),
                 fit_linear_time(emb_backward, "embedding backward"),
                 {},
                 {},
                 {},
                 {}};
  std::vector<HeadVariant> variants = {{&hg, 1, "head", &times.head, {}}};
  if (f32.allocated)
    variants.push_back({&f32_grads, 1, "head with fp32 gradients", &times.head_f32_grads, {}});
  if (grouped) {
    variants.push_back({&hg,
                        kHeadWeightGradChunks,
                        "head, weight gradient over several logits chunks",
                        &times.head_grouped,
                        {}});
    if (f32.allocated)
      variants.push_back({&f32_grads,
                          kHeadWeightGradChunks,
                          "head with fp32 gradients over several logits chunks",
                          &times.head_f32_grads_grouped,
                          {}});
  }
  // The head run after run as a step runs its chunks, its variants in turn with each other (all
  // heavy) and not with the light embedding passes: timed in turn with those, its samples began
  // with the clocks they left the power-capped GPU, and the 8B's head came out 12% faster than in
  // its steps. One soak for every variant at a size, as for the layer's passes.
  for (const int64_t T : tokens) {
    std::vector<Chunk> chunks;
    for (const HeadVariant& v : variants) {
      chunks.push_back(chunk_of(T));  // the same scratch: the variants run one at a time
      chunks.back().scratch.weight_grad_chunks = v.weight_grad_chunks;
    }
    std::vector<std::function<void()>> runs;
    for (size_t i = 0; i < variants.size(); ++i)
      runs.push_back([&, i] {
        Chunk& c = chunks[i];
        head_forward_backward(ops, s.config, hp, variants[i].grads, c.tokens, c.in, c.grad_scale, c.d_in,
                              c.scratch, loss_sum);
      });
    const std::vector<double> seconds = time_each_on_device(device, runs, timing);
    for (size_t i = 0; i < variants.size(); ++i) variants[i].points.push_back({T, seconds[i]});
  }
  for (HeadVariant& v : variants) *v.time = fit_linear_time(v.points, v.what);
  // A variant not timed is taken at the time of the one it would refine.
  if (!f32.allocated) times.head_f32_grads = times.head;
  if (!grouped) times.head_grouped = times.head;
  if (!grouped || !f32.allocated) times.head_f32_grads_grouped = times.head_f32_grads;
  return times;
}

// Parameters per second of the device AdamW as the engine runs it for a unit whose optimizer
// lives on the device (device_optimizer.cpp): the fp32 gradient's partial sums of squares, their
// sum and the clip coefficient, then the fused update writing the new weights (bf16 in the same
// pass; other dtypes through a copy afterwards). GPU kernels on CUDA; on the simulated device the
// queued reference AdamW, which the engine runs there for the same placement.
double device_adamw_rate(Device& device, Ops& ops, DType weight_dtype, RandomDeviceFill& fill,
                         const ProfileOptions& options) {
  const size_t per_param = 3 * sizeof(float) + sizeof(float) + dtype_size(weight_dtype);
  const size_t n =
      std::min(static_cast<size_t>(options.gpu_adamw_params), free_device_bytes(device) / 2 / per_param) /
      64 * 64;
  FERRY_CHECK(n >= 64, kWhere, "no device memory left to measure the device AdamW; raise gpu_memory");
  const size_t chunks = grad_sumsq_chunks(n);
  DeviceBuffer master(device, n * 4, "profile adamw master"), m(device, n * 4, "profile adamw m"),
      v(device, n * 4, "profile adamw v"), grad(device, n * 4, "profile adamw gradient"),
      weights(device, round_up(n * dtype_size(weight_dtype)), "profile adamw weights"),
      partials(device, round_up(chunks * sizeof(double)), "profile adamw partials"),
      scalars(device, 256, "profile adamw sum and clip");
  fill.values(master.data(), DType::F32, n, 0.02f);
  fill.values(grad.data(), DType::F32, n, 1e-3f);
  device.fill_zero(m.data(), n * 4, StreamKind::Compute);
  device.fill_zero(v.data(), n * 4, StreamKind::Compute);
  double* sum = scalars.as<double>();
  float* clip = reinterpret_cast<float*>(scalars.as<char>() + 128);
  const std::unique_ptr<DeviceAdamW> adamw = make_device_adamw(device);
  const bool bf16 = weight_dtype == DType::BF16;
  AdamWUnitBuffers b;
  b.master = master.as<float>();
  b.m = m.as<float>();
  b.v = v.as<float>();
  b.grad = grad.data();
  b.grad_dtype = DType::F32;
  if (bf16) b.bf16_out = weights.as<uint16_t>();
  const AdamWSegment all{0, n, true};
  AdamWHyper hyper;
  hyper.lr = 1e-5;
  hyper.weight_decay = 0.01;
  int64_t step = 0;
  const double seconds = time_on_device(
      device,
      [&] {
        device.fill_zero(sum, sizeof(double), StreamKind::Compute);
        adamw->grad_sumsq_partials(grad.data(), DType::F32, n, partials.as<double>());
        adamw->accumulate(partials.as<double>(), chunks, sum);
        adamw->clip_coefficient(sum, 1.0, clip);
        adamw->step(b, std::span<const AdamWSegment>(&all, 1), hyper, ++step, clip);
        const int64_t count = static_cast<int64_t>(n);
        if (!bf16)
          ops.copy(Tensor(master.data(), DType::F32, {count}), Tensor(weights.data(), weight_dtype, {count}));
      },
      options.timing);
  return static_cast<double>(n) / seconds;
}

// Parameters per second of the norm partials the engine computes on the device for a host-updated
// unit before its gradient leaves (sliding_engine.cpp, send_gradients): gradients in the weight
// dtype (the streamed units' gradient dtype), one call per parameter-sized span.
double grad_norm_rate(Device& device, DType grad_dtype, RandomDeviceFill& fill,
                      const ProfileOptions& options) {
  const size_t per_param = dtype_size(grad_dtype);
  const size_t n =
      std::min(static_cast<size_t>(options.gpu_adamw_params), free_device_bytes(device) / 2 / per_param) /
      64 * 64;
  FERRY_CHECK(n >= 64, kWhere, "no device memory left to measure the gradient norm; raise gpu_memory");
  DeviceBuffer grad(device, round_up(n * per_param), "profile norm gradient"),
      partials(device, round_up(grad_sumsq_chunks(n) * sizeof(double)), "profile norm partials");
  fill.values(grad.data(), grad_dtype, n, 1e-3f);
  const std::unique_ptr<DeviceAdamW> kernels = make_device_adamw(device);
  const double seconds = time_on_device(
      device, [&] { kernels->grad_sumsq_partials(grad.data(), grad_dtype, n, partials.as<double>()); },
      options.timing);
  return static_cast<double>(n) / seconds;
}

}  // namespace

ComputeProfile measure_compute(Device& device, Ops& ops, const ModelConfig& config, int64_t seq_len,
                               const ProfileOptions& options) {
  FERRY_CHECK(seq_len >= 2, kWhere, "seq_len must be at least 2, got {}", seq_len);
  const DType wd = engine_weight_dtype(device);
  const Shape shape{config, build_model_layout(config), seq_len, wd, wd};

  std::vector<int64_t> micro = options.micro_batches;
  std::sort(micro.begin(), micro.end());
  micro.erase(std::unique(micro.begin(), micro.end()), micro.end());
  FERRY_CHECK(micro.size() >= 2 && micro.front() >= 1, kWhere,
              "the compute times need two or more micro-batch sizes >= 1 to fit fixed + per-token seconds");
  // An eighth stays free for the ops' own working memory (the CUDA ops allocate their GEMM
  // workspace and the fused cross-entropy's logits from the device on first use), and at least
  // what the memory model says they take: at long sequences attention's fp32 accumulators are more.
  const size_t free = free_device_bytes(device);
  const auto fits = [&](int64_t T, int64_t tile, int64_t groups) {
    const size_t need = std::max(shape.layer_phase_bytes(T, tile, groups), shape.ends_phase_bytes(T));
    const size_t ops_workspace = wd == DType::F32 ? 0 : cuda_ops_workspace_bytes(config, T, shape.gd, groups);
    return need <= free / 8 * 7 && need + ops_workspace <= free;
  };
  std::vector<int64_t> tokens;
  for (const int64_t m : micro) {
    const int64_t T = m * seq_len;
    if (fits(T, 0, 1))
      tokens.push_back(T);
    else
      log_info(
          "profile: micro-chunks of {} sequences need more device memory than {} of {} free; measured "
          "without",
          m, format_bytes(free / 8 * 7), format_bytes(free));
  }
  // A single micro-chunk is enough where its fixed part cannot matter: one sequence this long.
  // Where not even one fits whole, its layer runs in the largest sequence tiles that fit, and its
  // attention in the fewest groups of KV heads with them, as a plan at this length runs it
  // (model/decoder_layer.h).
  const int64_t kOneChunkTokens = options.one_chunk_tokens;
  // Thinner tiles than this run GEMMs too short to say what a plan's tiles cost.
  constexpr int64_t kSmallestTile = 256;
  int64_t tile = 0, head_groups = 1;
  if (tokens.empty() && seq_len >= kOneChunkTokens) {
    const std::vector<int64_t> group_counts = head_group_counts(config);
    for (int64_t t = seq_len / 2; t >= kSmallestTile && tile == 0; t /= 2)
      for (const int64_t g : group_counts)
        if (fits(seq_len, t, g)) {
          tile = t;
          head_groups = g;
          break;
        }
    if (tile > 0) {
      tokens.push_back(seq_len);
      log_info(
          "profile: one sequence of {} tokens fits with its layer in tiles of {} tokens, attention in {} "
          "group(s) of KV heads; measured so",
          seq_len, tile, head_groups);
    }
  }
  if (tokens.size() == 1 && tokens.front() >= kOneChunkTokens)
    log_info("profile: one micro-chunk of {} tokens fits; its times are taken as proportional to the tokens",
             tokens.front());
  else if (tokens.size() < 2) {
    const int64_t T = micro[1] * seq_len;
    fail(kWhere,
         "measuring the compute times needs micro-chunks of {} and {} sequences of {} tokens, which take {} "
         "of device "
         "memory; {} can be used (7/8 of the free memory): lower seq_len or raise gpu_memory",
         micro[0], micro[1], seq_len,
         format_bytes(std::max(shape.layer_phase_bytes(T), shape.ends_phase_bytes(T))),
         format_bytes(free / 8 * 7));
  }

  RandomDeviceFill fill(device, options.seed);
  ComputeProfile c;
  // The layer and the head are timed at the speed training reaches, after the ops' warm-up (GEMM
  // tuning: timed in the middle of it, a 1B layer's backward measured 60% slow), which runs until
  // a run tunes nothing: a problem called once a run is tuned in ~31 runs, one called in every
  // tile of a long sequence (or every head group) in as many times fewer.
  TimingOptions steady = options.timing;
  steady.tuning_calls = [&ops] { return ops.tuning_calls(); };
  steady.max_warmup_runs = std::max(steady.warmup_runs, ops.calls_to_steady_speed());
  steady.soak_seconds = options.compute_soak_seconds;
  // At long sequences each call takes seconds: each part says what it measured, so a profile of
  // minutes is not silent.
  const auto part_start = std::chrono::steady_clock::now();
  const auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  const std::function<LayerTimes()> time_the_layer = [&] {
    return time_layer(device, ops, shape, tokens, tile, head_groups, fill, steady);
  };
  LayerTimes layer = time_the_layer();
  // Attention is 5-13% of a step: on an H100 ferry's kernels ran the 1B's (D 64) ~1% faster than
  // cuDNN's in a layer, and the 3B's (D 128) as fast in a step, with cuDNN's forward faster and its
  // backward slower than theirs there.
  const OwnAttention own_attention = choose_attention(ops, layer, time_the_layer, tokens.back());
  log_info(
      "profile: one layer at {} tokens: forward {:.4g} s, backward {:.4g} s (from kept internals {:.4g} s, "
      "recomputing nothing {:.4g} s); measured in {:.1f} s",
      tokens.back(), layer.forward.at(tokens.back()), layer.backward.at(tokens.back()),
      layer.backward_kept.at(tokens.back()), layer.backward_kept_all.at(tokens.back()),
      seconds_since(part_start));
  c.layer_forward = layer.forward;
  c.layer_backward = layer.backward;
  c.layer_backward_kept = layer.backward_kept;
  c.layer_backward_kept_all = layer.backward_kept_all;
  c.layer_tile_tokens = tile;
  c.layer_head_groups = head_groups;
  c.own_attention_forward = own_attention.forward;
  c.own_attention_backward = own_attention.backward;
  const auto ends_start = std::chrono::steady_clock::now();
  const EndTimes ends = time_ends(device, ops, shape, tokens, fill, steady);
  log_info("profile: the head at {} tokens: {:.4g} s forward+backward; measured in {:.1f} s", tokens.back(),
           ends.head.at(tokens.back()), seconds_since(ends_start));
  c.embedding_forward = ends.embedding_forward;
  c.embedding_backward = ends.embedding_backward;
  c.head = ends.head;
  c.head_f32_grads = ends.head_f32_grads;
  c.head_grouped = ends.head_grouped;
  c.head_f32_grads_grouped = ends.head_f32_grads_grouped;
  c.gpu_adamw_params_per_s = device_adamw_rate(device, ops, shape.wd, fill, options);
  c.grad_norm_params_per_s = grad_norm_rate(device, shape.wd, fill, options);
  return c;
}

}  // namespace ferry
