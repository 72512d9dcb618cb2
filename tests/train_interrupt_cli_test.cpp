// `ferry train` stopped by a signal, as a preemptible cloud or a Slurm time limit stops it: the
// first SIGTERM ends the run after the current step with a complete checkpoint, a printed resume
// command and exit status 143; that command continues to the same final weights, bit for bit, as
// a run never interrupted. A second signal exits at once.
//
// No sleeps: the test reads ferry's log from a pipe, waits for a step line (with a generous
// timeout), and signals then. The pipe is made as small as the kernel allows (4 KiB: about 45 step
// lines of 90 bytes) and ferry blocks on a full pipe, so however fast the steps are, the signal
// lands before the run has written more than a pipe's worth of lines; the run is longer than that.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/completion_marker.h"
#include "tiny_run.h"
#include "train/checkpoint.h"

extern char** environ;

namespace ferry {
namespace {

namespace fs = std::filesystem;
using test::metric_steps;
using Clock = std::chrono::steady_clock;
constexpr auto kPatience = std::chrono::seconds(120);

// ferry with its stdout and stderr on a small pipe that the test reads.
class FerryProcess {
 public:
  explicit FerryProcess(const std::vector<std::string>& args) {
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0);
    fcntl(fds[1], F_SETPIPE_SZ, 4096);  // rounded up to a page
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
    std::vector<std::string> all = {test::ferry_binary().string()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    fd_ = fds[0];
  }
  ~FerryProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(fd_);
  }

  // Reads until a complete line contains `text`; false at end of output or after kPatience.
  bool wait_for_line(const std::string& text) {
    const auto deadline = Clock::now() + kPatience;
    size_t line_start = output_.rfind('\n') == std::string::npos ? 0 : output_.rfind('\n') + 1;
    while (Clock::now() < deadline) {
      if (!read_byte(deadline)) return false;
      if (output_.back() != '\n') continue;
      if (output_.find(text, line_start) != std::string::npos) return true;
      line_start = output_.size();
    }
    return false;
  }

  void signal(int sig) const { kill(pid_, sig); }

  // Reads the rest of the output and returns the exit status (-1: killed by a signal or hung).
  int finish() {
    const auto deadline = Clock::now() + kPatience;
    while (Clock::now() < deadline && read_byte(deadline)) {
    }
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  const std::string& output() const { return output_; }

 private:
  bool read_byte(Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd_, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) return false;
    char c;
    if (read(fd_, &c, 1) != 1) return false;
    output_ += c;
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string output_;
};

// Steps enough that a run cannot finish while its log lines fill the pipe: one line per step of at
// least 64 bytes, and a margin.
int64_t steps_beyond_a_pipe() {
  int fds[2];
  if (pipe(fds) != 0) return 1000;
  const int capacity = fcntl(fds[1], F_SETPIPE_SZ, 4096);
  close(fds[0]);
  close(fds[1]);
  return capacity > 0 ? capacity / 64 + 16 : 1000;
}

class InterruptTest : public test::TinyRun {
 protected:
  void SetUp() override {
    TinyRun::SetUp();
    // A space in the path: the printed resume command must quote it.
    config_ = scratch_ / "my run" / "train.yaml";
    fs::create_directories(config_.parent_path());
    std::ofstream(config_) << "model: " << model_dir_.string() << "\ndata: " << data_.string()
                           << "\noutput_dir: out\nseq_len: 32\nglobal_batch: 2\nmicro_batch: 1\nmax_steps: "
                           << steps_ << "\n"
                           << "learning_rate: 1.0e-3\nwarmup_steps: 2\nsave_dtype: float32\ndevice: cpu\n"
                           << "threads: 1\n";
  }
  const int64_t steps_ = steps_beyond_a_pipe();
  fs::path config_;
};

TEST_F(InterruptTest, SigtermSavesACheckpointAndTheResumeCommandFinishesBitIdentical) {
  const fs::path reference = scratch_ / "reference";
  std::string output;
  ASSERT_EQ(test::run_command(test::ferry_binary().string() + " train '" + config_.string() +
                                  "' output_dir=" + reference.string(),
                              &output),
            0)
      << output;

  FerryProcess run({"train", config_.string(), "logging_steps=1"});
  ASSERT_TRUE(run.wait_for_line("step 1/" + std::to_string(steps_))) << run.output();
  run.signal(SIGTERM);
  EXPECT_EQ(run.finish(), 128 + SIGTERM) << run.output();

  const fs::path out = config_.parent_path() / "out";
  const auto checkpoint = find_latest_checkpoint(out);
  ASSERT_TRUE(checkpoint.has_value()) << run.output();
  const nlohmann::json state = nlohmann::json::parse(test::read_file(*checkpoint / "trainer_state.json"));
  const int64_t stopped_at = state.at("step");
  EXPECT_GE(stopped_at, 1);
  EXPECT_LT(stopped_at, steps_);
  EXPECT_EQ(*checkpoint, out / ("checkpoint-" + std::to_string(stopped_at)));
  EXPECT_FALSE(is_marked_complete(out)) << "a stopped run has no final model";
  EXPECT_EQ(metric_steps(out / "metrics.jsonl").size(), static_cast<size_t>(stopped_at));

  const std::string marker = "to resume: ";
  const size_t at = run.output().find(marker);
  ASSERT_NE(at, std::string::npos) << run.output();
  std::string command = run.output().substr(at + marker.size());
  command = command.substr(0, command.find('\n'));
  EXPECT_EQ(command, "ferry train '" + config_.string() + "' logging_steps=1 resume=true");
  ASSERT_EQ(command.rfind("ferry ", 0), 0u) << command;
  ASSERT_EQ(test::run_command(test::ferry_binary().string() + command.substr(5), &output), 0) << output;

  EXPECT_TRUE(test::read_file(out / "model.safetensors") == test::read_file(reference / "model.safetensors"))
      << "the weights differ";
  std::vector<int64_t> all(static_cast<size_t>(steps_));
  for (int64_t i = 0; i < steps_; ++i) all[static_cast<size_t>(i)] = i + 1;
  EXPECT_EQ(metric_steps(out / "metrics.jsonl"), all);
  EXPECT_TRUE(is_marked_complete(out));
}

// Two signals pending at once (the process is stopped while they arrive): the second exits at
// once with 128 + its number, before any checkpoint or resume message.
TEST_F(InterruptTest, ASecondSignalExitsAtOnce) {
  FerryProcess run({"train", config_.string()});
  ASSERT_TRUE(run.wait_for_line("step 1/" + std::to_string(steps_))) << run.output();
  run.signal(SIGSTOP);
  run.signal(SIGINT);
  run.signal(SIGTERM);
  run.signal(SIGCONT);
  const int status = run.finish();
  EXPECT_TRUE(status == 128 + SIGINT || status == 128 + SIGTERM) << status << "\n" << run.output();
  EXPECT_NE(run.output().find("second signal: exiting at once"), std::string::npos) << run.output();
  EXPECT_EQ(run.output().find("to resume:"), std::string::npos) << run.output();
}

}  // namespace
}  // namespace ferry
