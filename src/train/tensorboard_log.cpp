#include "train/tensorboard_log.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "core/error.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "tensorboard";

std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // the reflected polynomial
    table[i] = c;
  }
  return table;
}

// Protocol buffer encoding of the few fields an Event with simple values has.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_tag(std::string& out, uint32_t field, uint32_t wire_type) {
  put_varint(out, (field << 3) | wire_type);
}
template <typename T>
void put_fixed(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char byte : data) c = table[(c ^ byte) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

std::filesystem::path tensorboard_run_dir(const std::filesystem::path& output_dir) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
  return output_dir / "runs" / (std::string(stamp) + "_" + host_name());
}

TensorBoardLog::TensorBoardLog(const std::filesystem::path& run_dir) {
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  FERRY_CHECK(!ec, kWhere, "cannot create {}: {}; check that output_dir is writable", run_dir.string(),
              ec.message());
  path_ = run_dir / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(wall_time())) + "." +
                     host_name() + "." + std::to_string(::getpid()) + ".0");
  file_ = std::fopen(path_.c_str(), "wb");
  FERRY_CHECK(file_ != nullptr, kWhere, "cannot create {}: {}", path_.string(), std::strerror(errno));
  std::string event;
  put_tag(event, 1, 1);  // wall_time
  put_fixed(event, wall_time());
  put_bytes(event, 3, "brain.Event:2");  // file_version
  write_record(event);
}

TensorBoardLog::~TensorBoardLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void TensorBoardLog::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    put_bytes(v, 1, tag);  // Summary.Value.tag
    put_tag(v, 2, 5);      // Summary.Value.simple_value (float)
    put_fixed(v, static_cast<float>(value));
    put_bytes(summary, 1, v);  // Summary.value
  }
  std::string event;
  put_tag(event, 1, 1);
  put_fixed(event, wall_time());
  put_tag(event, 2, 0);  // step
  put_varint(event, static_cast<uint64_t>(step));
  put_bytes(event, 5, summary);  // summary
  write_record(event);
  FERRY_CHECK(std::fflush(file_) == 0, kWhere, "writing {} failed: {}; is the disk full?", path_.string(),
              std::strerror(errno));
}

void TensorBoardLog::write_record(const std::string& data) {
  std::string header;
  put_fixed(header, static_cast<uint64_t>(data.size()));
  std::string record = header;
  put_fixed(record, masked_crc32c(header));
  record += data;
  put_fixed(record, masked_crc32c(data));
  FERRY_CHECK(std::fwrite(record.data(), 1, record.size(), file_) == record.size(), kWhere,
              "writing {} failed: {}; is the disk full?", path_.string(), std::strerror(errno));
}

}  // namespace ferry
