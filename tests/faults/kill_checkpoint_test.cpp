// kill -9 while a checkpoint is written, then `resume=true`: the run ends with the weights an
// uninterrupted run writes, bit for bit (issue 17, item 5), and no directory marked complete lacks
// a file.
//
// Where the kill lands. The test watches the output directory with inotify, and each checkpoint
// directory from its creation on (a watch follows its directory through the rename into place and
// the pruning that deletes it later). A save of step K is then a list of file-system events: its
// temporary directory created, each file created, closed and renamed inside it, the rename into
// place, the oldest checkpoint's marker and files deleted. A trial picks a step and one of these
// events from a fixed seed and sends SIGKILL when it reads that event. The writer runs on while
// the watcher reads, so the exact instant varies from run to run; what the test asserts holds
// wherever it lands, and the trials spread over the phases of a save by the seed, not by timing.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <tuple>

#include "io/safetensors.h"
#include "test_util.h"

extern char** environ;

namespace ferry {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSteps = 4;
constexpr int kTrials = 32;
constexpr uint64_t kSeed = 20261201;
// Only a guard against a hung child: no assertion depends on how long anything takes.
constexpr auto kHangGuard = std::chrono::seconds(120);

// `ferry ARGS...` with its stdout and stderr in `log`. Returns its pid.
pid_t spawn_ferry(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<std::string> argv_strings = {test::ferry_binary().string()};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int err = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(err, 0) << "cannot start " << argv[0];
  return err == 0 ? pid : -1;
}

// waitpid's status of `pid` once it has ended.
int wait_status(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// The events of an output directory and of the checkpoint directories created in it.
class OutputDirEvents {
 public:
  struct Event {
    std::string dir;   // "" for the output directory, else the checkpoint directory's name at creation
    std::string name;  // the entry's name inside `dir`
    uint32_t mask = 0;
  };

  explicit OutputDirEvents(const fs::path& output_dir) : output_dir_(output_dir) {
    fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    EXPECT_GE(fd_, 0) << "inotify_init1: " << std::strerror(errno);
    watch("", output_dir);
  }
  ~OutputDirEvents() {
    if (fd_ >= 0) ::close(fd_);
  }
  OutputDirEvents(const OutputDirEvents&) = delete;
  OutputDirEvents& operator=(const OutputDirEvents&) = delete;
  bool watching() const { return fd_ >= 0 && !dirs_.empty(); }

  // The events that arrived within `timeout_ms` (none when nothing happened).
  std::vector<Event> read(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return {};
    alignas(inotify_event) char buffer[64 * 1024];
    const ssize_t n = ::read(fd_, buffer, sizeof(buffer));
    std::vector<Event> events;
    for (ssize_t at = 0; at < n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buffer + at);
      at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
      EXPECT_FALSE(e->mask & IN_Q_OVERFLOW) << "inotify dropped events";
      if (e->len == 0) continue;  // IN_IGNORED and other events of the watched directory itself
      const auto dir = dirs_.find(e->wd);
      if (dir == dirs_.end()) continue;
      Event event{dir->second, e->name, e->mask};
      if (event.dir.empty() && (e->mask & IN_CREATE) && (e->mask & IN_ISDIR) &&
          event.name.rfind("checkpoint-", 0) == 0)
        watch(event.name, output_dir_ / event.name);
      events.push_back(std::move(event));
    }
    return events;
  }

 private:
  void watch(const std::string& name, const fs::path& dir) {
    // A directory already gone (a save that failed) has no events to give.
    const int wd = ::inotify_add_watch(fd_, dir.c_str(),
                                       IN_CREATE | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE);
    if (wd >= 0) dirs_[wd] = name;
  }

  fs::path output_dir_;
  int fd_ = -1;
  std::map<int, std::string> dirs_;
};

// "checkpoint-3.tmp/COMPLETE.tmp closed", for the report of where the kills landed.
std::string describe(const OutputDirEvents::Event& e) {
  const char* what = (e.mask & IN_CREATE)        ? "created"
                     : (e.mask & IN_CLOSE_WRITE) ? "closed"
                     : (e.mask & IN_MOVED_FROM)  ? "renamed from"
                     : (e.mask & IN_MOVED_TO)    ? "renamed to"
                                                 : "deleted";
  return (e.dir.empty() ? "" : e.dir + "/") + e.name + " " + what;
}

// Follows the saves of a run through its output directory's events. A save of step K begins when
// checkpoint-K.tmp is created and ends when the output directory sees anything else created (the
// next save, or the final model's files).
class SaveTracker {
 public:
  // Takes one event; returns the step whose save it belongs to, or 0 for an event outside saves.
  int64_t take(const OutputDirEvents::Event& e) {
    if (e.dir.empty() && (e.mask & IN_CREATE)) {
      saving_ = 0;
      const std::string prefix = "checkpoint-", suffix = ".tmp";
      if (e.name.rfind(prefix, 0) == 0 && e.name.size() > prefix.size() + suffix.size() &&
          e.name.compare(e.name.size() - suffix.size(), suffix.size(), suffix) == 0)
        saving_ = std::stoll(e.name.substr(prefix.size(), e.name.size() - prefix.size() - suffix.size()));
    }
    return saving_;
  }

 private:
  int64_t saving_ = 0;
};

// Every checkpoint directory marked complete holds a whole checkpoint: the weights and the
// optimizer state readable, the trainer state parseable.
void expect_complete_checkpoints_are_whole(const fs::path& output_dir, const std::string& trial) {
  for (const auto& entry : fs::directory_iterator(output_dir)) {
    const fs::path dir = entry.path();
    if (!entry.is_directory() || !fs::exists(dir / "COMPLETE")) continue;
    for (const char* file : {"model.safetensors", "optimizer.safetensors"})
      EXPECT_NO_THROW(SafetensorsFile::open(dir / file))
          << trial << ": " << dir.string() << " is marked complete";
    EXPECT_TRUE(fs::exists(dir / "config.json")) << trial << ": " << dir.string();
    EXPECT_NO_THROW(std::ignore = nlohmann::json::parse(test::read_file(dir / "trainer_state.json")))
        << trial << ": " << dir.string();
  }
}

class KillDuringCheckpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(fs::exists(test::ferry_binary())) << "build the ferry target first";
    scratch_ = new test::ScratchDir("kill_checkpoint");
    const fs::path& dir = scratch_->path();
    std::string out;
    ASSERT_EQ(
        test::run_command(test::ferry_binary().string() + " init --arch llama --preset tiny --seed 3 --out " +
                              (dir / "model").string(),
                          &out),
        0)
        << out;
    test::write_token_data(dir / "train.jsonl", 64, 320, 17);
    // A save every step, and the oldest checkpoint pruned from the third on: each phase of a save
    // (writing, renaming into place, pruning) is a moment a trial can pick.
    std::ofstream(dir / "train.yaml") << "model: " << (dir / "model").string() << "\n"
                                      << "data: " << (dir / "train.jsonl").string() << "\n"
                                      << "device: cpu\n"
                                         "threads: 1\n"
                                         "seq_len: 32\n"
                                         "global_batch: 2\n"
                                         "max_steps: "
                                      << kSteps
                                      << "\n"
                                         "learning_rate: 1e-3\n"
                                         "warmup_steps: 1\n"
                                         "max_grad_norm: 1.0\n"
                                         "save_steps: 1\n"
                                         "save_total_limit: 2\n";
  }
  static void TearDownTestSuite() {
    delete scratch_;
    scratch_ = nullptr;
  }

  static fs::path config_path() { return scratch_->path() / "train.yaml"; }

  // Runs `ferry train` into `out` to its end, with `resume=true` when asked; its exit status.
  static int train(const fs::path& out, bool resume) {
    std::vector<std::string> args = {"train", config_path().string(), "output_dir=" + out.string()};
    if (resume) args.push_back("resume=true");
    const pid_t pid = spawn_ferry(args, out.string() + (resume ? ".resume.log" : ".log"));
    if (pid < 0) return -1;
    const int status = wait_status(pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // Runs `ferry train` into the empty directory `out` while watching it, and kills it with SIGKILL
  // at the first event for which `kill_now` is true. Returns waitpid's status.
  static int train_watched(const fs::path& out,
                           const std::function<bool(const OutputDirEvents::Event&)>& kill_now) {
    fs::create_directories(out);
    OutputDirEvents events(out);
    if (!events.watching()) return -1;  // a run nobody watches would never be killed
    const pid_t pid =
        spawn_ferry({"train", config_path().string(), "output_dir=" + out.string()}, out.string() + ".log");
    if (pid < 0) return -1;
    const auto start = std::chrono::steady_clock::now();
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      bool kill = std::chrono::steady_clock::now() - start > kHangGuard;
      EXPECT_FALSE(kill) << out.string() << ": the run hangs";
      for (const auto& e : events.read(50)) {
        if (kill) break;
        kill = kill_now(e);
      }
      if (kill) {
        ::kill(pid, SIGKILL);
        return wait_status(pid);
      }
    }
    for (const auto& e : events.read(0)) kill_now(e);
    return status;
  }

  static test::ScratchDir* scratch_;
};

test::ScratchDir* KillDuringCheckpoint::scratch_ = nullptr;

TEST_F(KillDuringCheckpoint, ResumeAfterKillNineWritesTheUninterruptedWeights) {
  const fs::path& dir = scratch_->path();

  // The uninterrupted run, watched as a trial is: its final weights, and how many events each
  // save makes.
  std::map<int64_t, int> save_events;
  SaveTracker reference_saves;
  const int reference_status = train_watched(dir / "reference", [&](const OutputDirEvents::Event& e) {
    if (const int64_t step = reference_saves.take(e)) ++save_events[step];
    return false;
  });
  ASSERT_TRUE(WIFEXITED(reference_status) && WEXITSTATUS(reference_status) == 0)
      << test::read_file(dir / "reference.log");
  const std::string expected = test::read_file(dir / "reference" / "model.safetensors");
  ASSERT_FALSE(expected.empty());
  ASSERT_EQ(save_events.size(), static_cast<size_t>(kSteps)) << "one save per step";

  std::mt19937_64 rng(kSeed);
  int killed_with_temporary_dir = 0, ended_before_the_kill = 0;
  std::map<std::string, int> landed;  // the event each kill followed: "checkpoint-3.tmp/COMPLETE.tmp created"
  for (int t = 0; t < kTrials; ++t) {
    const int64_t step = 1 + t % kSteps;
    const int kill_at = static_cast<int>(rng() % static_cast<uint64_t>(save_events[step]));
    const std::string trial = "trial " + std::to_string(t) + " (event " + std::to_string(kill_at) +
                              " of the save of step " + std::to_string(step) + ")";
    const fs::path out = dir / ("trial-" + std::to_string(t));

    SaveTracker saves;
    int seen = 0;
    const int status = train_watched(out, [&](const OutputDirEvents::Event& e) {
      const int64_t saving = saves.take(e);
      // The chosen event, or the first one after the save when the save made fewer events than
      // the reference's (its first files were written before their watch was added).
      const bool now = saving == step ? seen++ == kill_at : seen > 0;
      if (now) ++landed[describe(e)];
      return now;
    });
    // A kill that follows the last save's final event may find the run already ended: a moment
    // like any other, after which resume has nothing left to do.
    const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    ASSERT_TRUE(killed || (WIFEXITED(status) && WEXITSTATUS(status) == 0))
        << trial << "\n"
        << test::read_file(out.string() + ".log");
    ended_before_the_kill += !killed;
    for (const auto& entry : fs::directory_iterator(out))
      killed_with_temporary_dir += entry.is_directory() && entry.path().extension() == ".tmp";
    expect_complete_checkpoints_are_whole(out, trial);

    ASSERT_EQ(train(out, /*resume=*/true), 0) << trial << "\n"
                                              << test::read_file(out.string() + ".resume.log");
    EXPECT_TRUE(test::read_file(out / "model.safetensors") == expected)
        << trial << ": the resumed run's weights differ from the uninterrupted run's";
    fs::remove_all(out);
  }
  // Where the kills landed depends on the machine's timing: reported, not asserted.
  std::string where;
  for (const auto& [event, count] : landed) where += "\n  " + std::to_string(count) + "x after " + event;
  std::printf(
      "%d kills, %d of them with a temporary checkpoint directory left behind, %d after the run ended; "
      "kills followed:%s\n",
      kTrials, killed_with_temporary_dir, ended_before_the_kill, where.c_str());
}

}  // namespace
}  // namespace ferry
