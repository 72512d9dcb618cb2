// A run whose documents reach positions past the model's max_position_embeddings is refused
// before it trains; packing's per-document positions let short documents fill long rows.
#include <gtest/gtest.h>

#include "test_util.h"
#include "tiny_run.h"
#include "train/model_init.h"
#include "train/trainer.h"

namespace ferry {
namespace {

class PositionsTest : public test::TinyRun {
 protected:
  // The tiny model again, knowing positions below `positions` only.
  std::filesystem::path model_with_positions(int64_t positions) {
    nlohmann::json json = preset_config("qwen3", "tiny").raw;
    json["max_position_embeddings"] = positions;
    const std::filesystem::path dir = scratch_ / ("model-" + std::to_string(positions));
    write_random_model(parse_model_config(json, "test"), 7, dir);
    return dir;
  }
};

TEST_F(PositionsTest, ADocumentPastTheModelsPositionsIsRefused) {
  // Documents of 5..40 tokens in rows of 48: positions up to 39.
  const std::string error =
      test::error_of([&] { run_training(config("short", {"model=" + model_with_positions(24).string()})); });
  EXPECT_TRUE(test::contains(error, "handles positions below 24 (max_position_embeddings in config.json)"))
      << error;
  EXPECT_TRUE(test::contains(error, "lower seq_len to 24")) << error;
  EXPECT_FALSE(std::filesystem::exists(scratch_ / "short" / "model.safetensors"));
  // Rows longer than the model's positions are fine while each document fits them.
  EXPECT_TRUE(run_training(config("fits", {"model=" + model_with_positions(40).string()})).finished);
}

}  // namespace
}  // namespace ferry
