// Atomic files when the disk fills up: a clear error naming the file, the errno and the sizes;
// the file's earlier content untouched and no temporary left behind.
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

TEST(AtomicFileTest, AFullDiskIsAClearErrorAndTheOldFileStays) {
  test::ScratchDir dir("atomic");
  const fs::path path = dir / "weights.safetensors";
  write_file_atomic(path, "the previous save");
  const std::vector<float> values = test::random_vector(64 * 1024, 3);  // 256 KiB
  const std::vector<TensorToWrite> tensors = {{"w", DType::F32, {64, 1024}, values.data()}};

  std::string message;
  {
    test::FileSizeLimit limit(100 * 1024);
    try {
      write_safetensors(path, tensors);
    } catch (const Error& e) {
      message = e.what();
    }
  }
  ASSERT_FALSE(message.empty()) << "a write past the file size limit must fail";
  EXPECT_TRUE(contains(message, path.string() + ".tmp")) << message;
  EXPECT_TRUE(contains(message, "EFBIG")) << message;
  EXPECT_TRUE(contains(message, "ulimit -f")) << message;
  EXPECT_EQ(test::read_file(path), "the previous save");
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));

  write_safetensors(path, tensors);  // with room again, the same save succeeds
  const std::string needed = "of the " + std::to_string(fs::file_size(path)) + " bytes";
  EXPECT_TRUE(contains(message, needed)) << "the message must say how much the file needs: " << message;
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
