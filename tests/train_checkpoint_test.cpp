// Checkpoints on disk: a save of a step that already has a checkpoint replaces it in one step and
// leaves no temporary directory behind; a pruned checkpoint is gone whole.
#include <algorithm>

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
