// What the tests of the sliding engine run it on: a step's batch of packed random documents, the
// hyperparameters of each step, and plans built by hand (slots, resident units, offloaded
// boundaries, update schedule, units with their optimizer on the device).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "core/ignore_index.h"
#include "data/packing.h"
#include "engine/step_batch.h"
#include "model/unit_layout.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "planner/plan.h"

namespace ferry::test {

// Rows of kSeq tokens, micro-chunks of kMicro rows, kGlobal rows per step, kSteps steps.
constexpr int64_t kSeq = 32, kMicro = 2, kGlobal = 6, kSteps = 4;

// 40 random documents of 3..32 tokens, their first two labels ignored, packed into rows.
inline std::vector<PackedRow> make_rows(int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Document> docs;
  for (int d = 0; d < 40; ++d) {
    Document doc;
    const int n = 3 + static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) {
      const int32_t id = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
      doc.input_ids.push_back(id);
      doc.labels.push_back(i < 2 ? kIgnoreIndex : id);
    }
    docs.push_back(doc);
  }
  return pack_documents(docs, kSeq, true);
}

// The batch of step `step` (0-based): kGlobal rows, taken in turn.
inline StepBatch batch_for(const std::vector<PackedRow>& rows, int64_t step) {
  std::vector<const PackedRow*> picked;
  for (int64_t r = 0; r < kGlobal; ++r)
    picked.push_back(&rows[static_cast<size_t>((step * kGlobal + r) % rows.size())]);
  return make_step_batch(picked, kSeq, kMicro);
}

// The hyperparameters of step `step` (0-based): a cosine schedule, weight decay.
inline AdamWHyper hyper_at(int64_t step) {
  AdamWHyper h;
  h.lr = lr_at(LrSchedule::Cosine, 3e-3, step, 1, kSteps);
  h.beta2 = 0.95;
  h.weight_decay = 0.1;
  return h;
}

// fp32 weights and gradients; units listed in `resident` ResidentParams, in `with_optimizer`
// ResidentWithOptimizer, the others Streamed; the boundaries in `offloaded` OffloadToHost, the
// others KeepOnGpu.
inline Plan make_plan(const ModelLayout& layout, int64_t layers, int64_t slots, std::vector<size_t> resident,
                      std::vector<int64_t> offloaded, UpdateSchedule update,
                      std::vector<size_t> with_optimizer = {}) {
  Plan p;
  p.micro_batch = kMicro;
  p.gpu_slots = slots;
  p.weight_dtype = DType::F32;
  p.grad_dtype = DType::F32;
  p.update = update;
  p.units.assign(layout.units.size(), UnitPlacement::Streamed);
  for (size_t u : resident) p.units[u] = UnitPlacement::ResidentParams;
  for (size_t u : with_optimizer) p.units[u] = UnitPlacement::ResidentWithOptimizer;
  p.activations.assign(static_cast<size_t>(layers), ActivationPlacement::KeepOnGpu);
  for (int64_t l : offloaded) p.activations[static_cast<size_t>(l)] = ActivationPlacement::OffloadToHost;
  return p;
}

// The plan with these layers keeping their forward intermediates (no recompute in the backward).
inline Plan keeping_internals(Plan p, std::vector<int64_t> layers) {
  for (int64_t l : layers) p.activations[static_cast<size_t>(l)] = ActivationPlacement::KeepWithInternals;
  return p;
}

// The plan whose layers keeping internals keep `kept` of their forward: the norms' outputs too
// (no norm recomputed), or the activation as well (nothing recomputed).
inline Plan keeping_more(Plan p, KeptInternals kept) {
  p.kept_internals = kept;
  return p;
}

// The plan with these layers' boundaries and internals offloaded to the host (no recompute).
inline Plan offloading_internals(Plan p, std::vector<int64_t> layers) {
  for (int64_t l : layers) p.activations[static_cast<size_t>(l)] = ActivationPlacement::OffloadWithInternals;
  return p;
}

// The plan keeping only every K-th boundary (0, K, 2K, ...), where it placed it; the others
// recomputed in the backward (planner/boundary_groups.h).
inline Plan keeping_every(Plan p, int64_t keep_every) {
  for (size_t b = 0; b < p.activations.size(); ++b)
    if (b % static_cast<size_t>(keep_every) != 0) p.activations[b] = ActivationPlacement::Recompute;
  return p;
}

// The plan with its fp32 masters uploaded and converted on the device (no host weight copy).
inline Plan converting_on_upload(Plan p) {
  p.weight_upload = WeightUpload::ConvertOnUpload;
  return p;
}

// The plan with these layers' AdamW on the device over their state streamed from the host
// (ResidentWithStreamedOptimizer), in pieces of `piece` parameters.
inline Plan streaming_optimizer(Plan p, const ModelLayout& layout, std::vector<int64_t> layers,
                                int64_t piece) {
  for (int64_t l : layers) p.units[layout.layer_unit(l)] = UnitPlacement::ResidentWithStreamedOptimizer;
  p.streamed_state_piece = piece;
  return p;
}

// The plan running each step in `sweeps` sweeps of its micro-chunks (Plan::sweeps).
inline Plan in_sweeps(Plan p, int64_t sweeps) {
  p.sweeps = sweeps;
  return p;
}

inline std::vector<size_t> all_units(const ModelLayout& layout) {
  std::vector<size_t> units(layout.units.size());
  for (size_t u = 0; u < units.size(); ++u) units[u] = u;
  return units;
}

}  // namespace ferry::test
