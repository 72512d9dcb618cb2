// The disk tier through `ferry train` on the simulated device: disk_layers forces a layer's
// optimizer state into a file under disk_dir; the losses, the saved model and the checkpoint's
// optimizer state are the bits of the all-RAM run, a resume from a checkpoint written with the
// tier continues exactly, and the state file is gone when the run ends (also a stale one from a
// killed run); bad settings are refused with what to do.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "test_util.h"
#include "tiny_run.h"
#include "train/plan_selection.h"
#include "train/trainer.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t state_files(const fs::path& dir) {
  size_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    n += e.path().filename().string().starts_with("ferry-state-");
  return n;
}

class DiskTierRun : public test::TinyRun {
 protected:
  TrainConfig sim(const std::string& out, std::vector<std::string> extra = {}) {
    extra.insert(extra.begin(), {"device=sim", "gpu_slots=2", "max_grad_norm=0.5", "weight_decay=0.1"});
    return config(out, extra);
  }
  std::vector<std::string> disk() const {
    return {"disk_memory=64MiB", "disk_dir=" + (scratch_ / "disk").string(), "disk_layers=1"};
  }
  std::vector<double> losses(const TrainConfig& c, int64_t stop_after = 0) {
    std::vector<double> out;
    TrainHooks hooks;
    hooks.on_step = [&](const StepRecord& r) { out.push_back(r.loss); };
    hooks.stop_after_steps = stop_after;
    run_training(c, hooks);
    return out;
  }
};

TEST_F(DiskTierRun, TrainsBitIdenticalToTheAllRamRunAndRemovesItsFile) {
  const std::vector<double> ram = losses(sim("ram", {"save_steps=3"}));
  std::vector<std::string> with_disk = disk();
  with_disk.push_back("save_steps=3");
  const std::vector<double> on_disk = losses(sim("disk-run", with_disk));
  ASSERT_EQ(ram.size(), 6u);
  EXPECT_EQ(ram, on_disk);
  EXPECT_EQ(bytes_of(scratch_ / "ram" / "model.safetensors"),
            bytes_of(scratch_ / "disk-run" / "model.safetensors"));
  // The checkpoint holds every unit's state, the disk layer's included.
  EXPECT_EQ(bytes_of(scratch_ / "ram" / "checkpoint-3" / "optimizer.safetensors"),
            bytes_of(scratch_ / "disk-run" / "checkpoint-3" / "optimizer.safetensors"));
  EXPECT_EQ(state_files(scratch_ / "disk"), 0u) << "the state file is removed at the end of the run";
}

TEST_F(DiskTierRun, ResumesFromACheckpointWrittenWithTheTier) {
  const std::vector<double> full = losses(sim("full"));
  losses(sim("split", disk()), 3);
  std::vector<std::string> resume = disk();
  resume.push_back("resume=true");
  const std::vector<double> rest = losses(sim("split", resume));
  ASSERT_EQ(rest.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(rest[i], full[3 + i]) << "step " << 4 + i;
}

// A lean optimizer_state on disk: the tier moves the format's arrays as opaque bytes (each padded
// to the O_DIRECT alignment in the file), so the run has the all-RAM lean run's bits -- losses,
// saved model, checkpoint -- and a resume from a checkpoint written with the tier continues it.
TEST_F(DiskTierRun, ALeanFormatOnDiskIsBitIdenticalToTheAllRamLeanRun) {
  for (const std::string format : {"bf16c8_q8", "fp32_q8"}) {
    SCOPED_TRACE(format);
    const std::string lean = "optimizer_state=" + format;
    const std::vector<double> ram = losses(sim("lean-ram-" + format, {lean, "save_steps=3"}));
    std::vector<std::string> with_disk = disk();
    with_disk.insert(with_disk.end(), {lean, "save_steps=3"});
    const std::vector<double> on_disk = losses(sim("lean-disk-" + format, with_disk));
    ASSERT_EQ(ram.size(), 6u);
    EXPECT_EQ(ram, on_disk);
    EXPECT_EQ(bytes_of(scratch_ / ("lean-ram-" + format) / "model.safetensors"),
              bytes_of(scratch_ / ("lean-disk-" + format) / "model.safetensors"));
    EXPECT_EQ(bytes_of(scratch_ / ("lean-ram-" + format) / "checkpoint-3" / "optimizer.safetensors"),
              bytes_of(scratch_ / ("lean-disk-" + format) / "checkpoint-3" / "optimizer.safetensors"));
    EXPECT_EQ(state_files(scratch_ / "disk"), 0u);

    std::vector<std::string> split = disk();
    split.push_back(lean);
    losses(sim("lean-split-" + format, split), 3);
    split.push_back("resume=true");
    const std::vector<double> rest = losses(sim("lean-split-" + format, split));
    ASSERT_EQ(rest.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(rest[i], ram[3 + i]) << "step " << 4 + i;
  }
}

TEST_F(DiskTierRun, AStaleFileOfAKilledRunIsRemovedAtTheNextStart) {
  fs::create_directories(scratch_ / "disk");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  const fs::path stale = scratch_ / "disk" / ("ferry-state-" + std::to_string(child) + ".bin");
  std::ofstream(stale) << "left by a killed run";
  losses(sim("after-kill", disk()));
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_EQ(state_files(scratch_ / "disk"), 0u);
}

TEST_F(DiskTierRun, BadSettingsAreRefusedWithWhatToDo) {
  EXPECT_TRUE(test::contains(test::error_of([&] { sim("x", {"disk_memory=1GiB"}); }), "disk_dir"));
  EXPECT_TRUE(test::contains(test::error_of([&] { sim("x", {"disk_layers=1"}); }), "disk_memory"));
  EXPECT_EQ(sim("x", {"disk_memory=0"}).disk_memory, 0) << "0 says: no disk tier";
  // A disk budget too small for the forced layer: no plan.
  std::vector<std::string> tiny = {"disk_memory=4KiB", "disk_dir=" + (scratch_ / "disk").string(),
                                   "disk_layers=1"};
  const std::string message = test::error_of([&] { run_training(sim("tiny-disk", tiny)); });
  EXPECT_FALSE(message.empty());
}

// The free space under disk_dir bounds the disk budget the search gets (statvfs at planning time).
TEST_F(DiskTierRun, TheFreeSpaceBoundsTheDiskBudget) {
  const TrainConfig c = sim("x", {"disk_memory=1GiB", "disk_dir=" + (scratch_ / "disk").string()});
  PlanTarget target;
  fill_disk_target(target, c, true);
  ASSERT_TRUE(target.disk_free.has_value());
  EXPECT_TRUE(fs::is_directory(scratch_ / "disk"));
  target.disk_free = size_t{1} << 20;
  EXPECT_EQ(plan_request(c, target, 0.0).disk_budget, size_t{1} << 20);
  EXPECT_TRUE(test::contains(plan_request(c, target, 0.0).disk_budget_source, "what is free in disk_dir"));
  target.disk_free = size_t{1} << 40;
  EXPECT_EQ(plan_request(c, target, 0.0).disk_budget, size_t{1} << 30);
  EXPECT_EQ(plan_request(c, target, 0.0).disk_budget_source, "disk_memory");
  target.disk_free.reset();  // a machine known by a profile: disk_memory alone
  EXPECT_EQ(plan_request(c, target, 0.0).disk_budget, size_t{1} << 30);
}

}  // namespace
}  // namespace ferry
