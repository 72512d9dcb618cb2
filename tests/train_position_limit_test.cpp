// seq_len against max_position_embeddings (train/position_limit.h), checked before data is read or
// a plan is searched, with the config.json edit that would allow it in the message.
#include <gtest/gtest.h>

#include "core/error.h"
#include "train/model_init.h"
#include "train/position_limit.h"

namespace ferry {
namespace {

std::string refusal(const ModelConfig& model, int64_t seq_len) {
  try {
    check_seq_len_positions(model, seq_len);
  } catch (const Error& e) {
    return e.what();
  }
  return std::string();
}

TEST(PositionLimit, Llama31At256KNamesTheLlama3FactorThatReachesIt) {
  const ModelConfig model = preset_config("llama", "llama-3.1-8b");
  ASSERT_EQ(model.max_position_embeddings, 131072);
  EXPECT_NO_THROW(check_seq_len_positions(model, 131072));
  const std::string text = refusal(model, 262144);
  EXPECT_NE(text.find("seq_len 262144 is longer than the 131072 positions"), std::string::npos) << text;
  EXPECT_NE(text.find("set seq_len to at most 131072"), std::string::npos) << text;
  // Llama 3.1 was trained on 8192 positions and stretched by llama3 scaling: a factor of 32 reaches 256K.
  EXPECT_NE(text.find("\"max_position_embeddings\": 262144"), std::string::npos) << text;
  EXPECT_NE(text.find("\"rope_type\": \"llama3\", \"factor\": 32"), std::string::npos) << text;
}

TEST(PositionLimit, AnUnscaledModelIsToldOfYarn) {
  ModelConfig model = preset_config("llama", "tiny");
  model.max_position_embeddings = 2048;
  EXPECT_NO_THROW(check_seq_len_positions(model, 2048));
  const std::string text = refusal(model, 5000);
  EXPECT_NE(text.find("\"max_position_embeddings\": 6144"), std::string::npos) << text;
  EXPECT_NE(text.find("\"rope_type\": \"yarn\", \"factor\": 3, \"original_max_position_embeddings\": 2048"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace ferry
