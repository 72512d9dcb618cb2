// Large saves through O_DIRECT (io/direct_file_writer.h behind io/atomic_file.h): the file holds
// exactly the bytes written, whatever the sizes of the writes and of the pieces filled in place
// (elements split across staging buffers included), the same bytes as the write() path; a
// safetensors file so written reads back. A full disk during such a save: io_atomic_file_test.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "io/atomic_file.h"
#include "io/direct_file_writer.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "test_util.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

// Restores the default (O_DIRECT allowed) when a test ends, passed or not.
struct DirectWrites {
  explicit DirectWrites(bool allow) { AtomicFile::allow_direct_writes(allow); }
  ~DirectWrites() { AtomicFile::allow_direct_writes(true); }
};

// Whether the file system of `dir` takes O_DIRECT and io_uring, as the save path would find it.
bool direct_here(const fs::path& dir) {
  AtomicFile probe(dir / "probe.bin");
  probe.reserve(kDirectWriteMinBytes);
  return probe.direct();
}

// A file of odd length written in odd pieces: a few bytes, a copy across a staging buffer's end,
// and pieces filled in place with 2-, 4- and 8-byte elements, one of them starting 2 bytes before
// a buffer's end (its first element is split across two buffers). Returns what the file must hold.
std::vector<std::byte> write_odd_file(const fs::path& path, bool* was_direct) {
  const size_t B = DirectFileWriter::kBufferBytes, total = 4 * B + 61;
  static_assert(4 * DirectFileWriter::kBufferBytes >= kDirectWriteMinBytes,
                "a file large enough for O_DIRECT");
  std::vector<std::byte> expected;
  AtomicFile file(path);
  file.reserve(total);
  *was_direct = file.direct();
  const auto put = [&](const void* data, size_t bytes) {
    file.write(data, bytes);
    const auto* p = static_cast<const std::byte*>(data);
    expected.insert(expected.end(), p, p + bytes);
  };
  const auto value = [](size_t at) { return static_cast<std::byte>(at * 131 % 251); };
  const auto filled = [&](size_t bytes, size_t granule) {
    const size_t base = expected.size();
    file.write_filled(bytes, granule, [&](std::byte* dst, size_t at, size_t count) {
      EXPECT_EQ(at % granule, 0u);
      EXPECT_EQ(count % granule, 0u);
      for (size_t i = 0; i < count; ++i) dst[i] = value(base + at + i);
    });
    for (size_t i = 0; i < bytes; ++i) expected.push_back(value(base + i));
  };
  std::vector<unsigned char> ramp(2 * B + 1);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<unsigned char>(i * 7);
  put("abc", 3);                  // ends at 3
  put(ramp.data(), ramp.size());  // 2 B + 4: across two buffers' ends
  filled(B - 10, 2);              // 3 B - 6
  put("xy", 2);                   // 3 B - 4
  filled(2, 2);                   // 3 B - 2: 2 bytes before the third buffer's end
  filled(64, 4);                  // 3 B + 62: its first element split across the buffers
  filled(B - 72, 8);              // 4 B - 10
  put("pq", 2);                   // 4 B - 8
  filled(64, 8);                  // 4 B + 56: across the fourth buffer's end
  put("12345", 5);                // 4 B + 61
  EXPECT_EQ(expected.size(), total);
  EXPECT_EQ(file.size(), total);
  file.commit();
  return expected;
}

TEST(DirectFileWriterTest, OddWritesAndFilledPiecesLeaveExactlyTheirBytes) {
  test::ScratchDir dir("direct");
  const bool direct_supported = direct_here(dir.path());
  for (const bool allow : {true, false}) {
    DirectWrites mode(allow);
    const fs::path path = dir / (allow ? "direct.bin" : "buffered.bin");
    bool was_direct = false;
    const std::vector<std::byte> expected = write_odd_file(path, &was_direct);
    EXPECT_EQ(was_direct, allow && direct_supported);
    const std::string bytes = test::read_file(path);
    ASSERT_EQ(bytes.size(), expected.size()) << "the padding of the last block must be cut off";
    EXPECT_EQ(std::memcmp(bytes.data(), expected.data(), bytes.size()), 0);
    EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
  }
  if (!direct_supported) GTEST_SKIP() << dir.path() << " takes no O_DIRECT: only the write() path ran";
}

// A checkpoint-sized safetensors file (larger than kDirectWriteMinBytes): fp32 as it is and bf16
// converted as written read back as the same values, and the file is byte for byte the one the
// write() path writes.
TEST(DirectFileWriterTest, ALargeSafetensorsFileReadsBackAndEqualsTheBufferedOne) {
  test::ScratchDir dir("direct-st");
  const std::vector<float> a = test::random_vector(8'000'003, 1), b = test::random_vector(3'000'001, 2);
  const std::vector<TensorToWrite> tensors = {
      {"a", DType::F32, {8'000'003}, a.data()},
      {"b", DType::BF16, {3'000'001}, nullptr, b.data()},
  };
  {
    DirectWrites mode(true);
    write_safetensors(dir / "direct.safetensors", tensors);
  }
  {
    DirectWrites mode(false);
    write_safetensors(dir / "buffered.safetensors", tensors);
  }
  EXPECT_GT(fs::file_size(dir / "direct.safetensors"), kDirectWriteMinBytes);
  EXPECT_TRUE(test::read_file(dir / "direct.safetensors") == test::read_file(dir / "buffered.safetensors"));
  const SafetensorsFile file = SafetensorsFile::open(dir / "direct.safetensors");
  const TensorInfo* a_info = file.find("a");
  const TensorInfo* b_info = file.find("b");
  ASSERT_TRUE(a_info != nullptr && b_info != nullptr);
  ASSERT_EQ(a_info->bytes, a.size() * 4);
  EXPECT_EQ(std::memcmp(file.data(*a_info), a.data(), a_info->bytes), 0);
  const std::vector<uint8_t> b_bf16 = encode_f32(b.data(), b.size(), DType::BF16);
  ASSERT_EQ(b_info->bytes, b_bf16.size());
  EXPECT_EQ(std::memcmp(file.data(*b_info), b_bf16.data(), b_info->bytes), 0);
}

}  // namespace
}  // namespace ferry
