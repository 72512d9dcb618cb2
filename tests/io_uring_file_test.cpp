// The io_uring streamer of the disk tier: bytes come back as written, in any order and with many
// requests in flight; misaligned requests, reads past the end, full disks and unopenable paths are
// clear errors; a run's scratch file is removed at exit and a dead run's is cleaned up.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "file_size_limit.h"
#include "io/scratch_file.h"
#include "io/uring_file.h"
#include "test_util.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;
constexpr size_t kAlign = UringFile::kAlignment;

struct AlignedBytes {
  explicit AlignedBytes(size_t bytes)
      : data(static_cast<std::byte*>(std::aligned_alloc(kAlign, bytes)), std::free), size(bytes) {}
  std::unique_ptr<std::byte, decltype(&std::free)> data;
  size_t size;
  std::span<std::byte> span() { return {data.get(), size}; }
  std::span<std::byte> sub(size_t offset, size_t bytes) { return {data.get() + offset, bytes}; }
};

void fill_random(std::span<std::byte> bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (auto& b : bytes) b = static_cast<std::byte>(rng());
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(UringFileTest, ManyRequestsInFlightReadBackWhatWasWrittenInAnyOrder) {
  test::ScratchDir dir("uring");
  constexpr size_t kChunk = 64 * 1024, kChunks = 48;
  AlignedBytes out(kChunk * kChunks), in(kChunk * kChunks);
  fill_random(out.span(), 7);
  std::memset(in.data.get(), 0, in.size);
  // Small pieces and a shallow queue: each transfer is cut into 4 requests, and the queue is full.
  UringFile file(dir / "state.bin", kChunk * kChunks, {out.span(), in.span()},
                 {.queue_depth = 8, .max_request_bytes = kChunk / 4});
  std::vector<UringFile::Ticket> writes;
  for (size_t i = 0; i < kChunks; ++i) {
    const size_t c = (i * 7) % kChunks;  // scattered order
    writes.push_back(file.write(c * kChunk, out.sub(c * kChunk, kChunk)));
  }
  EXPECT_EQ(file.peak_in_flight(), 8u) << "the queue is kept full";
  for (auto it = writes.rbegin(); it != writes.rend(); ++it) file.wait(*it);  // waited in reverse
  std::vector<UringFile::Ticket> reads;
  for (size_t c = 0; c < kChunks; ++c) reads.push_back(file.read(c * kChunk, in.sub(c * kChunk, kChunk)));
  file.wait_all();
  EXPECT_EQ(std::memcmp(out.data.get(), in.data.get(), out.size), 0);
  EXPECT_EQ(file.in_flight(), 0u);
}

TEST(UringFileTest, DoneDoesNotBlockAndWaitIsIdempotent) {
  test::ScratchDir dir("uring");
  AlignedBytes buffer(1 << 20);
  fill_random(buffer.span(), 3);
  UringFile file(dir / "state.bin", buffer.size, {buffer.span()});
  const auto t = file.write(0, buffer.span());
  while (!file.done(t)) {
  }
  file.wait(t);
  file.wait(t);  // a second wait returns at once
  EXPECT_TRUE(file.done(t));
}

TEST(UringFileTest, MisalignedRequestsAreRefused) {
  test::ScratchDir dir("uring");
  AlignedBytes buffer(4 * kAlign);
  UringFile file(dir / "state.bin", 4 * kAlign, {buffer.span()});
  EXPECT_TRUE(contains(message_of([&] { file.read(100, buffer.sub(0, kAlign)); }), "multiples of 4096"));
  EXPECT_TRUE(contains(message_of([&] { file.read(0, buffer.sub(0, 100)); }), "multiples of 4096"));
  EXPECT_TRUE(contains(message_of([&] { file.read(0, buffer.sub(8, kAlign)); }), "multiples of 4096"));
  EXPECT_TRUE(contains(message_of([&] { file.read(4 * kAlign, buffer.sub(0, kAlign)); }), "past the end"));
  AlignedBytes odd(kAlign);
  EXPECT_TRUE(contains(message_of([&] {
                         UringFile f(dir / "odd.bin", kAlign,
                                     {std::span<std::byte>(odd.data.get() + 16, 64)});
                       }),
                       "not aligned"));
}

TEST(UringFileTest, AReadPastTheEndOfAShortFileIsAnError) {
  test::ScratchDir dir("uring");
  const fs::path path = dir / "short.bin";
  {
    AlignedBytes b(kAlign);
    fill_random(b.span(), 1);
    UringFile file(path, kAlign, {b.span()});
    file.wait(file.write(0, b.span()));
  }
  AlignedBytes buffer(4 * kAlign);
  // Opened as it is (one block long) but told it holds four: the read comes back short, the
  // remainder is asked again and reaches the end of the file.
  UringFile file(path, 4 * kAlign, {buffer.span()}, {.create = false});
  const auto t = file.read(0, buffer.span());
  const std::string message = message_of([&] { file.wait(t); });
  EXPECT_TRUE(contains(message, "end of file")) << message;
  EXPECT_TRUE(contains(message, "offset 4096")) << message;
  EXPECT_TRUE(contains(message, path.string())) << message;
}

TEST(UringFileTest, AFullDiskIsAnErrorWithWhatToDo) {
  // /dev/full answers every write with ENOSPC. It also refuses O_DIRECT (EINVAL), as tmpfs did
  // before Linux 6.6: the file is then opened buffered, and a line says so.
  AlignedBytes buffer(kAlign);
  ::testing::internal::CaptureStderr();
  UringFile file("/dev/full", kAlign, {buffer.span()}, {.create = false});
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(file.direct());
  EXPECT_TRUE(contains(log, "refuses O_DIRECT")) << log;
  const auto t = file.write(0, buffer.span());
  const std::string message = message_of([&] { file.wait(t); });
  EXPECT_TRUE(contains(message, "ENOSPC")) << message;
  EXPECT_TRUE(contains(message, "free space")) << message;
}

TEST(UringFileTest, NoRoomToPreallocateIsRefusedUpFront) {
  test::ScratchDir dir("uring");
  AlignedBytes buffer(kAlign);
  std::string message;
  {
    test::FileSizeLimit limit(64 * 1024);
    message = message_of([&] { UringFile f(dir / "big.bin", 1 << 20, {buffer.span()}); });
  }
  EXPECT_TRUE(contains(message, "cannot set aside 1.00 MiB")) << message;
  EXPECT_TRUE(contains(message, "disk_memory")) << message;
  EXPECT_FALSE(fs::exists(dir / "big.bin")) << "a refused file is not left behind";
}

TEST(UringFileTest, ErrorMessagesNameTheErrnoAndWhatToDo) {
  const std::string eio = uring_failure_message("/scratch/f", false, 4096, 1 << 24, EIO);
  EXPECT_TRUE(contains(eio, "EIO")) << eio;
  EXPECT_TRUE(contains(eio, "reading 16.00 MiB at offset 4096 of /scratch/f")) << eio;
  EXPECT_TRUE(contains(eio, "dmesg")) << eio;
  const std::string enospc = uring_failure_message("/scratch/f", true, 0, 4096, ENOSPC);
  EXPECT_TRUE(contains(enospc, "writing")) << enospc;
  EXPECT_TRUE(contains(enospc, "free space")) << enospc;
}

// A completion of nothing would be issued again forever; what each kind of result fails with.
TEST(UringFileTest, ATransferOfNothingIsAFailureNotARetry) {
  EXPECT_EQ(transfer_failure(4096, true), std::nullopt);
  EXPECT_EQ(transfer_failure(1, false), std::nullopt);  // short: the rest goes again
  EXPECT_EQ(transfer_failure(0, true), ENOSPC);         // a write the file system took none of
  EXPECT_EQ(transfer_failure(0, false), 0);             // a read at the end of the file
  EXPECT_EQ(transfer_failure(-EIO, true), EIO);
  EXPECT_EQ(transfer_failure(-EFBIG, true), EFBIG);
  const std::string full =
      uring_failure_message("/out/m.safetensors", true, 0, 4096, *transfer_failure(0, true), UringUse::Save);
  EXPECT_TRUE(contains(full, "free disk space")) << full;
  const std::string short_file =
      uring_failure_message("/scratch/f", false, 0, 4096, *transfer_failure(0, false));
  EXPECT_TRUE(contains(short_file, "end of file")) << short_file;
}

TEST(UringFileTest, AnUnopenablePathSaysWhatToDo) {
  AlignedBytes buffer(kAlign);
  const std::string message =
      message_of([&] { UringFile f("/proc/no-such-dir/state.bin", kAlign, {buffer.span()}); });
  EXPECT_TRUE(contains(message, "disk_dir")) << message;
}

TEST(UringFileTest, TmpfsWorksWithOrWithoutODirect) {
  // tmpfs took O_DIRECT only in Linux 6.6: older kernels open the file buffered, with a log line.
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  const fs::path path = fs::path("/dev/shm") / ("ferry-uring-test-" + std::to_string(::getpid()));
  AlignedBytes out(1 << 20), in(1 << 20);
  fill_random(out.span(), 11);
  {
    UringFile file(path, out.size, {out.span(), in.span()});
    file.wait(file.write(0, out.span()));
    file.wait(file.read(0, in.span()));
  }
  ::unlink(path.c_str());
  EXPECT_EQ(std::memcmp(out.data.get(), in.data.get(), out.size), 0);
}

// Whether a process (this one, through another open file) can take the lock a run holds.
bool lockable(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path;
  const bool ok = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(fd);
  return ok;
}

TEST(ScratchFileTest, EachRunHasItsOwnLockedFileRemovedAtExit) {
  test::ScratchDir dir("scratch");
  fs::path mine;
  {
    ScratchFile scratch(dir.path());
    // Runs in two containers may have one pid: the same process's second file is another file.
    ScratchFile same_pid(dir.path());
    mine = scratch.path();
    EXPECT_NE(same_pid.path(), mine);
    EXPECT_TRUE(fs::exists(mine) && fs::exists(same_pid.path()));
    EXPECT_FALSE(lockable(mine)) << "held while the run lives";
    AlignedBytes b(kAlign);
    UringFile file(mine, kAlign, {b.span()});
    EXPECT_EQ(fs::file_size(mine), kAlign);
    EXPECT_TRUE(fs::exists(same_pid.path())) << "one run's file never touches another's";
  }
  EXPECT_FALSE(fs::exists(mine));
}

TEST(ScratchFileTest, OnlyFilesNoProcessHoldsAreCleaned) {
  test::ScratchDir dir("scratch");
  const fs::path stale = dir / "ferry-state-12345-0badcafe.bin";
  const fs::path old_name = dir / "ferry-state-12346.bin";  // runs before the tag
  const fs::path held = dir / "ferry-state-12347-00c0ffee.bin";
  const fs::path other = dir / "ferry-state-notes.bin";
  for (const auto& p : {stale, old_name, held, other}) std::ofstream(p) << "x";
  // Held by a run whose pid means nothing here (another container or host).
  const int holder = ::open(held.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_EQ(::flock(holder, LOCK_EX | LOCK_NB), 0);
  { ScratchFile scratch(dir.path()); }
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(old_name));
  EXPECT_TRUE(fs::exists(held)) << "a held file stays, whatever its pid";
  EXPECT_TRUE(fs::exists(other)) << "a name that is not ours stays";
  ::close(holder);
  EXPECT_EQ(remove_stale_scratch_files(dir.path()), std::vector<fs::path>{held});
}

TEST(ScratchFileTest, FreeSpaceIsKnown) {
  test::ScratchDir dir("scratch");
  EXPECT_GT(free_disk_bytes(dir.path()), 0u);
}

}  // namespace
}  // namespace ferry
