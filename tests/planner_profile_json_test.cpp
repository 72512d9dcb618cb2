// The machine profile's JSON: a saved profile loads back equal, and a bad one is refused with a
// message that names the file and the field.
#include <fstream>
#include <functional>

#include "core/error.h"
#include "optim/state_format.h"
#include "planner/profile.h"
#include "test_util.h"

namespace ferry {
namespace {

MachineProfile sample_profile() {
  MachineProfile p;
  p.device_name = "cuda:0 NVIDIA H200";
  p.device_memory_bytes = 24e9;  // measured in a run of gpu_memory 24GB
  p.device_uncapped_memory_bytes = 150e9;
  p.shape_key = "llama-h4096-i14336-L32-q32x128-kv8-v128256-s2048-BF16";
  p.kernels = "cuda, cuDNN 91400 attention";
  p.method = 2;
  p.seq_len = 2048;
  p.weight_dtype = DType::BF16;
  p.compute.embedding_forward = {1e-5, 1e-9};
  p.compute.embedding_backward = {2e-5, 3e-9};
  p.compute.layer_forward = {5e-5, 3.1e-7};
  p.compute.layer_backward = {1.2e-4, 9.3e-7};
  p.compute.layer_backward_kept = {1.1e-4, 6.6e-7};
  p.compute.head = {1e-4, 1.1e-6};
  p.compute.head_f32_grads = {1e-4, 1.2e-6};
  p.compute.head_grouped = {1e-4, 1.05e-6};
  p.compute.head_f32_grads_grouped = {1e-4, 1.1e-6};
  p.compute.own_attention_backward = true;
  p.compute.gpu_adamw_params_per_s = 1.5e11;
  p.compute.grad_norm_params_per_s = 1.6e12;
  p.transfer.h2d_bytes_per_s = 55e9;
  p.transfer.d2h_bytes_per_s = 54e9;
  p.transfer.duplex_h2d_bytes_per_s = 50e9;
  p.transfer.duplex_d2h_bytes_per_s = 50.5e9;
  p.transfer.latency_s = 8e-6;
  p.host.threads = 16;
  p.host.cpu_adamw_params_per_s = 4.1e9;
  p.host.lean_adamw_params_per_s[static_cast<int>(OptimizerStateFormat::Fp32Q8)] = 5.5e9;
  p.host.lean_adamw_params_per_s[static_cast<int>(OptimizerStateFormat::Bf16C8Q8)] = 4.5e9;
  p.host.lean_adamw_params_per_s[static_cast<int>(OptimizerStateFormat::Bf16SrQ8)] = 6.5e9;
  p.host.memory_bytes = 135e9;
  p.host.disk_read_bytes_per_s = 1.9e9;
  p.host.disk_write_bytes_per_s = 2.3e9;
  p.host.memory_sharing = {0.83, 0.75, 0.72, 0.70};
  p.host.memory_sharing_measured = true;
  return p;
}

// The error message of loading `json`, or "" when it loads.
std::string load_error(const nlohmann::json& json) {
  try {
    profile_from_json(json, "h200.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ProfileJson, RoundTripsThroughAFile) {
  test::ScratchDir dir("profile_json");
  const MachineProfile p = sample_profile();
  save_profile(dir / "p.json", p);
  const MachineProfile back = load_profile(dir / "p.json");
  EXPECT_EQ(profile_to_json(back), profile_to_json(p));
  EXPECT_EQ(back.weight_dtype, DType::BF16);
  EXPECT_EQ(back.seq_len, 2048);
  EXPECT_EQ(back.compute.layer_backward.per_token_s, 9.3e-7);
  EXPECT_EQ(back.device_memory_bytes, 24e9);
  EXPECT_EQ(back.device_uncapped_memory_bytes, 150e9);
  EXPECT_EQ(back.compute.layer_backward_kept.fixed_s, 1.1e-4);
  EXPECT_EQ(back.compute.layer_backward_kept.per_token_s, 6.6e-7);
  EXPECT_EQ(back.compute.head_grouped.per_token_s, 1.05e-6);
  EXPECT_EQ(back.compute.head_f32_grads_grouped.per_token_s, 1.1e-6);
  EXPECT_FALSE(back.compute.own_attention_forward);
  EXPECT_TRUE(back.compute.own_attention_backward);
  EXPECT_EQ(back.host.threads, 16);
  EXPECT_EQ(back.kernels, "cuda, cuDNN 91400 attention");
  EXPECT_EQ(back.method, 2);
  EXPECT_TRUE(back.host.memory_sharing_measured);
  EXPECT_EQ(back.host.memory_sharing.cpu_beside_duplex, 0.75);
  EXPECT_EQ(back.host.memory_sharing.duplex_beside_cpu, 0.70);
  EXPECT_EQ(back.host.lean_adamw_params_per_s[static_cast<int>(OptimizerStateFormat::Bf16C8Q8)], 4.5e9);
}

// Files from before the uncapped device memory was recorded load without it (0), which `ferry
// plan` then says; a recorded one is a byte count.
TEST(ProfileJson, AFileWithoutTheUncappedDeviceMemoryLoadsWithoutIt) {
  nlohmann::json j = profile_to_json(sample_profile());
  j.erase("device_uncapped_memory_bytes");
  const MachineProfile p = profile_from_json(j, "h200.json");
  EXPECT_EQ(p.device_uncapped_memory_bytes, 0.0);
  EXPECT_EQ(p.device_memory_bytes, 24e9);
  j["device_uncapped_memory_bytes"] = -1;
  EXPECT_NE(load_error(j).find("\"device_uncapped_memory_bytes\""), std::string::npos) << load_error(j);
}

// Files from before method 8 did not time the head's weight gradient over several logits chunks:
// it loads as the head's time with one product per chunk (which the planner then never prefers).
TEST(ProfileJson, AFileWithoutTheGroupedHeadTakesTheHeadsTimes) {
  nlohmann::json j = profile_to_json(sample_profile());
  j["compute"].erase("head_grouped");
  j["compute"].erase("head_f32_grads_grouped");
  const MachineProfile p = profile_from_json(j, "h200.json");
  EXPECT_EQ(p.compute.head_grouped.per_token_s, 1.1e-6);
  EXPECT_EQ(p.compute.head_f32_grads_grouped.per_token_s, 1.2e-6);
}

// Files from before method 9 did not time the layer with the own attention kernels: they load as
// the library's (what those runs used); a value that is there must be true or false.
TEST(ProfileJson, AFileWithoutTheAttentionChoiceLoadsTheLibrarys) {
  nlohmann::json j = profile_to_json(sample_profile());
  j["compute"].erase("own_attention_forward");
  j["compute"].erase("own_attention_backward");
  const MachineProfile p = profile_from_json(j, "h200.json");
  EXPECT_FALSE(p.compute.own_attention_forward);
  EXPECT_FALSE(p.compute.own_attention_backward);
  j["compute"]["own_attention_backward"] = 1;
  EXPECT_NE(load_error(j).find("\"own_attention_backward\" is missing or not true or false"),
            std::string::npos)
      << load_error(j);
}

// Files from before method 6 have no lean AdamW rates: they load as zero ("not measured"); a rate
// that is there must be positive.
TEST(ProfileJson, LeanRatesAreOptional) {
  nlohmann::json j = profile_to_json(sample_profile());
  j["host"].erase("lean_adamw_params_per_s");
  const MachineProfile p = profile_from_json(j, "old.json");
  for (double rate : p.host.lean_adamw_params_per_s) EXPECT_EQ(rate, 0.0);
  j["host"]["lean_adamw_params_per_s"]["bf16sr_q8"] = 0.0;
  EXPECT_NE(load_error(j).find("\"bf16sr_q8\" must be positive"), std::string::npos) << load_error(j);
}

// Files from before method 5 have no backward from kept internals: it loads as zero, which the
// cost model reads as "not measured".
TEST(ProfileJson, AFileWithoutTheKeptBackwardLoadsItAsZero) {
  nlohmann::json j = profile_to_json(sample_profile());
  j["compute"].erase("layer_backward_kept");
  const MachineProfile p = profile_from_json(j, "h200.json");
  EXPECT_EQ(p.compute.layer_backward_kept.fixed_s, 0.0);
  EXPECT_EQ(p.compute.layer_backward_kept.per_token_s, 0.0);
  EXPECT_EQ(p.compute.layer_backward.per_token_s, 9.3e-7);
}

// Format 2 (before the CPU AdamW was measured beside copies) still loads: no sharing, and saved
// again it says so, in the format it came in.
TEST(ProfileJson, AFormat2FileLoadsWithoutMemorySharing) {
  nlohmann::json j = profile_to_json(sample_profile());
  j["version"] = 2;
  j["host"].erase("memory_sharing");
  const MachineProfile p = profile_from_json(j, "v2.json");
  EXPECT_FALSE(p.host.memory_sharing_measured);
  EXPECT_EQ(p.host.memory_sharing.cpu_beside_copy, 1.0);
  EXPECT_EQ(p.host.memory_sharing.copy_beside_cpu, 1.0);
  EXPECT_EQ(profile_to_json(p), j);
}

TEST(ProfileJson, AMemorySharingShareOutsideZeroToOneIsNamed) {
  nlohmann::json j = profile_to_json(sample_profile());
  j["host"]["memory_sharing"]["copy_beside_cpu_adamw"] = 1.2;
  EXPECT_NE(load_error(j).find("\"copy_beside_cpu_adamw\" = 1.2 must be in (0, 1]"), std::string::npos)
      << load_error(j);
  j = profile_to_json(sample_profile());
  j["host"]["memory_sharing"].erase("cpu_adamw_beside_duplex");
  EXPECT_NE(load_error(j).find("\"cpu_adamw_beside_duplex\" is missing"), std::string::npos) << load_error(j);
}

// Files written before the kernels were recorded (the committed H200 profiles among them) load,
// with the kernels unknown.
TEST(ProfileJson, AFileWithoutKernelsLoadsWithThemUnknown) {
  nlohmann::json j = profile_to_json(sample_profile());
  j.erase("kernels");
  EXPECT_EQ(profile_from_json(j, "old.json").kernels, "");
}

// Files from before the measuring method was recorded load as method 0 (which the profile cache
// measures again); a method that is not a count is refused.
TEST(ProfileJson, TheMeasuringMethodIsZeroWhereUnrecordedAndACountElsewhere) {
  nlohmann::json j = profile_to_json(sample_profile());
  j.erase("method");
  EXPECT_EQ(profile_from_json(j, "old.json").method, 0);
  for (const nlohmann::json& bad : {nlohmann::json(-1), nlohmann::json(1.5), nlohmann::json(4294967296)}) {
    j["method"] = bad;
    EXPECT_TRUE(test::throws_with([&] { profile_from_json(j, "h200.json"); }, {"h200.json: \"method\""}));
  }
  j["method"] = "2";
  EXPECT_NE(load_error(j).find("\"method\" is missing or not a number"), std::string::npos) << load_error(j);
  j["method"] = 6.0;  // whole, written as a float
  EXPECT_EQ(profile_from_json(j, "h200.json").method, 6);
}

// Numbers that become integers (counts, byte sizes) are whole and within what the integer holds:
// host.memory_bytes 1e299 was cast to "the 1 bytes host budget", method 4294967296 read as 0, and
// a version of 2^32 + 2 as 2.
TEST(ProfileJson, IntegersAreWholeAndInRange) {
  const auto refused = [](const std::function<void(nlohmann::json&)>& edit,
                          std::initializer_list<std::string> parts) {
    nlohmann::json j = profile_to_json(sample_profile());
    edit(j);
    return test::throws_with([&] { profile_from_json(j, "h200.json"); }, parts);
  };
  EXPECT_TRUE(
      refused([](nlohmann::json& j) { j["host"]["memory_bytes"] = 1e299; },
              {"h200.json: \"memory_bytes\" = 1e+299 must be a whole number from 1 to 4611686018427387904",
               "measure the profile again"}));
  EXPECT_TRUE(
      refused([](nlohmann::json& j) { j["host"]["memory_bytes"] = 1.5e9 + 0.5; }, {"\"memory_bytes\""}));
  EXPECT_TRUE(
      refused([](nlohmann::json& j) { j["device_memory_bytes"] = 1e20; }, {"\"device_memory_bytes\""}));
  EXPECT_TRUE(refused([](nlohmann::json& j) { j["method"] = 4294967296; },
                      {"\"method\" = 4294967296 must be a whole number from 0 to 2147483647"}));
  EXPECT_TRUE(refused([](nlohmann::json& j) { j["seq_len"] = 2048.5; }, {"\"seq_len\" = 2048.5"}));
  EXPECT_TRUE(refused([](nlohmann::json& j) { j["seq_len"] = 1e300 / 2; }, {"\"seq_len\""}));
  EXPECT_TRUE(refused([](nlohmann::json& j) { j["host"]["threads"] = 4294967312.0; }, {"\"threads\""}));
  EXPECT_TRUE(refused([](nlohmann::json& j) { j["compute"]["layer_tile_tokens"] = 1e19; },
                      {"\"layer_tile_tokens\""}));
  EXPECT_TRUE(
      refused([](nlohmann::json& j) { j["compute"]["layer_head_groups"] = 0.5; }, {"\"layer_head_groups\""}));
  EXPECT_TRUE(refused(
      [](nlohmann::json& j) {
        j["collective"] = {{"bus_bytes_per_s", 1e11}, {"latency_s", 1e-5}, {"devices", 4294967298.0}};
      },
      {"\"devices\" = 4294967298"}));
  EXPECT_TRUE(refused([](nlohmann::json& j) { j["version"] = 4294967298; }, {"format version"}));

  // Whole numbers written as floats (as profiles save byte sizes) load as they are.
  nlohmann::json j = profile_to_json(sample_profile());
  j["seq_len"] = 2048.0;
  j["host"]["threads"] = 16.0;
  j["host"]["memory_bytes"] = 4611686018427387904.0;
  const MachineProfile p = profile_from_json(j, "h200.json");
  EXPECT_EQ(p.seq_len, 2048);
  EXPECT_EQ(p.host.threads, 16);
  EXPECT_EQ(p.host.memory_bytes, 4611686018427387904.0);
}

TEST(ProfileJson, MissingFieldIsNamed) {
  nlohmann::json j = profile_to_json(sample_profile());
  j["compute"].erase("layer_forward");
  const std::string message = load_error(j);
  EXPECT_NE(message.find("h200.json"), std::string::npos) << message;
  EXPECT_NE(message.find("\"layer_forward\" is missing"), std::string::npos) << message;

  j = profile_to_json(sample_profile());
  j["transfer"].erase("latency_s");
  EXPECT_NE(load_error(j).find("\"latency_s\" is missing"), std::string::npos) << load_error(j);
}

TEST(ProfileJson, NegativeOrZeroRateIsNamed) {
  nlohmann::json j = profile_to_json(sample_profile());
  j["transfer"]["h2d_bytes_per_s"] = -55e9;
  EXPECT_NE(load_error(j).find("\"h2d_bytes_per_s\" = -55000000000 is not a finite non-negative number"),
            std::string::npos)
      << load_error(j);

  j = profile_to_json(sample_profile());
  j["host"]["cpu_adamw_params_per_s"] = 0.0;
  EXPECT_NE(load_error(j).find("\"cpu_adamw_params_per_s\" must be positive"), std::string::npos)
      << load_error(j);

  j = profile_to_json(sample_profile());
  j["compute"]["layer_forward"]["per_token_s"] = 0.0;
  EXPECT_NE(load_error(j).find("per_token_s > 0"), std::string::npos) << load_error(j);
}

TEST(ProfileJson, WrongVersionOrTypeIsRefused) {
  nlohmann::json j = profile_to_json(sample_profile());
  j["version"] = MachineProfile::kVersion + 1;
  EXPECT_NE(load_error(j).find("version"), std::string::npos) << load_error(j);
  // A version that is missing or not a whole number is no version: measured again, not read.
  j["version"] = "2";
  EXPECT_NE(load_error(j).find("format version"), std::string::npos) << load_error(j);
  j.erase("version");
  EXPECT_NE(load_error(j).find("format version"), std::string::npos) << load_error(j);

  j = profile_to_json(sample_profile());
  j["seq_len"] = "2048";
  EXPECT_NE(load_error(j).find("\"seq_len\" is missing or not a number"), std::string::npos) << load_error(j);

  j = profile_to_json(sample_profile());
  j["weight_dtype"] = "BF17";
  EXPECT_NE(load_error(j).find("weight_dtype"), std::string::npos) << load_error(j);
}

TEST(ProfileJson, FileThatIsNotJsonIsRefused) {
  test::ScratchDir dir("profile_json");
  { std::ofstream(dir / "bad.json") << "{\"version\": 1,"; }
  try {
    load_profile(dir / "bad.json");
    FAIL() << "expected ferry::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_profile(dir / "missing.json"), Error);
}

}  // namespace
}  // namespace ferry
