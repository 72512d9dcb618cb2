// What a run reports besides its log: TensorBoard event files (read back here record by record,
// with their checksums, as TensorBoard reads them) and report.html (opened in a real headless
// browser, whose layout must give every curve a length).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tiny_run.h"
#include "train/metrics_log.h"
#include "train/run_report.h"
#include "train/tensorboard_log.h"
#include "train/trainer.h"

namespace ferry {
namespace {

// The scalars of one event: step -> tag -> value.
using Scalars = std::map<int64_t, std::map<std::string, float>>;

uint64_t read_varint(const std::string& s, size_t& i) {
  uint64_t v = 0;
  for (int shift = 0; i < s.size(); shift += 7) {
    const auto b = static_cast<unsigned char>(s[i++]);
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) break;
  }
  return v;
}

// Fields of a protocol buffer message: field number -> its raw values (length-delimited bytes,
// varints as decimal text, fixed32/64 as their bytes).
std::multimap<uint32_t, std::string> fields(const std::string& message) {
  std::multimap<uint32_t, std::string> out;
  size_t i = 0;
  while (i < message.size()) {
    const uint64_t key = read_varint(message, i);
    const auto field = static_cast<uint32_t>(key >> 3);
    switch (key & 7) {
      case 0:
        out.emplace(field, std::to_string(read_varint(message, i)));
        break;
      case 1:
        out.emplace(field, message.substr(i, 8)), i += 8;
        break;
      case 2: {
        const uint64_t n = read_varint(message, i);
        out.emplace(field, message.substr(i, n));
        i += n;
        break;
      }
      case 5:
        out.emplace(field, message.substr(i, 4)), i += 4;
        break;
      default:
        ADD_FAILURE() << "wire type " << (key & 7);
        return out;
    }
  }
  return out;
}

// Reads an event file as TensorBoard does, checking both checksums of every record.
Scalars read_events(const std::filesystem::path& file, std::string* version) {
  const std::string bytes = test::read_file(file);
  Scalars scalars;
  size_t i = 0;
  while (i < bytes.size()) {
    EXPECT_LE(i + 12, bytes.size());
    uint64_t length;
    uint32_t length_crc, data_crc;
    std::memcpy(&length, bytes.data() + i, 8);
    std::memcpy(&length_crc, bytes.data() + i + 8, 4);
    EXPECT_EQ(length_crc, masked_crc32c(std::string_view(bytes.data() + i, 8)));
    const std::string data = bytes.substr(i + 12, length);
    std::memcpy(&data_crc, bytes.data() + i + 12 + length, 4);
    EXPECT_EQ(data_crc, masked_crc32c(data));
    i += 12 + length + 4;
    const auto event = fields(data);
    if (event.count(3)) *version = event.find(3)->second;
    if (!event.count(5)) continue;
    const int64_t step = std::stoll(event.find(2)->second);
    for (const auto& [f, value] : fields(event.find(5)->second)) {
      const auto v = fields(value);
      float x;
      std::memcpy(&x, v.find(2)->second.data(), 4);
      scalars[step][v.find(1)->second] = x;
    }
  }
  return scalars;
}

TEST(TensorBoardLog, Crc32cIsCastagnolis) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);  // the check value of CRC-32C
  EXPECT_EQ(crc32c(""), 0u);
}

class RunReportTest : public test::TinyRun {};

TEST_F(RunReportTest, TensorBoardGetsEveryStepAndEvaluation) {
  const TrainSummary summary =
      run_training(config("tb", {"report_to=tensorboard", "val_split=0.1", "eval_steps=3"}));
  ASSERT_TRUE(summary.finished);
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(scratch_ / "tb" / "runs"))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  std::string version;
  const Scalars scalars = read_events(files[0], &version);
  EXPECT_EQ(version, "brain.Event:2");
  ASSERT_EQ(scalars.size(), 6u);
  for (int64_t s = 1; s <= 6; ++s) {
    const auto& at = scalars.at(s);
    EXPECT_EQ(at.at("train/loss"), static_cast<float>(summary.steps[static_cast<size_t>(s - 1)].loss));
    EXPECT_EQ(at.at("train/learning_rate"), static_cast<float>(summary.steps[static_cast<size_t>(s - 1)].lr));
    EXPECT_TRUE(at.count("train/grad_norm") && at.count("train/tokens_per_second"));
    EXPECT_EQ(at.count("eval/loss"), s % 3 == 0 ? 1u : 0u) << "step " << s;
  }
  EXPECT_EQ(scalars.at(6).at("eval/loss"), static_cast<float>(summary.evals.back().loss));
}

// metrics.jsonl as a run that was stopped or edited may leave it: lines that are not JSON objects,
// and keys of another type, are passed over; every well-formed point is drawn.
TEST(RunReport, PassesOverDamagedMetricsLines) {
  test::ScratchDir dir("report-damaged");
  {
    std::ofstream out(dir / kMetricsFile);
    out << R"({"step": 1, "loss": 2.0, "tokens": 100, "seconds": 1.0}
{"step": 2, "loss": 1.5, "tokens": "many", "seconds": 1.0}
{"step": "3", "loss": 9.0}
[1, 2]
{"step": 5, "loss": 1.0, "tok
{"step": 4, "loss": 1.25, "lr": "high", "tokens": 100, "seconds": 0.5}
)";
  }
  ASSERT_NO_THROW(write_run_report(dir.path(), "damaged", {}));
  const std::string html = test::read_file(dir / kRunReport);
  auto chart_of = [&](const std::string& title) {
    const size_t at = html.find("aria-label=\"" + title + "\"");
    EXPECT_NE(at, std::string::npos) << title;
    return html.substr(at, html.find("</svg>", at) - at);
  };
  auto points_in = [](const std::string& chart) {  // of its first curve
    const size_t from = chart.find("points=\"") + 8;
    const std::string list = chart.substr(from, chart.find('"', from) - from);
    return std::count(list.begin(), list.end(), ',');
  };
  const std::string loss = chart_of("loss"), speed = chart_of("throughput");
  // Loss at steps 1, 2 and 4 (2, 1.5, 1.25); step "3" is not a number, step 5's line is cut short.
  EXPECT_EQ(points_in(loss), 3) << loss;
  EXPECT_NE(loss.find(">2</text>"), std::string::npos) << loss;
  EXPECT_NE(loss.find(">1.25</text>"), std::string::npos) << loss;
  EXPECT_NE(loss.find("step 1"), std::string::npos) << loss;
  EXPECT_NE(loss.find(">4</text>"), std::string::npos) << loss;
  // Tokens/s at steps 1 and 4 only (100 and 200); step 2's tokens are not a number.
  EXPECT_EQ(points_in(speed), 2) << speed;
  EXPECT_NE(speed.find(">200</text>"), std::string::npos) << speed;
  EXPECT_NE(speed.find(">100</text>"), std::string::npos) << speed;
  EXPECT_NE(chart_of("learning rate").find("no data"), std::string::npos);
}

// A headless Chromium where one is installed (Debian's `chromium`, which `make test` installs).
std::string find_browser() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    std::string out;
    if (test::run_command(std::string("command -v ") + name, &out) == 0 && !out.empty()) return name;
  }
  return "";
}

TEST_F(RunReportTest, TheReportIsOnePageEveryBrowserCurveOfWhichHasALength) {
  ASSERT_TRUE(run_training(config("report", {"val_split=0.1", "eval_steps=2"})).finished);
  const std::filesystem::path page = scratch_ / "report" / kRunReport;
  const std::string html = test::read_file(page);
  EXPECT_NE(html.find("evaluation loss"), std::string::npos);
  EXPECT_EQ(html.find("src=\""), std::string::npos) << "nothing loaded from beside the page";
  EXPECT_EQ(html.find("href=\""), std::string::npos);
  const std::string browser = find_browser();
  if (browser.empty()) GTEST_SKIP() << "no chromium to open the report in (apt install chromium)";
  std::string dom;
  const int status =
      test::run_command("timeout 120 " + browser +
                            " --headless --no-sandbox --disable-gpu --virtual-time-budget=5000 "
                            "--dump-dom file://" +
                            page.string() + " 2>/dev/null",
                        &dom);
  ASSERT_EQ(status, 0) << dom;
  EXPECT_NE(dom.find("data-check=\"ok 4 charts\""), std::string::npos) << dom.substr(0, 400);
}

}  // namespace
}  // namespace ferry
