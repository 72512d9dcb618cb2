// Bad config.json files (missing fields, wrong types, absurd sizes, deep nesting) and bad training
// configs (wrong types, keys given twice or under two names, sizes that are no size): each is a
// ferry::Error naming the file and the key, before anything is allocated or trained.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fault_inputs.h"
#include "model/model_config.h"
#include "test_util.h"
#include "tiny_model.h"
#include "train/train_config.h"

namespace ferry::faults {
namespace {

using nlohmann::json;
using test::ScratchDir;
using test::throws_with;

// ---- config.json ----

struct ConfigCase {
  const char* name;
  std::string text;                  // the file's content
  std::vector<std::string> message;  // parts the error must hold, besides the file's path
};

// The tiny config with `edit` applied (keys set; null values remove the key).
std::string edited(const json& edit) {
  json config = json::parse(tiny_config_json());
  for (const auto& [key, value] : edit.items()) {
    if (value.is_null()) {
      config.erase(key);
    } else {
      config[key] = value;
    }
  }
  return config.dump(1);
}

std::vector<ConfigCase> config_cases() {
  const std::string valid = tiny_config_json();
  return {
      {"empty", "", {"not valid JSON"}},
      {"truncated", valid.substr(0, valid.size() / 2), {"not valid JSON (parse error at line"}},
      {"a list", "[1, 2]", {"must be a JSON object, got [1, 2] (array)"}},
      {"nested 100,000 deep",
       nested_arrays(100000),
       {"nested deeper than 512 levels (at line 1, column 513)"}},
      {"a key nested deep", edited({{"rope_scaling", json::parse(nested_arrays(600))}}), {"nested deeper"}},
      {"no vocab_size", edited({{"vocab_size", nullptr}}), {"missing required key 'vocab_size'"}},
      {"no architecture",
       edited({{"architectures", nullptr}, {"model_type", nullptr}}),
       {"missing required key 'architectures'"}},
      {"vocab_size a string",
       edited({{"vocab_size", "320"}}),
       {"key 'vocab_size' must be an integer, got \"320\""}},
      {"vocab_size fractional", edited({{"vocab_size", 320.5}}), {"key 'vocab_size' must be an integer"}},
      {"vocab_size 1e7 as a float", edited({{"vocab_size", 1e7}}), {"key 'vocab_size' must be an integer"}},
      {"vocab_size negative", edited({{"vocab_size", -1}}), {"key 'vocab_size' must be positive"}},
      {"vocab_size past int64",
       R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 18446744073709551615})",
       {"key 'vocab_size' must be an integer"}},
      {"vocab_size absurd",
       edited({{"vocab_size", int64_t{1} << 40}}),
       {"key 'vocab_size' is 1099511627776, more than"}},
      {"a billion layers",
       edited({{"num_hidden_layers", 1000000000}}),
       {"key 'num_hidden_layers' is 1000000000, more than 4096"}},
      {"hidden_size absurd", edited({{"hidden_size", 1 << 30}}), {"key 'hidden_size'", "more than"}},
      {"head_dim absurd", edited({{"head_dim", 1 << 20}}), {"key 'head_dim'", "more than"}},
      {"too many parameters in all",
       edited({{"vocab_size", 1 << 24}, {"hidden_size", 1 << 17}, {"head_dim", 64}}),
       {"the sizes describe a model of about", "parameters, more than"}},
      {"heads that do not divide",
       edited({{"num_attention_heads", 4}, {"num_key_value_heads", 3}}),
       {"num_attention_heads (4) is not a multiple of num_key_value_heads (3)"}},
      {"hidden not a multiple of heads",
       edited({{"hidden_size", 66}, {"head_dim", nullptr}}),
       {"hidden_size (66) is not a multiple of num_attention_heads (4)"}},
      {"architectures not a list",
       edited({{"architectures", 5}}),
       {"key 'architectures' must be a list of names"}},
      {"architecture unknown",
       edited({{"architectures", {"GPT2LMHeadModel"}}, {"model_type", nullptr}}),
       {"architecture 'GPT2LMHeadModel' is not supported"}},
      {"rope_scaling a string",
       edited({{"rope_scaling", "linear"}}),
       {"key 'rope_scaling' must be an object or null"}},
      {"rms_norm_eps a string", edited({{"rms_norm_eps", "1e-5"}}), {"key 'rms_norm_eps' must be a number"}},
      {"tie_word_embeddings a string",
       edited({{"tie_word_embeddings", "yes"}}),
       {"key 'tie_word_embeddings' must be true or false"}},
      {"torch_dtype unknown", edited({{"torch_dtype", "float8"}}), {"torch_dtype 'float8' is not supported"}},
  };
}

TEST(CorruptModelConfig, EachIsAnErrorNamingTheFileAndKey) {
  ScratchDir dir("faults-config");
  const std::filesystem::path path = dir / "config.json";
  for (const ConfigCase& c : config_cases()) {
    SCOPED_TRACE(c.name);
    write_bytes(path, c.text);
    std::vector<std::string> parts = {"[config] " + path.string() + ": "};
    parts.insert(parts.end(), c.message.begin(), c.message.end());
    try {
      load_model_config(dir.path());
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      for (const std::string& part : parts)
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_LT(std::string(e.what()).size(), 600u) << e.what();
    }
  }
  write_bytes(path, tiny_config_json());
  EXPECT_EQ(load_model_config(dir.path()).vocab_size, 320);
}

// ---- the training config (YAML and key=value overrides) ----

struct YamlCase {
  const char* name;
  std::string yaml;
  std::vector<std::string> overrides;
  std::vector<std::string> message;
};

std::vector<YamlCase> yaml_cases() {
  return {
      {"not YAML", "seq_len: [1, 2\n", {}, {"train.yaml: not valid YAML"}},
      {"not a mapping", "- a\n- b\n", {}, {"train.yaml: the config must be a mapping"}},
      {"a key that is a list", "[a, b]: 1\n", {}, {"train.yaml:1: a key must be a name"}},
      {"unknown key", "seq_len: 64\nlearning_rat: 1e-4\n", {}, {"train.yaml:2: unknown key 'learning_rat'"}},
      {"a misspelt key",
       "seq_len: 64\nlearnig_rate: 1e-4\n",
       {},
       {"train.yaml:2: unknown key 'learnig_rate'; did you mean 'learning_rate'?"}},
      {"a key like no other",
       "zzzzzzzz: 1\n",
       {},
       {"unknown key 'zzzzzzzz'; the keys are: ", "weight_decay"}},
      {"a misspelt key on the command line",
       "",
       {"max_step=5"},
       {"command line: unknown key 'max_step'; did you mean 'max_steps'?"}},
      {"an unknown device",
       "device: tpu\n",
       {},
       {"train.yaml:1: 'device' must be one of auto, cpu, sim, cuda; got 'tpu'"}},
      {"an unknown save dtype",
       "save_dtype: int8\n",
       {},
       {"'save_dtype' must be one of auto, float32, bfloat16, float16; got 'int8'"}},
      {"an unknown data format",
       "data_format: csv\n",
       {},
       {"train.yaml:1: 'data_format' must be one of auto, ", "got 'csv'"}},
      {"an unknown recompute policy",
       "recompute: some\n",
       {},
       {"'recompute' must be one of auto, all; got 'some'"}},
      {"an integer that is text",
       "seq_len: abc\n",
       {},
       {"train.yaml:1: 'seq_len' must be an integer, got 'abc'"}},
      {"an integer past int64",
       "seq_len: 1e30\n",
       {},
       {"train.yaml:1: 'seq_len' must be an integer, got '1e30'"}},
      {"a number that is a list",
       "learning_rate: [1]\n",
       {},
       {"train.yaml:1: 'learning_rate' must be a number"}},
      {"a boolean that is text", "packing: maybe\n", {}, {"'packing' must be true or false, got 'maybe'"}},
      {"a string that is a mapping", "device: {a: 1}\n", {}, {"'device' must be a string"}},
      {"a key twice",
       "max_steps: 10\nseq_len: 64\nmax_steps: 20\n",
       {},
       {"'max_steps' is given twice (line 1 and line 3)"}},
      {"a key and its alias",
       "learning_rate: 1e-4\nseq_len: 64\nlr: 5.0\n",
       {},
       {"'learning_rate' (line 1) and 'lr' (line 3) both set learning_rate"}},
      {"two aliases",
       "cutoff_len: 64\nmax_seq_len: 128\n",
       {},
       {"'cutoff_len' (line 1) and 'max_seq_len' (line 2)"}},
      {"a size with two points",
       "gpu_memory: 1.5.5GiB\n",
       {},
       {"'gpu_memory' must be a size", "got '1.5.5GiB'"}},
      {"a size in exponent form", "host_memory: 1e3GiB\n", {}, {"unknown size unit 'e3GiB' in '1e3GiB'"}},
      {"a size of zero",
       "host_memory: 0\n",
       {},
       {"'host_memory' is 0, which is no size", "leave 'host_memory' out"}},
      {"a size under a byte", "gpu_memory: 0.4B\n", {}, {"'gpu_memory' is 0.4B, which is no size"}},
      {"a size past 2^63",
       "host_memory: 100000000000GiB\n",
       {},
       {"'host_memory' is 100000000000GiB, more bytes"}},
      {"a negative size", "gpu_memory: -24GiB\n", {}, {"'gpu_memory' must be a size"}},
      {"an unknown unit", "gpu_memory: 24GB!\n", {}, {"unknown size unit 'GB!'"}},
      {"no shard size", "max_shard_size: 0\n", {}, {"train.yaml:1: 'max_shard_size' is 0, which is no size"}},
      {"a shard size past 2^63",
       "max_shard_size: 9999999999TB\n",
       {},
       {"'max_shard_size' is 9999999999TB, more bytes"}},
      {"100,000 threads",
       "threads: 100000\n",
       {},
       {"threads must be between 0 (one per core) and 4096", "100000"}},
      {"an infinite learning rate", "learning_rate: .inf\n", {}, {"learning_rate must be a finite number"}},
      {"infinite epochs", "epochs: .inf\n", {}, {"epochs must be a number of passes over the data"}},
      {"a negative seed", "seed: -1\n", {}, {"'seed' must be a non-negative integer"}},
      {"data nested 100,000 deep", "data: " + std::string(100000, '[') + "\n", {}, {"train.yaml"}},
  };
}

TEST(CorruptTrainConfig, EachIsAnErrorNamingTheKeyAndLine) {
  for (const YamlCase& c : yaml_cases()) {
    SCOPED_TRACE(c.name);
    std::vector<std::string> parts = {"[config] "};
    parts.insert(parts.end(), c.message.begin(), c.message.end());
    try {
      parse_train_config(c.yaml, c.overrides, "train.yaml");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      for (const std::string& part : parts)
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  }
}

TEST(CorruptTrainConfig, TheValidSeedParsesAndOverridesStillWin) {
  const TrainConfig c = parse_train_config(train_config_yaml(),
                                           {"lr=1e-5", "learning_rate=3e-5", "max_steps=20"}, "train.yaml");
  EXPECT_EQ(c.learning_rate,
            3e-5);  // the command line overrides the file, and a later override an earlier one
  EXPECT_EQ(c.max_steps, 20);
  EXPECT_EQ(c.max_shard_bytes, 5000000000);
  EXPECT_EQ(parse_byte_size("1.5GiB", "x"), int64_t{3} << 29);
  EXPECT_EQ(parse_byte_size("512 MiB", "x"), int64_t{512} << 20);
  EXPECT_EQ(parse_byte_size(".5KiB", "x"), 512);
}

}  // namespace
}  // namespace ferry::faults
