// Checkpoints on disk: a save of a step that already has a checkpoint replaces it in one step and
// leaves no temporary directory behind; a pruned checkpoint is gone whole.
#include <algorithm>

#include "core/dtype.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/model_init.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

// The tiny model's masters, m and v, every element `value` (m and v a fixed fraction of it).
class CheckpointState {
 public:
  explicit CheckpointState(float value)
      : config_(preset_config("llama", "tiny")), layout_(build_model_layout(config_)) {
    for (const UnitLayout& unit : layout_.units) {
      for (auto* group : {&masters_, &m_, &v_}) group->emplace_back(static_cast<size_t>(unit.numel), 0.0f);
      masters_.back().assign(masters_.back().size(), value);
      m_.back().assign(m_.back().size(), value / 2);
      v_.back().assign(v_.back().size(), value / 4);
    }
  }
  CheckpointView view(int64_t step) const {
    CheckpointView view;
    view.config = &config_;
    view.layout = &layout_;
    view.save_dtype = DType::F32;
    for (size_t u = 0; u < layout_.units.size(); ++u) {
      view.masters.push_back(masters_[u].data());
      view.m.push_back(m_[u].data());
      view.v.push_back(v_[u].data());
    }
    view.state.step = step;
    return view;
  }
  // The masters of `checkpoint`, read back into buffers laid out like these.
  std::vector<std::vector<float>> load_masters(const fs::path& checkpoint) const {
    auto masters = masters_, m = m_, v = v_;
    std::vector<float*> pm, pmm, pv;
    for (size_t u = 0; u < masters.size(); ++u) {
      pm.push_back(masters[u].data());
      pmm.push_back(m[u].data());
      pv.push_back(v[u].data());
    }
    load_checkpoint(checkpoint, layout_, pm, pmm, pv);
    return masters;
  }
  const std::vector<std::vector<float>>& masters() const { return masters_; }

 private:
  ModelConfig config_;
  ModelLayout layout_;
  std::vector<std::vector<float>> masters_, m_, v_;
};

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(Checkpoint, ASaveOfTheSameStepReplacesTheCheckpointWhole) {
  test::ScratchDir out("checkpoint_replace");
  const CheckpointState first(0.25f), second(0.5f);
  const fs::path path = save_checkpoint(out.path(), first.view(1), 0);
  EXPECT_EQ(save_checkpoint(out.path(), second.view(1), 0), path);
  EXPECT_EQ(entries(out.path()), std::vector<std::string>{"checkpoint-1"})
      << "no temporary or old directory left";
  EXPECT_EQ(find_latest_checkpoint(out.path()), path);
  EXPECT_EQ(first.load_masters(path), second.masters());
}

TEST(Checkpoint, PruningKeepsTheNewestWhole) {
  test::ScratchDir out("checkpoint_prune");
  const CheckpointState state(0.125f);
  for (int64_t step = 1; step <= 4; ++step) save_checkpoint(out.path(), state.view(step), 2);
  EXPECT_EQ(entries(out.path()), (std::vector<std::string>{"checkpoint-3", "checkpoint-4"}));
  EXPECT_EQ(state.load_masters(out.path() / "checkpoint-3"), state.masters());
}

// The disk tier's units in a save (train/checkpoint.h StreamedState), here from a stand-in tier
// that, as DiskStateTier does, keeps the unit it read last: their weights come from the upload
// copy (`encoded`) and their state from one read per unit for the optimizer file, whose tensors
// come unit by unit; the files are those of a save from RAM, byte for byte.
TEST(Checkpoint, AStreamedUnitIsReadOnceAndSavedAsFromRam) {
  test::ScratchDir out("checkpoint_streamed");
  const ModelConfig config = preset_config("llama", "tiny");
  const ModelLayout layout = build_model_layout(config);
  std::vector<std::vector<float>> masters, m, v;
  std::vector<std::vector<uint16_t>> staged;  // the bf16 upload copy of each unit
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const size_t n = static_cast<size_t>(layout.units[u].numel);
    masters.push_back(test::random_vector(n, 10 + u));
    m.push_back(test::random_vector(n, 100 + u));
    v.push_back(test::random_vector(n, 200 + u, 0.0f, 1.0f));
    staged.emplace_back(n);
    for (size_t i = 0; i < n; ++i) staged.back()[i] = f32_to_bf16(masters.back()[i]);
  }
  const auto view_of = [&](bool streamed_units) {
    CheckpointView view;
    view.config = &config;
    view.layout = &layout;
    view.save_dtype = DType::BF16;
    for (size_t u = 0; u < layout.units.size(); ++u) {
      const bool streamed = streamed_units && (u == 1 || u == 3);
      view.masters.push_back(streamed ? nullptr : masters[u].data());
      view.m.push_back(streamed ? nullptr : m[u].data());
      view.v.push_back(streamed ? nullptr : v[u].data());
    }
    view.state.step = 1;
    return view;
  };
  // The stand-in tier: one unit's three arrays in a buffer, read (copied in) when another is asked.
  std::vector<std::vector<float>> slot(3);
  size_t cached = SIZE_MAX, reads = 0;
  CheckpointView streamed = view_of(true);
  streamed.streamed.arrays = [&](size_t u) {
    if (u != cached) {
      slot = {masters[u], m[u], v[u]};
      cached = u;
      ++reads;
    }
    std::vector<std::span<std::byte>> spans;
    for (auto& a : slot) spans.push_back(std::as_writable_bytes(std::span(a)));
    return spans;
  };
  streamed.streamed.masters = [&](size_t u, size_t offset, size_t) {
    return reinterpret_cast<const float*>(streamed.streamed.arrays(u)[0].data()) + offset;
  };
  streamed.streamed.encoded = [&](size_t u, DType dtype) -> const void* {
    return dtype == DType::BF16 ? staged[u].data() : nullptr;
  };
  const fs::path from_ram = save_checkpoint(out.path() / "ram", view_of(false), 0);
  const fs::path from_tier = save_checkpoint(out.path() / "tier", streamed, 0);
  EXPECT_EQ(reads, 2u) << "each streamed unit read once";
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "trainer_state.json"})
    EXPECT_TRUE(test::read_file(from_tier / file) == test::read_file(from_ram / file)) << file;
}

TEST(ExchangePaths, SwapsTwoDirectoriesInOneStep) {
  test::ScratchDir dir("exchange");
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  write_file_atomic(dir / "a" / "name", "a");
  write_file_atomic(dir / "b" / "name", "b");
  if (!exchange_paths(dir / "a", dir / "b")) GTEST_SKIP() << "this file system cannot exchange paths";
  EXPECT_EQ(test::read_file(dir / "a" / "name"), "b");
  EXPECT_EQ(test::read_file(dir / "b" / "name"), "a");
  EXPECT_THROW(exchange_paths(dir / "a", dir / "missing"), Error);
}

}  // namespace
}  // namespace ferry
