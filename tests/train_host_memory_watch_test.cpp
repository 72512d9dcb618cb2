// HostMemoryWatch: the peak of each phase, and a run that outgrows its plan stopped by name.
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "core/host_memory.h"
#include "test_util.h"
#include "train/host_memory_watch.h"

namespace ferry {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(HostMemoryWatch, KeepsEachPhasesPeakAndReportsThemInOrder) {
  HostMemoryWatch watch(0.005);
  ASSERT_TRUE(watch.available());
  watch.enter("model load");
  std::vector<char> block(300 * kMiB);
  std::memset(block.data(), 1, block.size());  // committed inside "model load"
  const size_t held = read_process_memory()->counted();
  block = std::vector<char>();
  watch.enter("steady state");
  watch.plan("steady state", held);
  const std::vector<HostMemoryPhase> phases = watch.phases();
  ASSERT_EQ(phases.size(), 2u);
  EXPECT_EQ(phases[0].name, "model load");
  EXPECT_GE(phases[0].peak + 16 * kMiB, held);  // held was read after the last sample
  EXPECT_EQ(phases[0].planned, 0u);
  EXPECT_EQ(phases[1].name, "steady state");
  EXPECT_EQ(phases[1].planned, held);
  EXPECT_LT(phases[1].peak, held - 200 * kMiB);  // the block was freed before the phase began
  EXPECT_NO_THROW(watch.check());

  test::ScratchDir dir("memory-watch");
  watch.write_report(dir / "host_memory.json");
  std::ifstream in(dir / "host_memory.json");
  const nlohmann::json report = nlohmann::json::parse(in);
  ASSERT_EQ(report.at("phases").size(), 2u);
  EXPECT_EQ(report.at("phases")[1].at("planned").get<size_t>(), held);
}

TEST(HostMemoryWatch, AnOverrunStopsTheRunNamingThePhase) {
  HostMemoryWatch watch(3600.0);  // no timed samples: the phases() call below is the one that sees it
  const size_t before = read_process_memory()->counted();
  watch.enter("checkpoint save", before);
  std::vector<char> block(HostMemoryWatch::kMarginBytes + 128 * kMiB);
  std::memset(block.data(), 1, block.size());
  watch.phases();
  try {
    watch.check();
    FAIL() << "no overrun seen";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'checkpoint save'"), std::string::npos) << what;
    EXPECT_NE(what.find("last complete checkpoint is intact"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace ferry
