// Atomic files when the disk fills up: a clear error naming the file, the errno and the sizes;
// the file's earlier content untouched and no temporary left behind. Two writers of one file, and
// a temporary a killed writer left.
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "file_size_limit.h"
#include "io/atomic_file.h"
#include "io/completion_marker.h"
#include "io/safetensors_writer.h"
#include "test_util.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A save of `count` floats under a file size limit of `limit` bytes fails with an error that names
// the temporary file, the errno, what to do and the size the file needs; the earlier file stays,
// no temporary is left, and with room again the same save succeeds. Returns whether the save went
// through O_DIRECT.
bool expect_a_full_disk_is_a_clear_error(size_t count, uint64_t limit) {
  test::ScratchDir dir("atomic");
  const fs::path path = dir / "weights.safetensors";
  write_file_atomic(path, "the previous save");
  const std::vector<float> values = test::random_vector(count, 3);
  const std::vector<TensorToWrite> tensors = {
      {"w", DType::F32, {static_cast<int64_t>(count)}, values.data()}};
  bool direct = false;
  {
    AtomicFile probe(dir / "probe");
    probe.reserve(count * sizeof(float));
    direct = probe.direct();
  }
  std::string message;
  {
    test::FileSizeLimit limit_here(limit);
    try {
      write_safetensors(path, tensors);
    } catch (const Error& e) {
      message = e.what();
    }
  }
  EXPECT_FALSE(message.empty()) << "a write past the file size limit must fail";
  EXPECT_TRUE(contains(message, path.string() + ".tmp")) << message;
  EXPECT_TRUE(contains(message, "EFBIG")) << message;
  EXPECT_TRUE(contains(message, "ulimit -f")) << message;
  EXPECT_FALSE(contains(message, "disk_dir")) << "a save is not the disk tier: " << message;
  EXPECT_EQ(test::read_file(path), "the previous save");
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));

  write_safetensors(path, tensors);  // with room again, the same save succeeds
  EXPECT_EQ(test::read_file(path).size(), fs::file_size(path));
  const std::string needed = std::to_string(fs::file_size(path)) + " bytes";
  EXPECT_TRUE(contains(message, "the file needs") && contains(message, needed))
      << "the message must say how much the file needs: " << message;
  return direct;
}

TEST(AtomicFileTest, AFullDiskIsAClearErrorAndTheOldFileStays) {
  EXPECT_FALSE(expect_a_full_disk_is_a_clear_error(64 * 1024, 100 * 1024));  // 256 KiB: write()
}

// The same in the middle of a save large enough for O_DIRECT (io/direct_file_writer.h).
TEST(AtomicFileTest, AFullDiskDuringAnODirectSaveIsAClearErrorAndTheOldFileStays) {
  const bool direct = expect_a_full_disk_is_a_clear_error(12 << 20, 20 << 20);  // 48 MiB
  if (!direct) GTEST_SKIP() << "the scratch directory's file system takes no O_DIRECT: write() ran";
}

// reserve() sets space aside without growing the file: a file written shorter than reserved has
// no trailing zeros.
TEST(AtomicFileTest, ReserveDoesNotChangeTheFilesLength) {
  test::ScratchDir dir("reserve");
  AtomicFile file(dir / "a.bin");
  file.reserve(1 << 20);
  file.write("12345");
  file.commit();
  EXPECT_EQ(test::read_file(dir / "a.bin"), "12345");
}

// Two writers of one file at once (runs sharing a cache directory): each publishes its whole
// content, the second beside the first's locked temporary rather than over it; nothing is left.
TEST(AtomicFileTest, TwoWritersOfOneFileEachPublishAWholeFile) {
  test::ScratchDir dir("atomic-two");
  const fs::path path = dir / "choices.json";
  AtomicFile first(path);
  first.write("the first writer's content");
  AtomicFile second(path);
  EXPECT_NE(second.temp_path(), first.temp_path());
  second.write("the second's");
  first.commit();
  EXPECT_EQ(test::read_file(path), "the first writer's content");
  second.commit();
  EXPECT_EQ(test::read_file(path), "the second's");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

// A temporary that a killed writer left is nobody's: the next writer takes it and empties it.
TEST(AtomicFileTest, ATemporaryAKilledWriterLeftIsTakenAndEmptied) {
  test::ScratchDir dir("atomic-stale");
  const fs::path path = dir / "weights.safetensors";
  std::ofstream(path.string() + ".tmp") << "half of an earlier save, much longer than the next one";
  {
    AtomicFile file(path);
    EXPECT_EQ(file.temp_path(), fs::path(path.string() + ".tmp"));
    file.write("whole");
    file.commit();
  }
  EXPECT_EQ(test::read_file(path), "whole");
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
  {
    AtomicFile abandoned(path);  // an exception before commit: the temporary goes with it
    abandoned.write("never published");
  }
  EXPECT_EQ(test::read_file(path), "whole");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(AtomicFileTest, ContainingDirectoryIsWhatARenameChanges) {
  EXPECT_EQ(containing_directory("model.safetensors"), std::filesystem::path("."));
  EXPECT_EQ(containing_directory("out/model.safetensors"), std::filesystem::path("out"));
  EXPECT_EQ(containing_directory("/runs/a/step-10"), std::filesystem::path("/runs/a"));
  EXPECT_EQ(containing_directory("/model"), std::filesystem::path("/"));
}

TEST(CompletionMarkerTest, MarksAndUnmarks) {
  test::ScratchDir dir("marker");
  EXPECT_FALSE(is_marked_complete(dir.path()));
  mark_complete(dir.path());
  EXPECT_TRUE(is_marked_complete(dir.path()));
  unmark_complete(dir.path());
  EXPECT_FALSE(is_marked_complete(dir.path()));
  unmark_complete(dir.path());  // no marker: nothing to do
}

}  // namespace
}  // namespace ferry
