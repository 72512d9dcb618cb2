// `ferry profile` end to end on the simulated device: the summary it prints, and the file it writes
// loads back as a profile of the current format and method, with the CPU AdamW measured beside
// copies.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "planner/profile.h"
#include "profiler/machine_profiler.h"
#include "test_util.h"

namespace ferry {
namespace {

TEST(ProfileCommand, PrintsTheSummaryAndWritesALoadableProfile) {
  ASSERT_TRUE(std::filesystem::exists(test::ferry_binary())) << "build the ferry target first";
  test::ScratchDir dir("profile_cli");
  std::string out;
  const std::string command = test::ferry_binary().string() +
                              " profile /dev/null device=sim seq_len=32 --preset llama/tiny --out " +
                              (dir / "sim.json").string();
  ASSERT_EQ(test::run_command(command, &out), 0) << out;
  for (const char* expected :
       {"machine profile: sim", "layer forward", "layer backward", "head fwd+bwd", "head, fp32 grads",
        "h2d alone", "both at once", "CPU AdamW", "beside copies       CPU AdamW at ", "(host DRAM shared)",
        "RAM", "measured by:     cpu, method "}) {
    EXPECT_NE(out.find(expected), std::string::npos) << expected << "\n" << out;
  }
  const MachineProfile p = load_profile(dir / "sim.json");
  EXPECT_EQ(p.weight_dtype, DType::F32);
  EXPECT_EQ(p.seq_len, 32);
  EXPECT_TRUE(p.host.memory_sharing_measured);
  EXPECT_EQ(profile_to_json(p)["version"], MachineProfile::kVersion);
  EXPECT_EQ(p.method, kProfilerMethod);
  EXPECT_NE(out.find(fmt::format("method {}\n", kProfilerMethod)), std::string::npos) << out;
}

}  // namespace
}  // namespace ferry
